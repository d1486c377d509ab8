"""The TokenMixer contract and the context a forward pass shares across layers.

A mixer is an ``nn.Module`` built as ``cls(d_model=, max_len=, layer_idx=, **hparams)`` and called as
``forward(x: [B, L, D], ctx: MixerContext) -> [B, L, D]``; it is always causal (output t depends on
inputs ≤ t only). A mixer that exposes attention scores applies, in this order::

    logits += ctx.bias_for(layer, logits)   # the intervention
    probs = softmax(logits)
    probs = ctx.patch_for(layer, probs)      # head patching
    ctx.record(layer, probs)                 # when ctx.capture is set

Inference state (``TokenMixer.state_size``): the count of numbers one layer must keep, per sequence,
to continue generating after ``length`` tokens, counted at the smallest form the layer's equations
need. What counts: an attention's KV cache (keys and values of every past token); a recurrence's
state matrices and vectors (its memory, normalisers, stabilisers); the past inputs a causal
convolution or token shift still has to see (width - 1 of them per channel, a fixed-size buffer
whatever the length); for a mixer with no recurrence (MLP-Mixer), the past inputs it mixes. A
complex entry counts as 2 reals. What does not count: parameters, activations recomputed from the
state, values shared across layers within one token (RWKV-7's first-layer value), and the batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn

# Backend names recorded in results.
TORCH = "torch"


@dataclass
class MixerContext:
    """What one forward pass shares across layers, and the attention controls.

    bias:    layer_idx -> additive logits bias broadcastable to [B, H, L, L]
    patch:   layer_idx -> function(probs [B, H, L, L]) -> probs [B, H, L, L]
    capture: record every attention layer's probabilities in ``attention``
    shared:  free-form values passed between layers (e.g. a first layer's value)
    """

    bias: dict[int, torch.Tensor] = field(default_factory=dict)
    patch: dict[int, Callable[[torch.Tensor], torch.Tensor]] = field(default_factory=dict)
    capture: bool = False
    attention: dict[int, torch.Tensor] = field(default_factory=dict)
    shared: dict = field(default_factory=dict)

    def intervenes_on(self, layer_idx: int) -> bool:
        return self.capture or layer_idx in self.bias or layer_idx in self.patch

    def bias_for(self, layer_idx: int, logits: torch.Tensor) -> torch.Tensor:
        bias = self.bias.get(layer_idx)
        return logits if bias is None else logits + bias.to(logits.dtype)

    def patch_for(self, layer_idx: int, probs: torch.Tensor) -> torch.Tensor:
        patch = self.patch.get(layer_idx)
        return probs if patch is None else patch(probs)

    def record(self, layer_idx: int, probs: torch.Tensor) -> None:
        if self.capture:
            self.attention[layer_idx] = probs.detach()


class TokenMixer(nn.Module):
    """Base class for built-in mixers; subclasses define ``forward(x, ctx)``. Plugins may subclass
    it or just follow the contract.

    Class-level facts the suite reads:
      exposes_attention: whether ``ctx`` bias/patch/capture act on real attention probabilities
      backends:          the backends this mixer has
    and, on an instance of a mixer that exposes attention:
      n_heads:           H, the number of attention heads (its probabilities are [B, H, L, L])

    The settings the suite builds it with, registered beside it (config keys over its defaults;
    {} means the defaults; read them, never change them):
      small:             a fast instance at d_model 16 (the tests, check-mixer's contract)
      width_matched:     the Transformer's width at d_model 64, 4 heads × 16 (``speed``)
      forms:             other forms worth checking on their own: form name -> its small settings
    """

    exposes_attention: bool = False
    backends: tuple[str, ...] = (TORCH,)
    n_heads: int | None = None
    small: dict = {}
    width_matched: dict = {}
    forms: dict[str, dict] = {}

    def __init__(self, d_model: int, max_len: int, layer_idx: int) -> None:
        super().__init__()
        self.d_model = d_model
        self.max_len = max_len
        self.layer_idx = layer_idx

    @property
    def backend(self) -> str:
        """The backend this instance runs on now."""
        return self.backends[0]

    @staticmethod
    def no_weight_decay(*params: nn.Parameter) -> None:
        """Mark ``params`` to be left out of weight decay (``_no_weight_decay``, the flag fla and Mamba
        use; emergence_bench.engine.optim.is_decayed reads it): decay rates and step sizes should not shrink."""
        for param in params:
            setattr(param, "_no_weight_decay", True)  # a flag on the tensor: Parameter declares no such field

    def state_size(self, length: int) -> int | None:
        """The number of numbers one layer of this mixer keeps per sequence to continue generating
        after ``length`` tokens (see the module docstring for what counts): grows with ``length``
        for attention, constant for a recurrent mixer. None means not stated (shown as '-'); every
        built-in mixer states it."""
        return None


def width_matched_spec(name: str) -> dict:
    """The mixer spec ``{"name": name, **settings}`` of registered mixer ``name`` at the Transformer's
    width (d_model 64, 4 heads × 16): its class's ``width_matched`` settings (``speed``, check-mixer)."""
    from emergence_bench import registry  # (the registry imports the built-in mixers when first read)

    return {"name": name, **getattr(registry.mixers.get(name), "width_matched", {})}
