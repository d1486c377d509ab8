"""Causal head patching: which attention heads carry a capability that emerged between two checkpoints?

Run the old (pre-emergence) model on a probe batch with one head's attention probabilities replaced
by a source's — the new (post-emergence) model's maps on the same batch, or the task's ground-truth
pattern, row-normalised — and measure Δp, the change in the mean probability of the correct token.
Rank the heads by Δp, patch the top K together, and report the fraction of the old→new gap in
p(correct) that they recover (docs/science.md, "Causal head patching").

The ranking logic is generic over a function ``p_correct(heads) -> float`` (the old model with those
heads patched), so SequenceModel runs (through ``MixerContext.patch``, for every mixer that exposes
attention scores) and Hugging Face models (analysis/pythia.py) share it.
"""

from __future__ import annotations

from typing import Callable, Iterable

import torch

from emergence_bench.engine.model import SequenceModel
from emergence_bench.engine.training import scored
from emergence_bench.mixers.base import MixerContext

Head = tuple[int, int]  # (layer, head)
GAP_EPS = 1e-6  # below this the old→new gap is too small to divide by


def replace_heads(source: dict[int, torch.Tensor], heads: Iterable[Head]) -> dict[int, Callable]:
    """``MixerContext.patch`` functions: layer -> fn(probs [B, H, L, L]) -> probs with the listed
    heads' maps taken from ``source[layer]`` (broadcastable to [B, H, L, L])."""
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)

    def patcher(layer: int, chosen: list[int]) -> Callable[[torch.Tensor], torch.Tensor]:
        def patch(probs: torch.Tensor) -> torch.Tensor:
            src = source[layer].to(probs.dtype).expand_as(probs)
            probs = probs.clone()
            probs[:, chosen] = src[:, chosen]
            return probs

        return patch

    return {layer: patcher(layer, chosen) for layer, chosen in by_layer.items()}


def rank_heads(p_correct: Callable[[frozenset], float], heads: list[Head], p_old: float, p_new: float,
               top_k: int = 4) -> dict:
    """Patch each head alone, rank by Δp, then patch the top 1…K heads together and all heads.

    ``p_correct(heads)`` is the old model's mean p(correct) with ``heads`` patched (frozenset of
    (layer, head)); ``p_new`` is the new model's own, so ``gap = p_new − p_old`` and a patch recovers
    ``(p − p_old) / gap`` of it (None when the gap is below GAP_EPS).
    """
    gap = p_new - p_old

    def fraction(p: float) -> float | None:
        return (p - p_old) / gap if abs(gap) > GAP_EPS else None

    single = [(head, p_correct(frozenset([head]))) for head in heads]
    # Stable sort: ties keep (layer, head) order, so the ranking is deterministic.
    ranked = sorted(single, key=lambda item: -item[1])
    rows = [{"rank": i + 1, "layer": h[0], "head": h[1], "p": p, "delta_p": p - p_old,
             "fraction_recovered": fraction(p)} for i, (h, p) in enumerate(ranked)]
    together = []
    for k in range(1, min(top_k, len(heads)) + 1):
        chosen = [h for h, _ in ranked[:k]]
        p = p_correct(frozenset(chosen))
        together.append({"k": k, "heads": [list(h) for h in chosen], "p": p, "delta_p": p - p_old,
                         "fraction_recovered": fraction(p)})
    p_all = p_correct(frozenset(heads))
    return {
        "p_old": p_old,
        "p_new": p_new,
        "gap": gap,
        "heads": rows,
        "top_k": together,
        "all_heads": {"k": len(heads), "p": p_all, "delta_p": p_all - p_old, "fraction_recovered": fraction(p_all)},
    }


# --- SequenceModel runs -------------------------------------------------------------------------
def attention_layers(model: SequenceModel) -> list[int]:
    """The layers whose mixer exposes attention scores; a ValueError when there are none."""
    layers = [i for i, m in enumerate(model.mixers) if getattr(m, "exposes_attention", False)]
    if not layers:
        raise ValueError(f"{type(model.mixers[0]).__name__} exposes no attention scores: head patching "
                         "needs a mixer with exposes_attention (e.g. transformer)")
    return layers


