"""A language-family training run stopped mid-way, as a signal would stop it (shared by the family's
and the pilot's resume tests)."""

from collections.abc import Callable

import pytest
import torch


def train_interrupted(monkeypatch: pytest.MonkeyPatch, train: Callable[[], object], steps: int = 5) -> None:
    """Runs ``train()`` through ``steps`` training steps, then raises KeyboardInterrupt inside the next
    one (at its gradient clipping, which the family calls once a step) and restores the clipping."""
    real, calls = torch.nn.utils.clip_grad_norm_, []

    def clip_then_stop(*args, **kwargs):
        calls.append(1)
        if len(calls) == steps + 1:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", clip_then_stop)
    with pytest.raises(KeyboardInterrupt):
        train()
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", real)
