"""The ranking: per mixer and task family, how far up a difficulty ladder the mixer still finds the
sparse pattern, and one overall score per mixer.

A *family* is a task (``task.name``); its *ladder* is the one numeric task key that varies among the
family's runs (state size, sparsity, pairs, depth), its values the rungs, harder as they rise. A
*cell* is one (mixer, family, rung): its seeds' success rate (emerged within the budget) with a 95%
Wilson interval; Kaplan–Meier medians of the first loss drop (``plateau_score``), the held plateau's
end (``emergence_bench.stats.held_plateau``) and the emergence step, runs that never got there censored.
A cell is one setting over its replicates (seeds, task instances), and every mixer of a rung has
one budget: a folder that mixes two (a rerun at another budget) is refused, not pooled.

Per mixer and family:
  - frontier: the hardest rung whose success rate is ≥ 50%, with an interval: the hardest rung whose
    Wilson interval lies wholly above 50% (low) and the hardest whose interval reaches 50% (high);
    None is "below the ladder's first rung".
  - area: the mean success rate over the ladder's rungs (the area under success vs rung, the rungs
    equally spaced and the area normalised to [0, 1]).
Overall: the score is the mean area over families; mixers are ranked by it, and a mixer whose score
is within the 95% margin of the best-ranked mixer of the tie group above it (a z-test on the
difference, each cell's variance binomial with a Laplace-smoothed rate) shares that one's rank: a
tie. (Against the group's leader, not the neighbour: chained ties could tie a whole ranking.)
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Collection
from pathlib import Path

import pandas as pd

from emergence_bench.config import ConfigError, hashed_config
from emergence_bench.measurements import measurement
from emergence_bench.reporting import plateau_score, reference
from emergence_bench.reporting.ladder import ladders
from emergence_bench.reporting.leaderboard import flatten
from emergence_bench.reporting.rank_tables import to_markdown
from emergence_bench.results.atomic import write_files
from emergence_bench.results.row import ResultRow, emergence_step
from emergence_bench.results.row_curves import held_plateaus, plateau_time
from emergence_bench.results.store import LADDER_FILE, RANK_STEM, TUNING_DIR, json_text, load_records, read_tables
from emergence_bench.stats.medians import kaplan_meier_median, wilson_interval

Z = 1.96  # 95%


def mixer_label(record: ResultRow, labels: dict[str, str]) -> str:
    return labels[json.dumps(record["config"]["mixer"], sort_keys=True, default=str)]


def mixer_labels(records: list[ResultRow]) -> dict[str, str]:
    """Each distinct mixer section -> its label. A mixer is its name; two sections of one name are two
    mixers (labelled by the keys that tell them apart, ``transformer(n_heads=4)``) only where one task
    family holds both. A name whose sections differ between families only is one mixer at per-family
    settings (ladder v4 gives every mixer heads of 8 on the linear map): labelled apart, its families
    would split into two half-ranked mixers."""
    sections: dict[str, dict] = {}
    per_family: dict[str, dict[str, set[str]]] = {}  # name -> family -> its section keys
    for r in records:
        key = json.dumps(r["config"]["mixer"], sort_keys=True, default=str)
        sections[key] = r["config"]["mixer"]
        per_family.setdefault(r["config"]["mixer"]["name"], {}).setdefault(r["config"]["task"]["name"], set()).add(key)
    labels = {}
    for key, section in sections.items():
        name = section["name"]
        if all(len(keys) == 1 for keys in per_family[name].values()):
            labels[key] = name
            continue
        same = [s for s in sections.values() if s["name"] == name]
        differing = sorted(k for k in section if k != "name" and len({json.dumps(s.get(k)) for s in same}) > 1)
        labels[key] = name + (f"({', '.join(f'{k}={section[k]}' for k in differing)})" if differing else "")
    return labels


def cell_members(records: list[ResultRow], ladder: dict) -> dict[tuple[str, str, str], list[ResultRow]]:
    """(mixer label, family, rung as JSON) -> the cell's records."""
    labels = mixer_labels(records)
    members: dict[tuple[str, str, str], list[ResultRow]] = {}
    for r in records:
        family = r["config"]["task"]["name"]
        axis = ladder[family]["axis"]
        rung = flatten(hashed_config(r["config"])).get(axis) if axis else None
        members.setdefault((mixer_label(r, labels), family, json.dumps(rung)), []).append(r)
    return members


