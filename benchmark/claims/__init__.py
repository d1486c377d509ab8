"""The paper's claims, each declared once as a pre-registered test (``claim``: a claim, its verdict
and the scorecard): one module per claim of docs/science.md, in its order. Importing this package declares
them all; ``compare`` holds the comparisons they share, and ``design`` the frozen settings of the
confirmation."""

from emergence_bench.claims import (  # noqa: F401
    abrupt,
    architectures,
    bias,
    curricula,
    difficulty,
    heads,
    patching,
    seeds,
)
from emergence_bench.claims.claim import CLAIMS, Claim


def claims() -> tuple[Claim, ...]:
    """Every declared claim (the built-in ones, and any a plugin registered), in the paper's order."""
    return tuple(sorted(CLAIMS.values(), key=lambda c: c.number))
