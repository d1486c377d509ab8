"""What makes K seeds' forward and backward one vmapped computation on CPU: a batching rule for
CPU flash attention and the context every vmapped forward and backward runs in (``vmapped``)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

# functorch warns when an op has no batching rule and it loops over the seeds instead.
_NO_BATCH_RULE = ".*There is a performance drop because we have not yet implemented the batching rule.*"


def _fold_flash_attention(info: Any, in_dims: tuple, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                          dropout_p: float = 0.0, is_causal: bool = False, attn_mask: torch.Tensor | None = None,
                          scale: float | None = None) -> tuple[tuple, tuple]:
    """Batching rule of CPU flash attention: the seeds are more sequences, so the vmapped dim is
    folded into the batch dim. q, k, v [K, B, H, L, E] (vmapped dim anywhere) -> one kernel call on
    [K·B, H, L, E] -> (out [K, B, H, L, E], logsumexp [K, B, H, L]), each seed's numbers exactly
    those of its own call. Autograd records the kernel on the folded tensors, so the backward is
    one kernel call too."""
    if dropout_p:
        raise RuntimeError("seed-parallel attention does not support dropout (its randomness is per call)")
    K = info.batch_size

    def fold(x: torch.Tensor, dim: int | None) -> torch.Tensor:
        x = x.movedim(dim, 0) if dim is not None else x.expand(K, *x.shape)
        return x.reshape(K * x.shape[1], *x.shape[2:])

    q, k, v = (fold(x, d) for x, d in zip((q, k, v), in_dims[:3]))
    if attn_mask is not None:
        dim = in_dims[5]
        mask = attn_mask.movedim(dim, 0) if dim is not None else attn_mask.expand(K, *attn_mask.shape)
        while mask.dim() < 5:  # [K, B|1, H|1, L, S]
            mask = mask.unsqueeze(1)
        attn_mask = mask.expand(K, q.shape[0] // K, *mask.shape[2:]).reshape(q.shape[0], *mask.shape[2:])
    out, logsumexp = _FLASH_CPU(q, k, v, dropout_p, is_causal, attn_mask=attn_mask, scale=scale)
    return (out.unflatten(0, (K, -1)), logsumexp.unflatten(0, (K, -1))), (0, 0)


_FLASH_CPU = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
_flash_rule: str | None = None  # "registered", or why not (then SDPA's math backend is used)
_flash_library = None  # keeps the registration alive


def register_flash_rule() -> str:
    """Give CPU flash attention a batching rule (once per process). torch has none: its fallback
    loops over the seeds and its backward zero-fills a full [K, ...] gradient per seed, which costs
    more than the rest of a small model. torch.library.register_vmap refuses this op (it has a
    keyword-only tensor), so this does what it does, with the arguments passed positionally.
    Needs private functorch helpers; where they are missing, SDPA's math backend is used instead."""
    global _flash_rule, _flash_library
    if _flash_rule is not None:
        return _flash_rule
    try:
        from torch._functorch.autograd_function import custom_function_call_vmap_helper
        from torch._functorch.pyfunctorch import VmapInterpreter, retrieve_current_functorch_interpreter

        def batched(keyset: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0,
                    is_causal: bool = False, *, attn_mask: torch.Tensor | None = None,
                    scale: float | None = None) -> Any:
            interpreter = cast(VmapInterpreter, retrieve_current_functorch_interpreter())  # this rule is vmap's
            return custom_function_call_vmap_helper(interpreter, _fold_flash_attention,
                                                    _FLASH_CPU, q, k, v, dropout_p, is_causal, attn_mask, scale)

        library = torch.library.Library("aten", "IMPL")
        library.impl("_scaled_dot_product_flash_attention_for_cpu", batched, "FuncTorchBatched", with_keyset=True)
        _flash_library, _flash_rule = library, "registered"
    except Exception as error:  # another torch version: the math backend still batches
        _flash_rule = f"{type(error).__name__}: {error}"
    return _flash_rule


@contextmanager
def vmapped(device: torch.device) -> Iterator[None]:
    """Context of every vmapped forward and backward: quiet about batching-rule fallbacks, and on
    CPU without the flash-attention rule above, SDPA's math backend (batched matmuls and a softmax;
    the same attention within float rounding) rather than the per-seed fallback loop."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_NO_BATCH_RULE)
        if device.type == "cpu" and register_flash_rule() != "registered":
            with sdpa_kernel([SDPBackend.MATH]):
                yield
        else:
            yield