REPLICATES = ("seed", "task.task_seed")  # what the runs of one cell may differ in: its replicates
BUDGET_KEY = "trainer.max_steps"


class MixedSettings(ConfigError):
    """A cell of two settings, or a rung of two budgets (``check_settings``): not a ranking."""


def check_settings(members: dict[tuple[str, str, str], list[ResultRow]], ladder: dict) -> None:
    """A cell's success rate is over one setting: its runs may differ in their replicates only, and
    every mixer of a rung trains for one budget (a run given more steps has more time to emerge).
    Two settings in one folder (a rerun at another --trainer.max_steps) are refused, naming the keys
    and values, rather than pooled or compared across budgets (MixedSettings)."""
    how = ("rank each setting on its own: move one setting's run folders into another folder (the leaderboard, "
           "`emergence-bench leaderboard DIR`, shows a row per setting)")
    budgets: dict[tuple[str, str], dict[str, set[str]]] = {}
    for (mixer, family, rung), runs in members.items():
        flats = [flatten(hashed_config(r["config"])) for r in runs]
        keys = sorted({k for f in flats for k in f} - set(REPLICATES))
        for key in keys:
            values = Counter(json.dumps(f.get(key), default=str) for f in flats)
            if len(values) > 1:
                counted = ", ".join(f"{key}={v}: {n} run{'s' if n > 1 else ''}" for v, n in sorted(values.items()))
                raise MixedSettings(f"the cell {mixer} · {family} {_rung(ladder[family]['axis'], rung)} mixes runs of "
                                  f"two settings ({counted}): a success rate over both means neither; {how}")
        budgets.setdefault((family, rung), {}).setdefault(json.dumps(flats[0].get(BUDGET_KEY)), set()).add(mixer)
    for (family, rung), by_budget in budgets.items():
        if len(by_budget) > 1:
            listed = "; ".join(f"{BUDGET_KEY}={b}: {', '.join(sorted(m))}" for b, m in sorted(by_budget.items()))
            raise MixedSettings(f"the mixers of {family} {_rung(ladder[family]['axis'], rung)} trained for different "
                              f"budgets ({listed}): success within a budget compares them only at one; {how}")


def _rung(axis: str | None, rung: str) -> str:
    return f"{axis.removeprefix('task.')}={json.loads(rung)}" if axis else "(one rung)"


def cells(records: list[ResultRow], axes: dict[str, str] | None = None) -> tuple[pd.DataFrame, dict]:
    """One row per (mixer, family, rung) and the ladders. Failed runs (errors) are left out of the
    rates; a diverged run counts as not emerged, as in the leaderboard. A cell of two settings (or a
    rung of two budgets) is refused (``check_settings``)."""
    ladder = ladders(records, axes)
    emergence, budget, abrupt = measurement("emergence"), measurement("budget"), measurement("abruptness")
    rows = []
    found = cell_members(records, ladder)
    check_settings(found, ladder)
    for (mixer, family, rung), members in found.items():
        measured = [r for r in members if r["status"] in ("ok", "diverged")]
        emerged = sum(1 for r in measured if emergence_step(r) is not None)
        low, high = wilson_interval(emerged, len(measured))
        # The median step and budget as the leaderboard declares them; the success rate is the rank's own
        # (over every trained run: a run a forecast stopped counts as not emerged).
        declared = {**emergence.aggregate(members), **budget.aggregate(members), **abrupt.aggregate(members)}
        ends = [plateau_score.first_drop(r) for r in measured]
        params = [r["parameters"] for r in members if r.get("parameters")]
        states = [size for r in members if (size := r.get("state_size"))]
        rows.append({"mixer": mixer, "family": family, "axis": ladder[family]["axis"], "rung": json.loads(rung),
                     "rung_index": ladder[family]["rungs"].index(json.loads(rung)),
                     "seeds": len(members), "failed": len(members) - len(measured), "emerged": emerged,
                     "success_rate": emerged / len(measured) if measured else None,
                     "success_low": low, "success_high": high,
                     "median_first_drop": kaplan_meier_median([t for t, _ in ends], [c for _, c in ends]),
                     **held_plateaus(measured),
                     "median_emergence_step": declared["median_emergence_step"],
                     "budget": declared["budget"], "parameters": max(params) if params else None,
                     "abrupt_cells": declared["abrupt_cells"],
                     "cells_with_transition": declared["cells_with_transition"],
                     "median_transition_share": declared["median_transition_share"],
                     "abrupt_cells_rule": declared["abrupt_cells_rule"], "cells_with_drop": declared["cells_with_drop"],
                     "median_onset": declared["median_onset"], "median_decades": declared["median_decades"],
                     "state_size": max(states) if states else None})
    table = pd.DataFrame(rows)
    if len(table):
        table = table.sort_values(["family", "mixer", "rung_index"], ignore_index=True)
    return table, ladder


