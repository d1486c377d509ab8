"""The built-in mixers as the registry knows them before importing one (a mixer's module imports
torch): where each class is, its config keys (a function with its constructor's signature, less
d_model, max_len and layer_idx, which the model passes), and what `list` says of it. A mixer-key
mistake and `emergence-bench list` are answered from here, without torch. tests/test_catalog.py
checks every entry against its class: a new built-in mixer adds its own."""

from __future__ import annotations

import math

from emergence_bench.registry import Declared

KERNEL = {"backends": ("reference", "kernel")}  # a GPU kernel's package when it imports, else the reference


def gated_deltanet(n_heads: int = 4, head_dim: int = 16, expand_v: float = 2, conv_size: int = 4,
                   chunk_size: int = 16) -> None: ...


def lru(d_state: int = 64, r_min: float = 0.0, r_max: float = 1.0, max_phase: float = 2 * math.pi) -> None: ...


def mamba(d_state: int = 16, d_conv: int = 4, expand: int = 2, dt_rank: int | str = "auto") -> None: ...


def mlp_mixer(token_mixing: str = "static", n_heads: int = 8, head_dim: int = 8, expansion: int = 2,
              mixing_init: str = "uniform") -> None: ...


def mlstm(n_heads: int = 4, proj_factor: float = 2, conv_size: int = 4, qkv_blocksize: int = 4,
          forget_gate: str = "sigmoid", quadratic_up_to: int = 64) -> None: ...


def rwkv7(head_dim: int = 16, decay_lora: int = 16, a_lora: int = 16, v_lora: int = 8, gate_lora: int = 32) -> None: ...


def transformer(n_heads: int = 8, head_dim: int = 8) -> None: ...


CATALOG = {
    "gated_deltanet": Declared("emergence_bench.mixers.gated_deltanet.GatedDeltaNet", gated_deltanet, KERNEL),
    "lru": Declared("emergence_bench.mixers.lru.LRU", lru),
    "mamba": Declared("emergence_bench.mixers.mamba.Mamba", mamba, KERNEL),
    "mlp_mixer": Declared("emergence_bench.mixers.mlp_mixer.CausalMLPMixer", mlp_mixer),
    "mlstm": Declared("emergence_bench.mixers.mlstm.MLSTM", mlstm, KERNEL),
    "rwkv7": Declared("emergence_bench.mixers.rwkv.RWKV7TimeMix", rwkv7, KERNEL),
    "transformer": Declared("emergence_bench.mixers.attention.CausalSelfAttention", transformer,
                            {"exposes_attention": True}),
}
