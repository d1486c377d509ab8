"""The chunked linear scan h_t = a_t h_{t-1} + b_t and its transpose, against plain loops."""

import pytest
import torch

from emergence_bench.mixers.ops.linear_scan import linear_scan


@pytest.mark.parametrize("L", [1, 2, 3, 5, 8, 9, 15, 16, 17, 26, 50])
@pytest.mark.parametrize("in_place", [False, True])
def test_linear_scan_and_its_transpose_match_loops(L, in_place):
    """Every chunk count and leftover: forward h_t = a_t h_{t-1} + b_t, transpose
    g_t = b_t + a_{t+1} g_{t+1}, also when written over b itself."""
    a = torch.rand(L, 3, 4, dtype=torch.float64)
    b = torch.randn(L, 3, 4, dtype=torch.float64)
    forward, transpose = torch.zeros_like(b), torch.zeros_like(b)
    for t in range(L):
        forward[t] = b[t] + (a[t] * forward[t - 1] if t > 0 else 0)
    for t in reversed(range(L)):
        transpose[t] = b[t] + (a[t + 1] * transpose[t + 1] if t < L - 1 else 0)
    for flag, expected in ((False, forward), (True, transpose)):
        out = b.clone() if in_place else None
        got = linear_scan(a, b.clone() if in_place else b, transpose=flag, out=out)
        assert torch.allclose(got, expected, atol=1e-12), f"transpose={flag}"


def test_linear_scan_transpose_is_the_adjoint():
    """<scan(a, x), y> = <x, scanᵀ(a, y)>: what makes the backward one transpose scan."""
    a = torch.rand(37, 2, 3, dtype=torch.float64)
    x, y = torch.randn(2, 37, 2, 3, dtype=torch.float64)
    lhs = (linear_scan(a, x) * y).sum()
    rhs = (x * linear_scan(a, y, transpose=True)).sum()
    assert torch.allclose(lhs, rhs, atol=1e-12)


def test_linear_scan_never_overflows_with_long_strong_decays():
    """Only decays ≤ 1 are multiplied, so L = 400 with decays down to e^-60 stays finite and exact."""
    L = 400
    a = torch.exp(-60 * torch.rand(L, 8))
    b = torch.randn(L, 8)
    expected = torch.zeros_like(b)
    for t in range(L):
        expected[t] = b[t] + (a[t] * expected[t - 1] if t else 0)
    got = linear_scan(a, b)
    assert torch.isfinite(got).all()
    assert torch.allclose(got, expected, atol=1e-5)