def family_scores(cell_rows: pd.DataFrame, ladder: dict) -> pd.DataFrame:
    """One row per (mixer, family): frontier (with its interval), area (with its standard error)."""
    rows = []
    for (mixer, family), group in cell_rows.groupby(["mixer", "family"], sort=True):
        rungs = ladder[family]["rungs"]
        by_rung = {row.rung_index: row for row in group.itertuples()}
        rates, variances, frontier, low, high = [], [], None, None, None
        for i, rung in enumerate(rungs):
            row = by_rung.get(i)
            if row is None or pd.isna(row.success_rate):  # a rung this mixer did not run (or only failed)
                rates.append(0.0)
                variances.append(0.25)
                continue
            rates.append(row.success_rate)
            n = row.seeds - row.failed
            smoothed = (row.emerged + 1) / (n + 2)
            variances.append(smoothed * (1 - smoothed) / n)
            if row.success_rate >= 0.5:
                frontier = rung
            if row.success_low > 0.5:
                low = rung
            if row.success_high >= 0.5:
                high = rung
        missing = [rungs[i] for i in range(len(rungs)) if i not in by_rung]
        rows.append({"mixer": mixer, "family": family, "axis": ladder[family]["axis"], "rungs": len(rungs),
                     "missing_rungs": missing, "frontier": frontier, "frontier_low": low, "frontier_high": high,
                     "area": sum(rates) / len(rungs), "area_se": math.sqrt(sum(variances)) / len(rungs)})
    return pd.DataFrame(rows)


def overall(scores: pd.DataFrame, cell_rows: pd.DataFrame, learning_speed: Collection[str] = ()) -> pd.DataFrame:
    """One row per mixer, best first: score (mean area over the families, but those in
    ``learning_speed``), its standard error, rank (equal ranks are ties) and the parameter count; every
    family's area and frontier as columns."""
    every = sorted(scores["family"].unique())
    families = [f for f in every if f not in learning_speed] or every
    rows = []
    for mixer, group in scores.groupby("mixer", sort=True):
        areas = {row.family: row for row in group.itertuples()}
        # A family the mixer did not run scores 0 with the largest variance (0.5 at every rung).
        score = sum(areas[f].area if f in areas else 0.0 for f in families) / len(families)
        se = math.sqrt(sum((areas[f].area_se if f in areas else 0.5) ** 2 for f in families)) / len(families)
        params = cell_rows.loc[cell_rows["mixer"] == mixer, "parameters"].dropna()
        states = cell_rows.loc[cell_rows["mixer"] == mixer, "state_size"].dropna()
        rows.append({"mixer": mixer, "score": score, "score_se": se,
                     "parameters": int(params.max()) if len(params) else None,
                     "state_size": int(states.max()) if len(states) else None,
                     **{f"area:{f}": areas[f].area if f in areas else None for f in every},
                     **{f"frontier:{f}": areas[f].frontier if f in areas else None for f in every}})
    table = pd.DataFrame(rows).sort_values(["score", "mixer"], ascending=[False, True], ignore_index=True)
    # A tie is with the leader of the current tie group, not with the mixer just above: chained
    # pairwise ties would let a whole ranking tie although its first and last differ clearly.
    ranks: list[int] = []
    tied_with: list[str | None] = []
    leader = 0
    for i, row in enumerate(table.itertuples()):
        if i and table.score[leader] - row.score <= Z * math.hypot(table.score_se[leader], row.score_se):
            ranks.append(ranks[leader])
            tied_with.append(table.mixer[leader])
        else:
            leader = i
            ranks.append(i + 1)
            tied_with.append(None)
    table.insert(0, "rank", ranks)
    table["tied_with"] = pd.Series(tied_with, dtype=object)
    return table


