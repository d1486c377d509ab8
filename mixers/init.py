"""Named weight initialisations (``model.init``): how a Linear or an Embedding starts.

The plateau length depends on the init (small initial attention logits keep attention uniform for
longer), so the scheme is a recorded config choice, never a hidden one:

    torch_default  each module's own ``reset_parameters`` (Linear: U(±1/√fan_in), Embedding: N(0, 1))
    lecun_normal   Linear weights N(0, 1/fan_in), zero biases, embeddings N(0, 0.02): the init of
                   the JAX reproduction of the paper (cwhy/seewhy; flax's ``lecun_normal`` is the
                   same variance, truncated at 2σ)
    normal         Linear and Embedding weights N(0, std), zero biases (nanoGPT; ``model.init_std``)

``scale`` (``model.init_scale``) multiplies every weight a scheme sets, Linear and Embedding (not
biases, norms, or a mixer's own architecture-specific parameters), so a sweep can put the init scale
on an axis. Norms always start at ones and zeros.

SequenceModel applies the scheme to what it owns. A mixer owns its init: it gets the scheme through
``init_weights(init)`` when it defines that method (the built-in mixers pass their generic
projections to ``init.linear_`` and keep their architecture-specific parameters, such as Mamba's
step sizes or RWKV-7's official init, as they are); a mixer without it keeps what its constructor did.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from emergence_bench.config import SCHEMES, InitScheme

EMBEDDING_STD = 0.02


@dataclass(frozen=True)
class WeightInit:
    """One named scheme with its parameters; ``linear_``/``embedding_``/``matrix_`` apply it in place."""

    scheme: InitScheme = "lecun_normal"
    std: float = 0.02
    scale: float = 1.0

    def __post_init__(self) -> None:
        if self.scheme not in SCHEMES:
            raise ValueError(f"model.init must be one of {', '.join(SCHEMES)}, got {self.scheme!r}")
        if not self.std > 0:
            raise ValueError(f"model.init_std must be > 0, got {self.std}")
        if not self.scale > 0:
            raise ValueError(f"model.init_scale must be > 0, got {self.scale}")

    @torch.no_grad()
    def matrix_(self, weight: torch.Tensor, fan_in: int) -> torch.Tensor:
        """A weight matrix used as ``x @ W.T`` (or ``x @ W``) with ``fan_in`` inputs per output."""
        if self.scheme == "torch_default":
            bound = 1 / math.sqrt(fan_in)  # what nn.Linear.reset_parameters gives its weight
            weight.uniform_(-bound, bound)
        elif self.scheme == "lecun_normal":
            weight.normal_(0.0, 1 / math.sqrt(fan_in))
        else:
            weight.normal_(0.0, self.std)
        return weight.mul_(self.scale)

    @torch.no_grad()
    def linear_(self, module: nn.Linear) -> nn.Linear:
        if self.scheme == "torch_default":
            module.reset_parameters()
            module.weight.mul_(self.scale)
        else:
            self.matrix_(module.weight, module.in_features)
            if module.bias is not None:
                module.bias.zero_()
        return module

    @torch.no_grad()
    def embedding_(self, module: nn.Embedding) -> nn.Embedding:
        if self.scheme == "torch_default":
            module.reset_parameters()
        else:
            module.weight.normal_(0.0, self.std if self.scheme == "normal" else EMBEDDING_STD)
        module.weight.mul_(self.scale)
        return module

    def apply_(self, module: nn.Module) -> None:
        """Every Linear, Embedding and LayerNorm directly inside ``module`` (recursively)."""
        for child in module.modules():
            if isinstance(child, nn.Linear):
                self.linear_(child)
            elif isinstance(child, nn.Embedding):
                self.embedding_(child)
            elif isinstance(child, nn.LayerNorm):
                child.reset_parameters()
