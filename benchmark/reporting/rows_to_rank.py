"""What a report ranks: DIR's own rows and, for the mixers DIR lacks, a reference's (``report
--reference``, else the one DIR/rank.json was ranked against), on DIR/rank.json's ladder where
`rank` wrote one. So `report runs/mine` on a plugin's folder shows the plugin beside the built-ins,
as `rank runs/mine --reference builtin` ranked them."""

from __future__ import annotations

import json
from pathlib import Path

from emergence_bench.config import ConfigError
from emergence_bench.reporting import reference
from emergence_bench.reporting.plateau_score import renamed
from emergence_bench.results.row import ResultRow
from emergence_bench.results.store import RANK_STEM


def saved_rank(root: Path | None) -> dict:
    """DIR/rank.json as `rank` wrote it, its first-drop keys under their current names (one written
    when the score was the "plateau ratio" too); {} where there is none (or it cannot be read)."""
    path = None if root is None else root / f"{RANK_STEM}.json"
    try:
        return renamed(json.loads(path.read_text())) if path is not None and path.is_file() else {}
    except (OSError, ValueError):
        return {}


def rows_to_rank(records: list[ResultRow], root: Path | None,
                 name: str | None) -> tuple[list[ResultRow], dict | None, dict[str, str] | None]:
    """(rows, the reference loaded or None, each family's ladder axis or None): ``records`` plus the
    rows of reference ``name`` (default: DIR/rank.json's) for the mixers ``records`` lack. A
    reference named here that does not apply is refused (ConfigError); one only rank.json names is
    left out where it no longer applies or its file is gone (the folder changed since)."""
    saved = saved_rank(root)
    axes = {family: ladder["axis"] for family, ladder in (saved.get("ladders") or {}).items()} or None
    given = name is not None
    name = name if given else (saved.get("reference") or {}).get("name")
    if name is None:
        return records, None, axes
    try:
        ref = reference.load(name)
    except (ConfigError, OSError):
        if given:
            raise
        return records, None, axes  # the file rank.json names is gone: rank DIR's own rows
    if why := reference.refusal(ref, records):
        if given:
            raise ConfigError(f"--reference {name}: {why}")
        return records, None, axes
    ours = {r["config"]["mixer"]["name"] for r in records}
    return records + reference.rows(ref, without=ours), ref, axes
