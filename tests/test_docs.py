"""The documentation a clone has: every link in README.md and docs/ resolves inside the repository
(a file that exists, a heading that exists) or is a public web page; the README stays short."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)|<(https?://[^>\s]+)>")


def prose(text: str) -> str:
    """``text`` without fenced code blocks and inline code, where brackets are code, not links."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives ``page``'s headings: lower case, punctuation dropped, spaces as
    hyphens, a repeated one suffixed -1, -2, ..."""
    found, seen = set(), {}
    for line in re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M).splitlines():
        heading = re.match(r"#{1,6}\s+(.*)", line)
        if not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def links(page: Path) -> list[str]:
    return [a or b for a, b in LINK.findall(prose(page.read_text(encoding="utf-8")))]


def test_the_pages_exist_and_link_somewhere():
    names = {p.name for p in PAGES}
    assert {"README.md", "science.md", "results.md", "plugins.md", "design.md", "ranking.md"} <= names
    assert all(links(p) for p in PAGES if p.name in ("README.md", "results.md"))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_link_resolves_in_the_repository_or_is_a_public_page(page):
    broken = []
    for target in links(page):
        if target.startswith(("https://", "http://")):
            continue  # a public web page
        if ":" in target.split("#")[0]:
            broken.append(f"{target} (not a web page nor a path in the repository)")
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.is_relative_to(REPO) or not file.exists():
            broken.append(f"{target} (no such file in the repository)")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target} (no heading #{anchor} in {file.relative_to(REPO)})")
    assert not broken, f"{page.relative_to(REPO)}: " + "; ".join(broken)


def test_nothing_points_outside_a_clone():
    """The README once sent readers to ../shared/, which a clone does not have."""
    for page in PAGES:
        assert "../shared" not in page.read_text(encoding="utf-8"), page


def test_the_readme_is_short_and_names_the_paper():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    assert "https://arxiv.org/abs/2606.25010" in text
    for job in ("## Rank a mixer", "## Add a mixer", "## Compare plateau lengths", "make bench", "make test"):
        assert job in text


def test_the_anchor_rule_matches_github():
    """Headings with code, punctuation and non-ASCII letters, as GitHub writes their anchors."""
    page = REPO / "docs" / "results.md"
    assert "history-claim-by-claim-at-3-seeds-claims-cpu" in anchors(page)
    assert "the-scorecard-claims-cpu-v2" in anchors(page)
    assert "agreement-with-an-independent-reproduction" in anchors(page)


def test_every_ladder_a_preset_or_page_names_is_that_presets_own():
    """Each preset with a `ladder:` names that ladder in its `sweep --list` description and its row of
    docs/sweeps.md's table, and no description or page says another version ("standard-cpu is
    ladder v2" stayed after it became v3)."""
    import yaml

    from emergence_bench.execution.sweep_spec import presets

    files = {name: yaml.safe_load(path.read_text(encoding="utf-8")) for name, path in presets().items()}
    ladders = {name: data["ladder"] for name, data in files.items() if data.get("ladder")}
    assert ladders["standard-cpu"] == "v3-tuned"

    def said(ladder: str) -> str:  # "v3-tuned" -> "tuned ladder v3"
        version, _, tuned = ladder.partition("-")
        return f"{tuned + ' ' if tuned else ''}ladder {version}"

    sweeps = (REPO / "docs" / "sweeps.md").read_text(encoding="utf-8")
    for name, ladder in ladders.items():
        assert said(ladder) in files[name]["description"].lower(), name
        row = next(line for line in sweeps.splitlines() if line.startswith(f"| `{name}`"))
        assert said(ladder) in row.lower(), row
    texts = [data.get("description", "") for data in files.values()] + [sweeps, (REPO / "README.md").read_text()]
    for text in texts:
        for found in re.finditer(r"`?([\w-]+)`? is (?:the )?((?:tuned )?ladder v\d+)", text):
            if found.group(1) in ladders:
                assert found.group(2) == said(ladders[found.group(1)]), found.group(0)


def test_the_code_cites_the_paper_through_science_md():
    """Modules once cited "PAPER.md", a file no clone has: the paper's words and numbers the code cites
    are in docs/science.md, and every citation points there."""
    cited = [p for folder in ("benchmark", "callbacks", "tasks", "mixers", "tests", "docs")
             for p in (REPO / folder).rglob("*") if p.suffix in (".py", ".md", ".yaml")
             and p != Path(__file__).resolve() and "PAPER.md" in p.read_text(encoding="utf-8")]
    assert not cited and "PAPER.md" not in (REPO / "README.md").read_text(encoding="utf-8"), cited
    science = (REPO / "docs" / "science.md").read_text(encoding="utf-8")
    for section in ("## The claims", "**Linear map**", "**Cellular automata**", "**Language probes**",
                    "**Causal head patching**", "## Numbers the paper reports", "loss < 1.3"):
        assert section in science, section
