"""The paper's claims, each declared once as a pre-registered test (``emergence_bench.claim``): one
module per claim of PAPER.md, in its order. Importing this package declares them all; ``compare``
holds the comparisons they share, and ``design`` the frozen settings of the confirmation."""

from emergence_bench.claims import (abrupt, architectures, bias, curricula, difficulty, heads,  # noqa: F401
                                    patching, seeds)
