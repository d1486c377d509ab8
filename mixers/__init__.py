"""Token mixers: one module per mixer. Importing this package registers the built-ins."""

from emergence_bench.mixers import attention, gated_deltanet, lru, mamba, mlp_mixer, mlstm, rwkv  # noqa: F401
