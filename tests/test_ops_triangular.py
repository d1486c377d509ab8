"""The unit-lower-triangular solve against a dense solve of I + (the strictly lower part)."""

import torch

from emergence_bench.mixers.ops.triangular import solve_unit_lower


def test_solves_identity_plus_the_strictly_lower_part_ignoring_the_rest():
    A = torch.randn(2, 3, 7, 7, dtype=torch.float64)  # its diagonal and upper part are never read
    rhs = torch.randn(2, 3, 7, 5, dtype=torch.float64)
    system = torch.eye(7, dtype=torch.float64) + A.tril(-1)
    expected = torch.linalg.solve(system, rhs)
    torch.testing.assert_close(solve_unit_lower(A, rhs), expected, atol=1e-10, rtol=1e-10)


def test_gradients_match_the_dense_solve():
    A = torch.randn(6, 6, dtype=torch.float64, requires_grad=True)
    rhs = torch.randn(6, 2, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(6, 2, dtype=torch.float64)
    ours = torch.autograd.grad((solve_unit_lower(A, rhs) * upstream).sum(), (A, rhs))
    dense = torch.linalg.solve(torch.eye(6, dtype=torch.float64) + A.tril(-1), rhs)
    theirs = torch.autograd.grad((dense * upstream).sum(), (A, rhs))
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-10)
