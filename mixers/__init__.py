"""Token mixers: one module per mixer. Importing this package registers the built-ins."""

from emergence_bench.mixers import attention, gated_deltanet, mamba, mlp_mixer, rwkv  # noqa: F401
