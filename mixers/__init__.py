"""Token mixers: one module per mixer. Importing this package (or ``mixers.base``) loads none of
them: ``registry.mixers`` imports the modules ``BUILTINS`` names when it is first read, and each
registers its mixer."""

BUILTINS = ("attention", "gated_deltanet", "lru", "mamba", "mlp_mixer", "mlstm", "rwkv")
