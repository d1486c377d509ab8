"""Shipped reference results: the built-in mixers' ranking runs on a frozen ladder, so a plugin is
ranked against them without training them again (``emergence-bench rank DIR --reference builtin``).

A reference file (``benchmark/presets/reference/<preset>.json.gz``) holds compact rows (what the
ranking reads: config, status, seed, emergence and plateau steps, steps trained, parameter count,
state size, and the per-cell eval and train-loss curves rounded to 4 digits, from which `rank` reads
abruptness and held plateaus; references built before the curves were kept have none), the tuning
tables that chose each mixer's values, and where they came from: the commit, the package versions,
the machine, the ladder version.

A reference applies to runs on the same ladder only. Per task family it records the ladder's
*signature* (every scientific config key but the seed, the mixer, the tuned keys and the rung); the
user's runs of a family must have the same signature, rungs the reference has, and the same torch
major version, or the reference is refused with one line saying what differs.

Write one from a finished ranking sweep with
``python -m emergence_bench.commands.reference_build DIR --preset standard-cpu``.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from pathlib import Path
from typing import Any, cast

from emergence_bench.config import ConfigError, hashed_config
from emergence_bench.measurements.emergence import EMERGENCE
from emergence_bench.measurements.plateau import PLATEAU
from emergence_bench.reporting.ladder import ladders
from emergence_bench.reporting.leaderboard import flatten
from emergence_bench.results import packed
from emergence_bench.results.row import ResultRow, section
from emergence_bench.results.store import SCHEMA_VERSION, upgrade_row

REFERENCE_DIR = Path(__file__).parents[1] / "presets" / "reference"
BUILTIN = "builtin"  # --reference builtin: the reference of the standard CPU ladder
BUILTIN_PRESET = "standard-cpu"
FORMAT = 1


# What a reference is, for the line that refuses a file that is not one.
WHAT_A_REFERENCE_IS = ("a reference is the gzipped JSON (.json.gz) that `python -m emergence_bench.commands."
                       "reference_build DIR --preset PRESET` writes from a finished ranking sweep; or give builtin")
# The keys a reference holds (reference_build's ``build``) that the ranking and the report read.
KEYS = ("preset", "ladder", "commit", "versions", "machine", "created", "families", "tuned_keys", "tuning", "rows")


def path_of(name: str) -> Path:
    """``builtin``, a preset name with a shipped reference, or the path of a reference file."""
    if Path(name).is_file():
        return Path(name)
    if Path(name).is_dir():
        raise ConfigError(f"reference {name!r} is a folder, not a reference file; {WHAT_A_REFERENCE_IS}")
    preset = BUILTIN_PRESET if name == BUILTIN else name
    found = REFERENCE_DIR / f"{preset}.json.gz"
    if not found.is_file():
        known = sorted(p.name.removesuffix(".json.gz") for p in REFERENCE_DIR.glob("*.json.gz"))
        raise ConfigError(f"no reference {name!r}: give builtin, a preset with a shipped reference "
                          f"({', '.join(known) or 'none'}), or a reference file")
    return found


def load(name: str) -> dict:
    """The reference ``name`` (see ``path_of``). A file that is not one (not gzip, cut short, not
    UTF-8 JSON, JSON of another shape, another format) is a ConfigError naming it and saying what a
    reference is."""
    path = path_of(name)
    name = name if str(path) == name else f"{name!r} ({path})"  # what the lines below call it
    reference = packed.read(path, name, WHAT_A_REFERENCE_IS)
    if reference.get("format") != FORMAT:
        raise ConfigError(f"reference {name} has format {reference.get('format')!r}; this version reads {FORMAT}; "
                          f"{WHAT_A_REFERENCE_IS}")
    missing = [key for key in KEYS if key not in reference]
    if missing:
        raise ConfigError(f"reference {name} lacks {', '.join(missing)}: not a whole reference file; "
                          f"{WHAT_A_REFERENCE_IS}")
    return reference


def torch_major(version: str | None) -> str | None:
    return version.split(".")[0] if version else None


def signature(record: ResultRow, axis: str | None, tuned_keys: list[str]) -> dict[str, Any]:
    """What a family's ladder fixes for every run on it: the scientific config without the seed, the
    mixer, the tuned keys and the rung."""
    flat = flatten(hashed_config(record["config"]))
    return {k: v for k, v in sorted(flat.items())
            if k != "seed" and not k.startswith("mixer.") and k not in tuned_keys and k != axis}


def families(records: list[ResultRow], tuned_keys: list[str]) -> dict[str, dict]:
    """family -> {axis, rungs, signature} of ``records``, which must be one ladder (one signature a family)."""
    found = {}
    for family, ladder in ladders(records).items():
        members = [r for r in records if r["config"]["task"]["name"] == family]
        signatures = {json.dumps(signature(r, ladder["axis"], tuned_keys), default=str) for r in members}
        if len(signatures) > 1:
            raise ConfigError(f"the {family} runs are on {len(signatures)} different ladders: a reference holds one")
        found[family] = {**ladder, "signature": json.loads(next(iter(signatures)))}
    return found


def refusal(reference: dict, records: list[ResultRow]) -> str | None:
    """Why ``reference`` does not apply to ``records`` (one line), or None when it does."""
    name = f"reference {reference['preset']} (ladder {reference['ladder']}, torch {reference['versions'].get('torch')})"
    majors = {torch_major(r.get("versions", {}).get("torch")) for r in records}
    if majors - {torch_major(reference["versions"].get("torch"))}:
        return (f"{name} does not apply: your runs used torch {', '.join(sorted(str(m) for m in majors))}.x, "
                f"another major version; rank without --reference, or rerun the built-ins")
    by_family = reference["families"]
    for family, ladder in families(records, reference["tuned_keys"]).items():
        if family not in by_family:
            return f"{name} does not apply: it has no {family} family (it has {', '.join(sorted(by_family))})"
        theirs = by_family[family]
        if ladder["axis"] not in (None, theirs["axis"]):
            return (f"{name} does not apply: your {family} ladder varies {ladder['axis']}, "
                    f"the reference's {theirs['axis']}")
        rungs = ladder["rungs"]
        if ladder["axis"] is None:  # one rung of the ladder run: its value under the reference's key
            rungs = sorted({flatten(hashed_config(r["config"])).get(theirs["axis"]) for r in records
                            if r["config"]["task"]["name"] == family}, key=str)
        extra = [r for r in rungs if r not in theirs["rungs"]]
        if extra:
            return f"{name} does not apply: your {family} runs have rung(s) {extra} it lacks (it has {theirs['rungs']})"
        ours = {k: v for k, v in ladder["signature"].items() if k != theirs["axis"]}
        for key in sorted(set(ours) | set(theirs["signature"])):
            if ours.get(key) != theirs["signature"].get(key):
                return (f"{name} does not apply: your {family} runs have {key}={ours.get(key)!r}, its ladder "
                        f"{theirs['signature'].get(key)!r}: another ladder version")
    return None


def rows(reference: dict, without: Collection[str] = ()) -> list[ResultRow]:
    """The reference's rows as result rows the ranking reads, leaving out the mixers in ``without``
    (those the user's own runs rank in their place)."""
    commit, dirty = reference["commit"].removesuffix(" (dirty)"), reference["commit"].endswith(" (dirty)")
    header = {"schema_version": SCHEMA_VERSION, "versions": reference["versions"], "error": None,
              "provenance": {"git": {"commit": commit, "dirty": dirty}, "machine": reference["machine"]}}
    return [upgrade_row(cast(ResultRow, {**header, **row, "schema_version": reference.get("schema_version", 2)}))
            for row in reference["rows"] if row["config"]["mixer"]["name"] not in without]


# The plateau fields a reference keeps: the held plateau (its end, censoring, worth) and the first drop.
COMPACT_PLATEAU = ("end_step", "censored", "worth", "first_drop_step", "first_drop_censored")


# The curves a reference keeps, so that `rank --reference` reads the built-ins' abruptness and held
# plateaus (per-cell eval losses, train loss), and the task facts those are read against.
COMPACT_CURVES = ("eval_cells", "train_loss")
COMPACT_FACTS = ("chance_loss", "floor_loss")


def compact(record: ResultRow) -> dict:
    """The part of a result row the ranking reads, with its curves rounded (``COMPACT_CURVES``)."""
    emergence, plateau = EMERGENCE.read(record), PLATEAU.read(record)
    curves: dict[str, Any] = dict(section(record, "curves"))
    facts: dict[str, Any] = dict(section(record, "task_facts"))
    return {"run_id": record["run_id"], "status": record["status"], "seed": record["seed"], "config": record["config"],
            "parameters": record.get("parameters"), "state_size": record.get("state_size"),
            "timing": {"steps": section(record, "timing").get("steps")},
            "emergence": {"step": emergence.get("step"), "censored": emergence.get("censored")},
            "plateau": {key: value for key, value in plateau.items() if key in COMPACT_PLATEAU},
            "task_facts": {key: facts[key] for key in COMPACT_FACTS if key in facts},
            "curves": {key: packed.rounded(curves[key]) for key in COMPACT_CURVES if curves.get(key)}}