def learning_rates(records: list[ResultRow]) -> dict[str, dict[str, list[float]]]:
    """mixer label -> family -> the distinct learning rates its runs trained at (one, on a tuned ladder)."""
    labels = mixer_labels(records)
    found: dict[str, dict[str, set[float]]] = {}
    for r in records:
        lrs = found.setdefault(mixer_label(r, labels), {}).setdefault(r["config"]["task"]["name"], set())
        if (lr := r["config"].get("optim", {}).get("lr")) is not None:
            lrs.add(lr)
    return {m: {f: sorted(v) for f, v in sorted(by.items())} for m, by in sorted(found.items())}


def disagreements(first: pd.DataFrame, second: pd.DataFrame) -> list[tuple[str, str]]:
    """The pairs (a, b) that two rankings (``overall`` tables, e.g. of disjoint seed sets) order
    oppositely: a strictly above b in ``first`` (a better rank, not a tie) and strictly below it in
    ``second``. Ties in either one agree with any order; mixers only one ranking has are skipped."""
    ranks = [dict(zip(table["mixer"], table["rank"])) for table in (first, second)]
    common = sorted(set(ranks[0]) & set(ranks[1]))
    return [(a, b) for a in common for b in common
            if ranks[0][a] < ranks[0][b] and ranks[1][a] > ranks[1][b]]


DEFAULT_BASELINE = "transformer"


def build(records: list[ResultRow], axes: dict[str, str] | None = None, baseline: str | None = None,
          learning_speed: Collection[str] = ()) -> dict:
    """Everything the ranking holds: ladders, cells, per-family scores, the held plateau's and the first
    drop's ratios to ``baseline`` (a mixer label; default the Transformer where it ran, else neither)
    and the overall ranking with both scores. The families in ``learning_speed`` (smooth by the
    suite's own measure: no rung shows the phenomenon) stay out of the success score and are shown in
    their own table; where every family is one, the score is over them all."""
    if not records:
        raise ConfigError("no results to rank")
    cell_rows, ladder = cells(records, axes)
    scores = family_scores(cell_rows, ladder)
    speed = sorted(set(learning_speed) & set(ladder))
    if speed and len(speed) == len(ladder):
        speed = []
    ranking = overall(scores, cell_rows, speed)
    if baseline is None and DEFAULT_BASELINE in set(ranking["mixer"]):
        baseline = DEFAULT_BASELINE
    parts = {"held_plateau": pd.DataFrame(), "first_drop": pd.DataFrame()}
    if baseline is not None:
        members = cell_members(records, ladder)
        for name, time in (("held_plateau", plateau_time), ("first_drop", plateau_score.first_drop)):
            parts[name], summary = plateau_score.score(members, baseline, time=time, name=name)
            if len(parts[name]):
                parts[name]["rung"] = parts[name]["rung"].map(json.loads)
            ranking = ranking.merge(summary, on="mixer", how="left")
    return {"ladders": ladder, "cells": cell_rows, "families": scores, "ranking": ranking, **parts,
            "baseline": baseline, "lr": learning_rates(records), "learning_speed": speed}


def declared_learning_speed(root: Path) -> list[str]:
    """The families ``root``'s ladder declares as learning speed (``root/ladder.json``, which a sweep of a
    preset with ``learning_speed`` writes); none where it has no such file."""
    path = root / LADDER_FILE
    if not path.is_file():
        return []
    try:
        found = json.loads(path.read_text(encoding="utf-8")).get("learning_speed") or []
    except (OSError, ValueError, AttributeError) as error:
        raise ConfigError(f"{path}: not a ladder file ({error}); remove it or rerun the sweep") from None
    if not isinstance(found, list) or not all(isinstance(f, str) for f in found):
        raise ConfigError(f"{path}: learning_speed must be a list of task family names, got {found!r}")
    return found


