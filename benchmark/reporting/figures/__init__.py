"""The report's figures, one module each (or per family), imported in the page's order: importing
a module registers its figures (``emergence_bench.reporting.figure.register_figure``)."""

from emergence_bench.reporting.figure import REGISTRY

# Their order is the page's, so isort leaves them as written:
# isort: off
from emergence_bench.reporting.figures import curves, staircase, seeds, ranking, axes  # noqa: F401
from emergence_bench.reporting.figures import threshold_sensitivity, heatmap, attention, claims, language  # noqa: F401
# isort: on

FIGURES = tuple(name for name, figure in REGISTRY.items() if figure.part_of is None)  # what --figures may choose
