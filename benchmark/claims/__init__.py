"""The paper's claims, each declared once as a pre-registered test (``claim``: a claim, its verdict
and the scorecard): one module per claim of docs/science.md, in its order. Importing this package declares
them all; ``compare`` holds the comparisons they share, and ``design`` the frozen settings of the
confirmation. ``replication`` declares the replication of claims 1, 3 and 8 on fresh seeds (its own
stage), sized by ``replication_power`` and hashed by ``preregistration``; ``own_lr`` declares claim 7's
recurrent mixers again at their own tuned lr (a stage of its own, hashed the same way). The paper's
first half on the language family (claims 1–3 on ``lm-family``'s analysis rows, not a sweep's) is
declared apart, in the ``family_*`` modules, and judged by ``family_judge`` when ``lm-family analyze``
runs: it is not among ``claims()``."""

from emergence_bench.claims import (  # noqa: F401
    abrupt,
    architectures,
    bias,
    curricula,
    difficulty,
    heads,
    own_lr,
    patching,
    replication,
    seeds,
)
from emergence_bench.claims.claim import CLAIMS, Claim


def claims() -> tuple[Claim, ...]:
    """Every declared claim (the built-in ones, and any a plugin registered): the first stage's in the
    paper's order, then each later stage's."""
    return tuple(sorted(CLAIMS.values(), key=lambda c: (c.stage != "confirmation", c.stage, c.number)))
