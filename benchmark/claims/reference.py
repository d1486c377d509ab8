"""The claims' shipped reference: the first stage's confirmation rows, compacted with their curves, in
one file beside the ranking's (``benchmark/presets/reference/claims-cpu-v2.json.gz``), so that
``emergence-bench claims DIR --reference builtin`` judges DIR's rows with the shipped rows filling
every (group, mixer) DIR lacks (``judge.filled``), without training them again.

A file holds its rows by sweep group (``compact``: what the claims read, the curves rounded), the
stage's design as ``preregistration.record`` gives it (each claim's declaration and every run id of
the preset) with its sha256, and where the rows came from (commit, versions, machine). It applies
only where this version's design has the same sha256; else it is refused in one line naming what
changed. ``build`` keeps only the preset's runs, and refuses to write rows that judge otherwise
once compacted.

Written by ``emergence-bench claims DIR --save-reference [FILE]``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from emergence_bench.claims import claims
from emergence_bench.claims.judge import PATCHING_GROUP, ScoreRow, attach_patching, judge, rows_by_group
from emergence_bench.claims.preregistration import changes, digest, record
from emergence_bench.config import ConfigError
from emergence_bench.execution.sweep_spec import PRESETS_DIR
from emergence_bench.measurements.attention_probe import ATTENTION_PROBE
from emergence_bench.measurements.emergence import EMERGENCE
from emergence_bench.results import packed
from emergence_bench.results.row import ResultRow, section
from emergence_bench.results.store import SCHEMA_VERSION, code_version

PRESET, STAGE = "claims-cpu-v2", "confirmation"  # the first stage's confirmation
BUILTIN = "builtin"
SHIPPED = PRESETS_DIR / "reference" / f"{PRESET}.json.gz"
FORMAT, KIND = 1, "claims"
KEYS = ("preset", "stage", "design", "sha256", "commit", "versions", "machine", "created", "rows")
WHAT = ("a reference is the gzipped JSON (.json.gz) that `emergence-bench claims DIR --save-reference FILE` "
        f"writes from a finished {PRESET} sweep; or give builtin")
NONE_SHIPPED = (f"no claims reference ships with this version ({SHIPPED.name} is not in {SHIPPED.parent}): judge "
                f"without --reference, or make one from a finished {PRESET} sweep with "
                f"`emergence-bench claims DIR --save-reference` (docs/claims.md)")


# What a row keeps: every section a claim reads, whole, but for what no claim reads (the train-loss
# curve, the emergence history, the provenance, the seed-parallel record); losses on curves rounded
# (``packed.rounded``), final metrics exact (the blanked-outputs arm differs in the fifth digit).
CURVES = ("eval", "eval_cells")
WHOLE = ("metrics", "plateau", "task_facts", "patching")


def compact(row: ResultRow) -> dict[str, Any]:
    """The part of a result row the claims read (see above)."""
    kept = cast(Mapping[str, Any], row)
    curves: Mapping[str, Any] = section(row, "curves")
    probe: dict[str, Any] = dict(section(row, ATTENTION_PROBE))
    if probe.get("history"):
        probe["history"] = packed.rounded(probe["history"])
    return {"run_id": row["run_id"], "status": row["status"], "seed": row["seed"], "config": row["config"],
            "timing": {"steps": section(row, "timing").get("steps")},
            "emergence": {k: v for k, v in section(row, EMERGENCE).items() if k != "history"},
            "attention_probe": probe, "curves": {k: packed.rounded(curves[k]) for k in CURVES if curves.get(k)},
            **{key: kept[key] for key in WHOLE if kept.get(key) is not None}}


def rows(reference: Mapping[str, Any]) -> dict[str, list[ResultRow]]:
    """The reference's rows by sweep group, as result rows."""
    header = {"schema_version": SCHEMA_VERSION, "versions": reference["versions"], "error": None,
              "provenance": {"machine": reference["machine"]}}
    return {group: [cast(ResultRow, {**header, **row}) for row in found] for group, found in reference["rows"].items()}


def printed(card: Sequence[ScoreRow]) -> list[tuple]:
    """What the scorecard prints of each row (numbers to the digits it shows)."""
    def shown(value: float | None, spec: str) -> str:
        return "-" if value is None else f"{value:{spec}}"

    return [(d["claim"], d["verdict"], d["n"], d["reason"], shown(d["effect"], ".3g"), shown(d["low"], ".3g"),
             shown(d["high"], ".3g"), shown(d["p_holm"], ".2g")) for d in (line.to_dict() for line in card)]