@torch.no_grad()
def p_correct(model: SequenceModel, tokens: torch.Tensor, loss_mask: torch.Tensor,
              ctx: MixerContext | None = None,
              model_inputs: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
    """tokens [B, L+1] -> probability of the correct next token on the scored rows: [B, N] for a
    ``loss_mask`` [L] (the same rows in every sequence), [M] for a per-sequence mask [B, L] (the task's
    ``scored_mask(tokens)``: the M rows it marks, in order). ``model_inputs`` is the task's (tokens ->
    [B, L] model input; default ``tokens[:, :-1]``)."""
    inputs = tokens[:, :-1] if model_inputs is None else model_inputs(tokens)
    if loss_mask.dim() == 2:
        logits, targets = model(inputs, ctx), tokens[:, 1:]
        return logits.float().softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)[loss_mask]
    logits, targets = scored(model(inputs, ctx), tokens[:, 1:], loss_mask.nonzero().squeeze(1))
    return logits.float().softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


@torch.no_grad()
def capture(model: SequenceModel, tokens: torch.Tensor, loss_mask: torch.Tensor,
            model_inputs: Callable[[torch.Tensor], torch.Tensor] | None = None,
            ) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
    """(p(correct) [B, N] (or [M], ``p_correct``), {layer: probs [B, H, L, L]}) from one forward with
    attention captured.

    The baseline goes through the same explicit-attention path as the patched forwards, so patching a
    head with its own map changes nothing, bit for bit."""
    ctx = MixerContext(capture=True)
    p = p_correct(model, tokens, loss_mask, ctx, model_inputs)
    return p, dict(ctx.attention)


def ground_truth_maps(pattern: torch.Tensor, own: dict[int, torch.Tensor]) -> dict[int, torch.Tensor]:
    """The task's pattern [L, L] row-normalised, as every head's map; rows with no source (unscored)
    keep the model's ``own`` maps [B, H, L, L], so a patch leaves them alone."""
    pattern = pattern.to(torch.float64)
    rows = pattern.sum(-1, keepdim=True)
    normalised = pattern / rows.clamp_min(1)
    has_source = rows.squeeze(-1) > 0  # [L]
    return {layer: torch.where(has_source[:, None], normalised.to(probs), probs) for layer, probs in own.items()}


def patch_models(old: SequenceModel, new: SequenceModel, tokens: torch.Tensor, loss_mask: torch.Tensor,
                 top_k: int = 4, ground_truth: torch.Tensor | None = None,
                 model_inputs: Callable[[torch.Tensor], torch.Tensor] | None = None) -> dict:
    """Head patching of ``new`` (or the ground-truth ``pattern`` [L, L]) into ``old`` on ``tokens``
    [B, L+1], scored on ``loss_mask`` [L] or on each sequence's own rows [B, L]; returns
    ``rank_heads``'s report plus which source was patched in."""
    layers = attention_layers(old)
    old.eval(), new.eval()
    loss_mask = loss_mask.to(tokens.device)
    p_old, old_maps = capture(old, tokens, loss_mask, model_inputs)
    p_new, new_maps = capture(new, tokens, loss_mask, model_inputs)
    source = new_maps if ground_truth is None else ground_truth_maps(ground_truth.to(tokens.device), old_maps)
    heads = [(layer, h) for layer in layers for h in range(old_maps[layer].shape[1])]

    def measure(chosen: frozenset) -> float:
        if not chosen:
            return float(p_old.mean())
        # capture=True keeps every layer on the explicit path the baseline took (not the fused kernel).
        ctx = MixerContext(patch=replace_heads(source, chosen), capture=True)
        return float(p_correct(old, tokens, loss_mask, ctx, model_inputs).mean())

    report = rank_heads(measure, heads, float(p_old.mean()), float(p_new.mean()), top_k)
    report["source"] = "ground_truth" if ground_truth is not None else "new"
    return report
