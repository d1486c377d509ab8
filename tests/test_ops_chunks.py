"""Cutting sequences into chunks and back: positions, zero padding, and the round trip."""

import pytest
import torch

from emergence_bench.mixers.ops.chunks import from_chunks, to_chunks


@pytest.mark.parametrize("T, C", [(1, 4), (8, 4), (9, 4), (37, 16), (5, 32)])
@pytest.mark.parametrize("trailing", [(), (6,)])
def test_every_position_lands_in_its_chunk_and_padding_is_zero(T, C, trailing):
    x = torch.randn(2, T, 3, *trailing)
    chunks = to_chunks(x, C)
    N = -(-T // C)
    assert chunks.shape == (2, 3, N, C, *trailing)
    for t in range(N * C):
        n, c = divmod(t, C)
        expected = x[:, t] if t < T else torch.zeros_like(x[:, 0])
        assert torch.equal(chunks[:, :, n, c], expected), t
    assert torch.equal(from_chunks(chunks, T), x)


def test_gradients_flow_back_through_the_round_trip():
    x = torch.randn(2, 10, 3, 4, requires_grad=True)
    upstream = torch.randn(2, 10, 3, 4)
    (grad,) = torch.autograd.grad((from_chunks(to_chunks(x, 4) * 2, 10) * upstream).sum(), x)
    assert torch.equal(grad, 2 * upstream)
