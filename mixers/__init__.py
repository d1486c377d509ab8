"""Token mixers: one module per mixer. Importing this package (or ``mixers.base``) loads none of
them: ``registry.mixers`` imports the modules ``BUILTINS`` names when a class is first asked for, and
each registers its mixer; their names and keys it reads from ``catalog.py`` alone."""

BUILTINS = ("attention", "gated_deltanet", "lru", "mamba", "mlp_mixer", "mlstm", "rwkv")
