"""The one way a table is rendered: the leaderboard's, the ranking's and the report's are each a
``Table`` (a header and rows of text cells), written as Markdown (the terminal, the .md files) or as
HTML (the report). A line break inside a cell is ``<br>`` in both."""

from __future__ import annotations

import html
from dataclasses import dataclass


@dataclass
class Table:
    """``header``: the column names (none: a table of labelled rows); ``rows``: each row's cells, as
    text; ``row_headers``: the first cell of each row labels it (``<th>`` in HTML)."""

    header: list[str]
    rows: list[list[str]]
    row_headers: bool = False

    def markdown(self) -> str:
        """``| a | b |`` lines under a ``|---|---|`` rule; no trailing newline."""
        columns = self.header or [""] * max((len(row) for row in self.rows), default=0)
        lines = [_markdown_row(columns), "|" + "|".join("---" for _ in columns) + "|"]
        return "\n".join(lines + [_markdown_row(row) for row in self.rows])

    def html(self) -> str:
        """A ``<table>``, every cell escaped."""
        head = ("<thead><tr>" + "".join(f"<th>{_html_cell(c)}</th>" for c in self.header) + "</tr></thead>"
                if self.header else "")
        body = "".join("<tr>" + "".join(f"<{self._tag(i)}>{_html_cell(c)}</{self._tag(i)}>" for i, c in enumerate(row))
                       + "</tr>" for row in self.rows)
        return f"<table>{head}<tbody>{body}</tbody></table>"

    def without_empty_columns(self, empty: str = "-") -> tuple[Table, list[str]]:
        """This table without the columns whose every cell is ``empty``, and those columns' names."""
        keep = [i for i in range(len(self.header)) if any(row[i] != empty for row in self.rows)] \
            if self.rows else list(range(len(self.header)))
        dropped = [name for i, name in enumerate(self.header) if i not in keep]
        return Table([self.header[i] for i in keep], [[row[i] for i in keep] for row in self.rows],
                     self.row_headers), dropped

    def _tag(self, column: int) -> str:
        return "th" if self.row_headers and column == 0 else "td"


def _markdown_row(cells: list[str]) -> str:
    return "| " + " | ".join(str(c).replace("\n", "<br>") for c in cells) + " |"


def _html_cell(cell: str) -> str:
    return "<br>".join(html.escape(line) for line in str(cell).split("\n"))
