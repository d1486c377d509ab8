"""A pre-registered design, recorded and hashed, so that a change after its runs start shows.

``record(preset, stage)`` is what the stage declared before any of its runs: alpha and the Holm
family, each row's claim with its statistic, direction, settings (seeds and task instances
included) and runs a cell, and every run the preset resolves to, by group (its run id: the hash of
its whole resolved config; for a tuned preset, whose values are chosen only when its tuning has run,
``preset_runs`` says what stands in for it). ``digest`` is its sha256 over canonical JSON. The file
``benchmark/presets/<preset>.design.json`` holds both, committed beside the preset; ``check`` says
whether the design still matches it, and what changed where it does not.

``python -m emergence_bench.claims.preregistration [PRESET STAGE]`` writes the file (the
replication's by default; ``claims-cpu-v2-recurrent own-lr`` the recurrent mixers' at their own lr): a
declaration, made once, before the stage's first run.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

from emergence_bench.claims import claims
from emergence_bench.claims.judge import ALPHA, design_runs
from emergence_bench.config import RunConfig, hashed_config, resolve
from emergence_bench.execution import tuning
from emergence_bench.execution.sweep_spec import PRESETS_DIR, load_sweep
from emergence_bench.results.store import TUNING_DIR


def path(preset: str) -> Path:
    """Where the preset's design record is committed: beside the preset."""
    return PRESETS_DIR / f"{preset}.design.json"


def record(preset: str, stage: str) -> dict[str, Any]:
    """The design of ``stage``, whose runs ``preset`` trains (see the module docstring)."""
    rows = [{"id": c.id, "number": c.number, "groups": list(c.groups), "statistic": c.statistic,
             "effect": c.effect, "predicts": c.predicts, "kind": c.kind, "margin": c.margin,
             "runs_a_cell": design_runs(c), "settings": dict(c.settings)} for c in claims() if c.stage == stage]
    if not rows:
        raise ValueError(f"no claim is declared for stage {stage!r}")
    # json round trip: tuples as lists, so a record reads back equal to itself
    return json.loads(json.dumps({"preset": preset, "stage": stage, "alpha": ALPHA,
                                  "family": "Holm over the stage's rows", "claims": rows,
                                  "runs": preset_runs(preset)}))


def preset_runs(preset: str) -> dict[str, list[str]]:
    """Every run ``preset`` trains, by group, as its run id. A tuned preset's runs train at values its
    tuning has not chosen yet, so each stands as ``untuned_id`` (the same before and after ``tuned:`` is
    frozen), and its tuning runs (every mixer's, at the declared grid) by their run ids, under
    ``tuning/<group>``: what the tuning will choose is an outcome, not part of the design."""
    sweep = load_sweep(preset)
    runs: dict[str, list[str]] = {}
    if sweep.tuning is None:
        for group, raw in sweep.raw_runs():
            runs.setdefault(group, []).append(resolve(raw).run_id())
        return runs
    jobs = tuning.jobs_for(sweep, retune=True)
    for group, raw in tuning.tuning_sweep(sweep, jobs).raw_runs():
        runs.setdefault(f"{TUNING_DIR}/{group}", []).append(resolve(raw).run_id())
    for job in jobs:  # any value will do: untuned_id leaves the tuned keys out
        sweep.tuned.setdefault(job.name, {})[job.group] = {key: values[0] for key, values in job.grid.items()}
    for group, raw in sweep.raw_runs():
        runs.setdefault(group, []).append(untuned_id(resolve(raw), list(sweep.tuning.grid)))
    return runs


def untuned_id(config: RunConfig, keys: list[str]) -> str:
    """A run's id with the tuned ``keys`` (dotted) left out of the hash: its task, mixer and seed, and
    the hash of the rest of its resolved config, marked ``untuned``."""
    data = hashed_config(config.to_dict())
    for key in keys:
        *path, last = key.split(".")
        node = data
        for part in path:
            node = node[part]
        del node[last]
    digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:10]
    return f"{config.task.name}-{config.mixer.name}-seed{config.seed}-untuned-{digest}"


def digest(design: dict[str, Any]) -> str:
    """sha256 of the design as canonical JSON (keys sorted, no spaces)."""
    return hashlib.sha256(json.dumps(design, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def write(preset: str, stage: str) -> Path:
    """Writes the preset's design record (its digest and the design) and returns its path."""
    design = record(preset, stage)
    text = json.dumps({"sha256": digest(design), "design": design}, indent=1)
    # A list of numbers (the seeds) on one line; a run id on a line of its own, so a diff names it.
    text = re.sub(r"\[\s*([-\d.e+]+(?:,\s*[-\d.e+]+)*)\s*\]", lambda m: "[" + re.sub(r",\s*", ", ", m[1]) + "]", text)
    target = path(preset)
    target.write_text(text + "\n", encoding="utf-8")
    return target


def changes(stored: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """What differs between two records, in words: a top-level entry, a claim, a group's runs."""
    found = [f"{key}: {stored.get(key)!r} -> {current.get(key)!r}" for key in sorted({*stored, *current})
             if key not in ("claims", "runs") and stored.get(key) != current.get(key)]
    before = {c["id"]: c for c in stored.get("claims", [])}
    after = {c["id"]: c for c in current.get("claims", [])}
    for claim in sorted({*before, *after}):
        if before.get(claim) != after.get(claim):
            keys = sorted(k for k in {*before.get(claim, {}), *after.get(claim, {})}
                          if before.get(claim, {}).get(k) != after.get(claim, {}).get(k))
            found.append(f"claim {claim}: " + (", ".join(keys) if claim in before and claim in after
                                                else "added" if claim in after else "removed"))
    for group in sorted({*stored.get("runs", {}), *current.get("runs", {})}):
        old, new = set(stored.get("runs", {}).get(group, [])), set(current.get("runs", {}).get(group, []))
        if old != new:
            found.append(f"group {group}: {len(new - old)} run id(s) new, {len(old - new)} gone")
    return found


def check(preset: str, stage: str) -> str | None:
    """None where the design of ``stage`` still matches the record committed beside ``preset``; else
    what changed, and how to declare again honestly."""
    target = path(preset)
    if not target.is_file():
        return f"{target} is missing: the design was never declared (`python -m {__name__} {preset} {stage}`)"
    stored = json.loads(target.read_text(encoding="utf-8"))
    current = record(preset, stage)
    if digest(stored["design"]) == stored["sha256"] == digest(current):
        return None
    what = changes(stored["design"], current) or ["the file's sha256 does not match its own design"]
    return (f"the {stage} design ({preset}) no longer matches its pre-registered hash in {target}: "
            + "; ".join(what) + ". If none of its runs has started, declare it again: run "
            f"`python -m {__name__} {preset} {stage}` and commit the new file with a line in docs/claims.md saying "
            "what changed and why. If any has started, the design stands as declared: undo the change, or declare "
            "a new stage (a new preset, fresh seeds, new claim ids) and judge it on its own.")


if __name__ == "__main__":
    from emergence_bench.claims.replication import PRESET, STAGE

    names = sys.argv[1:] or [PRESET, STAGE]
    if len(names) != 2:
        sys.exit(f"usage: python -m {__name__} [PRESET STAGE]")
    print(f"wrote {write(*names)}")
