"""The report's figures, one module each (or per family), imported in the page's order: importing
a module registers its figures (``emergence_bench.reporting.figure.register_figure``)."""

from emergence_bench.reporting.figure import REGISTRY

# isort: off (their order is the page's)
from emergence_bench.reporting.figures import (  # noqa: F401  # noqa: F401
    attention,
    axes,
    claims,
    curves,
    heatmap,
    ranking,
    seeds,
    staircase,
    threshold_sensitivity,
)

# isort: on

FIGURES = tuple(name for name, figure in REGISTRY.items() if figure.part_of is None)  # what --figures may choose
