"""The report's HTML page: its sections, the index at the top, and its figures embedded as PNG (and
written beside it as PNG and SVG files)."""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

from matplotlib.figure import Figure

from emergence_bench.reporting.plotting import DPI, plt


class Page:
    """The report being written: its sections, each an <h2> the index at the top links to, and its
    figures, each embedded in the page as a PNG and, with ``folder``, also kept for that folder as
    ``<name>.png`` and ``<name>.svg`` to go straight into a paper (``files``: written with the page,
    once every figure is drawn, so a report that fails leaves the earlier one's files as they were)."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder
        self.parts: list[str] = []
        self.sections: list[tuple[str, str]] = []  # (anchor, title)
        self.missing: list[tuple[str, str]] = []  # (figure, why it is not drawn)
        self.files: dict[Path, bytes] = {}  # the figures' PNG and SVG files for ``folder``

    def absent(self, name: str, reason: str) -> None:
        """A figure the results do not allow: listed under the index with the reason."""
        self.missing.append((name, reason))

    def add(self, *parts: str) -> None:
        self.parts += parts

    def section(self, title: str, caption: str | None = None) -> None:
        """A section heading, with the one line that says what its figure shows and how to read it."""
        anchor = f"section-{len(self.sections) + 1}"
        self.sections.append((anchor, title))
        self.parts.append(f'<h2 id="{anchor}">{html.escape(title)}</h2>' + (f"<p>{caption}</p>" if caption else ""))

    def figure(self, figure: Figure, name: str, alt: str) -> None:
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
        if self.folder is not None:
            svg = io.BytesIO()
            figure.savefig(svg, format="svg", bbox_inches="tight")
            self.files.update({self.folder / f"{name}.png": buffer.getvalue(),
                               self.folder / f"{name}.svg": svg.getvalue()})
        plt.close(figure)
        data = base64.b64encode(buffer.getvalue()).decode()
        self.parts.append(f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">')

    def html(self, title: str) -> str:
        index = "".join(f'<li><a href="#{anchor}">{html.escape(t)}</a></li>' for anchor, t in self.sections)
        return ("<!doctype html><html><head><meta charset='utf-8'><title>emergence-bench report</title>"
                "<style>body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}"
                "table{border-collapse:collapse;font-size:12px;display:block;overflow-x:auto;max-width:100%}"
                "td,th{border:1px solid #ccc;padding:3px 6px}"
                "img{max-width:100%;height:auto;display:block;margin:1em 0}nav ul{columns:2}"
                ".caption{color:#444;font-size:13px}</style></head><body>"
                f"<h1>{html.escape(title)}</h1>"
                + (f"<nav><b>Contents</b><ul>{index}</ul></nav>" if index else "")
                + ("<p><b>Not drawn</b> (the data these results hold does not allow it):</p><ul>"
                   + "".join(f"<li>{html.escape(name)}: {html.escape(why)}</li>" for name, why in self.missing)
                   + "</ul>" if self.missing else "")
                + "\n".join(self.parts) + "</body></html>")
