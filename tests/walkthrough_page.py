"""A docs page's walk-through section and its fenced code blocks, as the walk-through tests read
them (tests/test_task_walkthrough.py, tests/test_claim_walkthrough.py): the page is the test's input,
so a walk-through cannot drift from the code."""

from __future__ import annotations

import re
from pathlib import Path


def section(page: Path, heading: str) -> str:
    """The text of ``page`` from ``heading`` up to the next second-level heading (or the end)."""
    text = page.read_text(encoding="utf-8")
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start:] if end == -1 else text[start:end]


def blocks(text: str) -> list[tuple[str, str, str]]:
    """(language, body, the paragraph before it) of each fenced block of ``text``, in order."""
    found, last = [], 0
    for match in re.finditer(r"^```(\w*)\n(.*?)^```$", text, re.M | re.S):
        before = text[last:match.start()].strip().split("\n\n")[-1]
        found.append((match.group(1), match.group(2), before))
        last = match.end()
    return found