def write(root: str | Path, axes: dict[str, str] | None = None, strict: bool = False,
          baseline: str | None = None, reference_name: str | None = None,
          learning_speed: list[str] | None = None) -> tuple[dict, str]:
    """``ranked``, written: rank.md, rank.csv and rank.json under ``root``, all three or none."""
    found, markdown, written = ranked(root, axes, strict, baseline, reference_name, learning_speed)
    write_files(written)
    return found, markdown


def ranked(root: str | Path, axes: dict[str, str] | None = None, strict: bool = False,
           baseline: str | None = None, reference_name: str | None = None,
           learning_speed: list[str] | None = None) -> tuple[dict, str, dict[Path, str]]:
    """Rank every result under ``root`` (its tuning runs left out), with the rows of the reference
    ``reference_name`` for the mixers ``root`` lacks: (the ranking, its Markdown, the files it goes
    to: rank.md, rank.csv (the ranking) and rank.json (all of it, with each mixer's learning rate per
    family and the tuning tables)); nothing written. ``learning_speed``: the families outside the
    success score (default: those ``root/ladder.json`` declares). ``strict``: an unreadable result
    file is an error, not a warning (see results.load_records)."""
    root = Path(root)
    if learning_speed is None:
        learning_speed = declared_learning_speed(root)
    records = load_records(root, strict=strict, exclude=(TUNING_DIR,))
    if not records:
        raise ConfigError(f"no results to rank under {root}")
    if not any(r["status"] == "ok" for r in records):
        statuses = ", ".join(f"{n} {s}" for s, n in sorted(Counter(r["status"] for r in records).items()))
        raise ConfigError(f"no run under {root} finished ok ({statuses}): nothing to rank")
    families = {r["config"]["task"]["name"] for r in records}
    unknown = sorted(set(axes or {}) - families)
    if unknown:
        raise ConfigError(f"--rung {unknown[0]}=...: no task family {unknown[0]!r} under {root}; "
                          f"families: {', '.join(sorted(families))}")
    tuning = read_tables(root / TUNING_DIR)
    ref = None
    if reference_name is not None:
        ref = reference.load(reference_name)
        if why := reference.refusal(ref, records):
            raise ConfigError(why)
        ours = {r["config"]["mixer"]["name"] for r in records}
        records = records + reference.rows(ref, without=ours)
    found = build(records, axes, baseline, learning_speed)
    found["tuning"] = tuning + reference_tuning(ref, records, {(t["mixer"], t["group"]) for t in tuning})
    found["reference"] = None if ref is None else {"name": reference_name, **{k: ref[k] for k in (
        "preset", "ladder", "commit", "versions", "machine", "created")}}  # name: what `report` ranks against
    markdown = to_markdown(found)
    if ref is not None:
        markdown = (f"Ranked against reference {ref['preset']} (ladder {ref['ladder']}, "
                    f"commit {str(ref['commit'])[:10]}, torch {ref['versions'].get('torch')}, "
                    f"{ref['machine'].get('cpus')} CPUs) for the mixers not run here.\n\n") + markdown
    return found, markdown, {
        root / f"{RANK_STEM}.md": markdown, root / f"{RANK_STEM}.csv": found["ranking"].to_csv(index=False),
        root / f"{RANK_STEM}.json": json_text({
            "ladders": found["ladders"], "baseline": found["baseline"], "lr": found["lr"],
            "learning_speed": found["learning_speed"], "tuning": found["tuning"], "reference": found["reference"],
            **{part: json.loads(found[part].to_json(orient="records"))
               for part in ("ranking", "families", "cells", "held_plateau", "first_drop")}})}


def reference_tuning(ref: dict | None, records: list[ResultRow], have: set[tuple[str, str]]) -> list[dict]:
    """The tuning tables behind ``records``' built-in mixers: the given reference's, or the builtin
    one's where it applies; a table only where the runs trained at its choice and ``have`` lacks it."""
    if ref is None:
        try:
            ref = reference.load(reference.BUILTIN)
        except (ConfigError, OSError):
            return []
        if reference.refusal(ref, records) is not None:
            return []
    used = {(r["config"]["mixer"]["name"], r["config"]["task"]["name"], r["config"].get("optim", {}).get("lr"))
            for r in records}
    return [t for t in ref["tuning"] if (t["mixer"], t["group"]) not in have
            and (t["mixer"], t["family"], t["chosen"].get("optim.lr")) in used]
