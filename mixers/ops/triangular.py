"""The unit-lower-triangular solve at the heart of the chunked delta rules (the WY/UT form).

Inside a chunk, each step's write depends linearly on the earlier steps' writes of the same chunk,
so all C of them solve one system (I + A) X = rhs with A strictly lower triangular.
"""

from __future__ import annotations

import torch


def solve_unit_lower(strict_lower: torch.Tensor, rhs: torch.Tensor) -> torch.Tensor:
    """X with (I + tril(strict_lower, -1)) X = rhs.

    strict_lower [..., C, C]: only its part below the diagonal is read (the diagonal is taken as
    the identity's 1s, so the caller need neither mask A nor form I + A); rhs [..., C, R]
    -> X [..., C, R]. Differentiable in both arguments.
    """
    return torch.linalg.solve_triangular(strict_lower, rhs, upper=False, unitriangular=True)
