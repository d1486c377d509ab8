"""docs/claims.md's walk-through ("Add a claim"), run as written, as tests/test_task_walkthrough.py
runs the task plugin's.

A fenced block whose paragraph before it ends with "`path`:" is an excerpt of that file and must
appear in it verbatim (so the page shows the bias claim as the code declares it). The other Python
blocks run in order in one namespace, given ``rows`` (constructed rows standing for a folder), and
print what the plain block after them shows. The files the page's table lists must exist and hold
the bias claim.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import walkthrough_page
from test_claims import bias_rows

from emergence_bench.claims.claim import CLAIMS

ROOT = Path(__file__).parents[1]
PAGE = ROOT / "docs" / "claims.md"
HEADING = "## Add a claim"


def section() -> str:
    return walkthrough_page.section(PAGE, HEADING)


def blocks() -> list[tuple[str, str, str]]:
    """(language, body, the paragraph before it) of each fenced block of the section, in order."""
    return walkthrough_page.blocks(section())


def test_the_excerpts_are_the_files_as_they_are():
    excerpts = [(re.search(r"`([\w./-]+)`:$", before), body) for _, body, before in blocks()]
    named = [(match.group(1), body) for match, body in excerpts if match]
    assert [path for path, _ in named] == ["benchmark/presets/claims-cpu-v2.yaml", "benchmark/claims/bias.py"]
    for path, body in named:
        assert body in (ROOT / path).read_text(encoding="utf-8"), f"{path} no longer holds the page's excerpt"


def test_the_files_the_page_lists_hold_the_bias_claim():
    listed = re.findall(r"^\| `([\w./-]+)` \|", section(), re.M)
    assert 4 <= len(listed) <= 6
    holds = {"docs/science.md": "Showing the pattern removes the plateau",
             "benchmark/claims/bias.py": "bias-removes-plateau",
             "benchmark/presets/claims-cpu-v2.yaml": "- name: bias", "benchmark/claims/__init__.py": "    bias,",
             "tests/test_claims.py": '"bias-removes-plateau"', "docs/claims.md": "| bias-removes-plateau |"}
    assert sorted(listed) == sorted(holds)
    for path in listed:
        assert holds[path] in (ROOT / path).read_text(encoding="utf-8"), path


def test_the_claim_of_your_own_runs_and_prints_what_the_page_shows():
    listed = blocks()
    runnable = [(i, body) for i, (language, body, before) in enumerate(listed)
                if language == "python" and not re.search(r"`[\w./-]+`:$", before)]
    assert runnable, "the page has a claim of its own to run"
    # 16 runs an arm; the true bias's runs solve the task in about half the steps of the others'.
    rows = bias_rows(plateau=100)
    for group in rows.values():
        for row in group:
            row["emergence"] = {"step": row["plateau"]["first_drop_step"] + 150}
    namespace = {"rows": rows, "__name__": "claim_walkthrough"}
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            for _, body in runnable:
                exec(compile(body, f"{PAGE}:Add a claim", "exec"), namespace)
    finally:  # the page's claim is not the suite's: no other test sees it
        CLAIMS.remove("bias-speeds-emergence")
    last = runnable[-1][0]
    shown = listed[last + 1][1] if last + 1 < len(listed) and not listed[last + 1][0] else None
    assert shown is not None and printed.getvalue() == shown, printed.getvalue()
