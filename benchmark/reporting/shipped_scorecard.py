"""docs/results.md's scorecard table, generated from the shipped claims reference
(``claims.reference``): the table ``emergence-bench claims EMPTY_DIR --reference builtin`` prints,
and its summary line. ``tests/test_claims_reference.py`` holds the page equal to it.

    python -m emergence_bench.reporting.shipped_scorecard docs/results.md   # rewrites the page's table
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from emergence_bench.claims import reference
from emergence_bench.claims.judge import judge_read
from emergence_bench.reporting.scorecard import table, to_markdown

HEADING = "## The scorecard (`claims-cpu-v2`)"
SUMMARY = re.compile(r"\d+ rows: .*\.")  # the table's last line


def generated(shipped: Mapping[str, Any]) -> str:
    """The scorecard of ``shipped``'s rows alone (an empty folder judged with it): table and summary."""
    card = judge_read(Path(f"the reference {shipped['preset']}"), {}, shipped=reference.rows(shipped),
                      stage=shipped["stage"])
    return to_markdown(table(card), full=False)


def span(page: str) -> tuple[int, int]:
    """Where the scorecard's table (its header to its summary line) lies in ``page``; a ValueError
    where the page has no such section."""
    start = page.find(HEADING)
    header = page.find("\n| claim |", start) + 1 if start >= 0 else 0
    end = SUMMARY.search(page, header) if header else None
    if not end:
        raise ValueError(f"no table under {HEADING!r} (from '| claim |' to its 'N rows: …' line)")
    return header, end.end() + 1


def table_in(page: str) -> str:
    """The scorecard's table as the page has it."""
    start, end = span(page)
    return page[start:end]


def with_table(page: str, new: str) -> str:
    """``page`` with its scorecard's table replaced by ``new``."""
    start, end = span(page)
    return page[:start] + new + page[end:]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.exit(f"usage: python -m {__spec__.name if __spec__ else __name__} docs/results.md")
    path = Path(argv[0])
    path.write_text(with_table(path.read_text(encoding="utf-8"), generated(reference.load(reference.BUILTIN))),
                    encoding="utf-8")
    print(f"wrote the scorecard of {reference.SHIPPED.name} into {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
