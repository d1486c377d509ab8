"""A figure of the report, declared once: ``@register_figure(name, title, caption, absent)`` on a
function ``draw(Results) -> [Drawn]``. The page draws the registered figures in the order they were
registered (``emergence_bench.reporting.figures`` imports their modules in the page's order), lists a
figure that draws nothing with its ``absent`` reason, and ``--figures`` chooses among them by name.
A new figure is one module in ``reporting/figures/`` and one line in its ``__init__``."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from matplotlib.figure import Figure

from emergence_bench.registry import Registry
from emergence_bench.reporting.page import Page
from emergence_bench.reporting.plotting import short_titles
from emergence_bench.results.row import ResultRow
from emergence_bench.results.store import RESULT_FILE


@dataclass
class Drawn:
    """One figure drawn for the report, saved as ``file``. The first of a registered figure's drawings
    opens its section (its ``title`` and ``caption`` unless these say otherwise); a later one with a
    ``title`` opens a section of its own. ``html`` goes above the figure (a table); ``alt``: the
    image's text (default: the title, lower case)."""

    figure: Figure
    file: str
    title: str | None = None
    caption: str | None = None
    alt: str | None = None
    html: tuple[str, ...] = ()


@dataclass
class Results:
    """What the report's figures are drawn from: the rows, their leaderboard groups (label, members),
    the results folder (for the saved attention maps, the tuning tables and rank.json) and the
    report's options."""

    records: list[ResultRow]
    groups: list[tuple[str, list[ResultRow]]] = field(default_factory=list)
    root: Path | None = None
    axes: tuple[str, str] | None = None
    maps: int = 4
    seed: int | None = None
    reference: str | None = None  # the reference ranked against (--reference; default: DIR/rank.json's)
    ranked: dict | None = None  # rank.build's, once the ranking is drawn (its parts use it)
    ranked_rows: list[ResultRow] = field(default_factory=list)  # the rows ranked: DIR's and the reference's
    reference_data: dict | None = None  # the reference's file, once loaded

    @functools.cached_property
    def titles(self) -> dict[str, str]:
        """Each group's short panel title (``short_titles``)."""
        labels = [label for label, _ in self.groups]
        return dict(zip(labels, short_titles(labels)[0]))


Draw = Callable[[Results], list[Drawn]]


class NotDrawn(Exception):
    """Raised by a figure's ``draw`` to say why these results do not allow it, where its ``absent``
    reason would not be the one (e.g. the ranking refused: two budgets in one cell); the page lists
    the figure with this reason."""


def from_groups(draw: Callable[[list[tuple[str, list[ResultRow]]]], Figure | None], file: str) -> Draw:
    """A figure drawn from the leaderboard's groups alone: ``[Drawn(draw(groups), file)]``, or none
    when ``draw`` has nothing to show."""
    def drawn(results: Results) -> list[Drawn]:
        figure = draw(results.groups)
        return [Drawn(figure, file)] if figure else []

    return drawn


@dataclass(frozen=True)
class ReportFigure:
    """A figure of the report: ``name`` (what ``--figures`` chooses), its section's ``title`` and
    ``caption`` (how to read it), and ``absent``: why it is not drawn, shown instead where ``draw``
    draws nothing. A ``part_of`` figure is drawn only with that one, after it."""

    name: str
    title: str
    caption: str
    absent: str
    draw: Draw
    part_of: str | None = None


REGISTRY: Registry[ReportFigure] = Registry("figure", ReportFigure)


def register_figure(name: str, title: str, caption: str, absent: str,
                    part_of: str | None = None) -> Callable[[Draw], Draw]:
    """Adds ``draw(results) -> [Drawn]`` to REGISTRY (in the page's order) as figure ``name``."""
    def decorator(draw: Draw) -> Draw:
        REGISTRY.add(name, ReportFigure(name, title, caption, absent, draw, part_of))
        return draw

    return decorator


def show(page: Page, figure: ReportFigure, results: Results) -> bool:
    """Draw ``figure`` (then its parts) into ``page``, or list it as absent with its reason; whether
    it was drawn."""
    try:
        drawn = figure.draw(results)
    except NotDrawn as why:
        page.absent(figure.name, str(why))
        return False
    if not drawn:
        page.absent(figure.name, figure.absent)
        return False
    for i, item in enumerate(drawn):
        title = item.title or figure.title
        if i == 0 or item.title is not None:
            page.section(title, item.caption if item.caption is not None else figure.caption)
        page.add(*item.html)
        page.figure(item.figure, item.file, item.alt or title.lower())
    for part in REGISTRY.values():
        if part.part_of == figure.name:
            show(page, part, results)
    return True


def find_run_dir(root: Path, record: ResultRow) -> Path | None:
    """The folder of ``record``'s run under ``root``; None where it is not there."""
    found = list(root.rglob(f"{record['run_id']}/{RESULT_FILE}"))
    return found[0].parent if found else None
