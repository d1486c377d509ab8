"""The segment-sum decay matrix against sums written out one segment at a time."""

import pytest
import torch

from emergence_bench.mixers.ops.segment_sum import segment_sum


@pytest.mark.parametrize("T", [1, 2, 7, 16])
def test_each_entry_is_its_segment_and_the_future_is_minus_infinity(T):
    x = torch.randn(2, 3, T, dtype=torch.float64)
    out = segment_sum(x)
    assert out.shape == (2, 3, T, T)
    for i in range(T):
        for j in range(T):
            if j <= i:
                torch.testing.assert_close(out[..., i, j], x[..., j + 1:i + 1].sum(-1), atol=1e-12, rtol=0)
            else:
                assert (out[..., i, j] == float("-inf")).all()
    assert (segment_sum(x).exp().triu(1) == 0).all()  # exp gives exact zeros above the diagonal


def test_short_segments_stay_exact_after_a_huge_decay_in_float32():
    """A segment after a -1e3 step is summed on its own: the difference of cumulative sums would
    lose it to float32's step of ~1e-4 at 1e3."""
    x = torch.full((6,), -1e-3)
    x[1] = -1e3
    out = segment_sum(x)
    torch.testing.assert_close(out[5, 2], torch.tensor(-3e-3), atol=1e-9, rtol=0)
    G = x.cumsum(0)
    assert (G[5] - G[2] - (-3e-3)).abs() > 1e-6  # the naive form really is off (by ~0.3 %)


def test_gradient_reaches_only_the_steps_inside_each_segment():
    x = torch.randn(5, dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(segment_sum(x)[4, 1], x)
    assert torch.equal(grad, torch.tensor([0.0, 0.0, 1.0, 1.0, 1.0], dtype=torch.float64))