def build(folder: Path, preset: str = PRESET, stage: str = STAGE) -> dict[str, Any]:
    """The reference of ``folder``'s runs of ``preset`` (its ``stage``'s design: only the run ids it
    names, never an exploration run or a failed one). A ConfigError where there is none, or where
    the compacted rows would judge otherwise than the rows themselves."""
    design = record(preset, stage)
    wanted = {run_id: group for group, ids in design["runs"].items() for run_id in ids}
    groups = rows_by_group(folder)
    if groups.get(PATCHING_GROUP):
        attach_patching(folder, groups[PATCHING_GROUP])  # claim 3 reads the reports kept beside the rows
    kept = {group: sorted((r for r in found if wanted.get(r["run_id"]) == group and r["status"] != "failed"),
                          key=lambda r: r["run_id"]) for group, found in sorted(groups.items())}
    kept = {group: found for group, found in kept.items() if found}
    if not kept:
        raise ConfigError(f"no run of {preset} ({stage}) under {folder}: a claims reference holds a finished "
                          f"sweep's rows; run `emergence-bench sweep {preset} --out {folder}` first")
    first = next(iter(kept.values()))[0]
    reference = {"format": FORMAT, "kind": KIND, "preset": preset, "stage": stage, "design": design,
                 "sha256": digest(design), "schema_version": SCHEMA_VERSION,
                 "commit": ", ".join(sorted({code_version(r) for found in kept.values() for r in found})),
                 "versions": first["versions"], "machine": section(first, "provenance").get("machine", {}),
                 "created": time.strftime("%Y-%m-%d", time.gmtime()),
                 "runs": f"{sum(map(len, kept.values()))} of the preset's {len(wanted)}",
                 "rows": {group: [compact(r) for r in found] for group, found in kept.items()}}
    judged = [c for c in claims() if c.stage == stage]
    before, after = printed(judge(kept, judged)), printed(judge(rows(reference), judged))
    if before != after:
        differ = [a[0] for a, b in zip(before, after) if a != b]
        raise ConfigError(f"the compacted rows judge otherwise than {folder}'s own (claim(s) {', '.join(differ)}): "
                          f"a claim reads what `claims.reference.compact` leaves out; keep it there")
    return reference


def path_of(name: str) -> Path:
    """``builtin`` (the shipped file, where this version ships one) or a reference file."""
    if name == BUILTIN:
        if not SHIPPED.is_file():
            raise ConfigError(NONE_SHIPPED)
        return SHIPPED
    if Path(name).is_dir():
        raise ConfigError(f"reference {name!r} is a folder, not a reference file; {WHAT}")
    if not Path(name).is_file():
        raise ConfigError(f"no claims reference {name!r}: no such file; {WHAT}")
    return Path(name)


def load(name: str) -> dict[str, Any]:
    """The claims reference ``name`` (``path_of``), checked: a file that is not one, another kind or
    format, or one built on another design than this version's, is a ConfigError in one line."""
    path = path_of(name)
    name = name if str(path) == name else f"{name!r} ({path})"  # what the lines below call it
    reference = packed.read(path, name, WHAT)
    if reference.get("kind") != KIND:
        raise ConfigError(f"reference {name} is not a claims reference (a ranking's is read by `rank --reference`); "
                          f"{WHAT}")
    if reference.get("format") != FORMAT:
        raise ConfigError(f"reference {name} has format {reference.get('format')!r}; this version reads {FORMAT}; "
                          f"{WHAT}")
    missing = [key for key in KEYS if key not in reference]
    if missing:
        raise ConfigError(f"reference {name} lacks {', '.join(missing)}: not a whole reference file; {WHAT}")
    preset, stage = reference["preset"], reference["stage"]
    try:
        current = record(preset, stage)
    except (ConfigError, ValueError) as error:  # a preset or stage this version does not declare
        raise ConfigError(f"reference {name} does not apply: {error}; {WHAT}") from None
    if not digest(reference["design"]) == reference["sha256"] == digest(current):
        what = changes(reference["design"], current) or ["its sha256 does not match its own design"]
        raise ConfigError(f"reference {name} does not apply: it was built on another design of {preset} ({stage}, "
                          f"sha256 {reference['sha256'][:12]}, this version's {digest(current)[:12]}): "
                          f"{'; '.join(what)}; rebuild it with `emergence-bench claims DIR --save-reference` on a "
                          f"finished {preset} sweep of this version")
    return reference


def taken_line(reference: Mapping[str, Any], taken: Mapping[str, Sequence[str]]) -> str:
    """One line naming the groups, and their mixers, judged from the reference's rows."""
    parts = [f"{group} ({', '.join(mixers)})" for group, mixers in sorted(taken.items())]
    return (f"from the reference {reference['preset']} ({reference['stage']}, commit {reference['commit']}): "
            + (", ".join(parts) if parts else "nothing (the folder holds every group and mixer it has)"))
