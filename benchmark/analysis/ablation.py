"""A declared two-arm ablation, judged per mixer: does the treatment arm emerge in fewer runs, or later?

Reads a results folder ``DIR`` whose groups (its subfolders, ``load_groups``) hold the arms: a control
group and a treatment group (docs/experiments/induction-conv.yaml: ``with-conv`` and ``without-conv``).
A row's mixer is its ``config.mixer.name``: the arms' mixer configs differ in the ablated key (e.g.
``conv_size``), so the name is what matches them. Within a mixer, the arms' runs are paired by
(``seed``, ``config.task.task_seed``).

The test (declared in docs/experiments/induction-conv.yaml's header), per mixer present in both arms:

- each arm's runs and emerged runs (a ``failed`` or ``diverged`` run counts as not emerged), and its
  Kaplan–Meier median emergence step (a run that did not emerge censored at the steps it trained);
- Fisher's exact test, two-sided, on the emerged counts (every run of each arm, paired or not), its p
  adjusted by Holm's method over the mixers present in both arms;
- where every run of both arms emerged: the sign test, two-sided, over the seed pairs on treatment
  step − control step, with the number of pairs where the treatment was later.

The verdict: "treatment slower or fails" where the treatment arm emerges in fewer runs at Holm p <
0.05 (decided by Fisher), or, every run emerging, later in the seed pairs at sign-test p < 0.05
(decided by the sign test); "treatment faster or emerges more" where a test is significant the other
way (the mechanism refuted, not merely unshown); else "no difference shown".

A mixer with runs in one arm only is left out with a warning, not refused: it has nothing to be
compared with, and the others can be judged while its arm is still running. The Holm family is the
mixers in both arms, named in the table, so a family smaller than the declared one is seen there.
A run in one arm without its seed pair is warned of too and left out of the pairs only. Two runs of
one mixer at one (seed, task_seed) in one arm are refused: which of them pairs is not knowable.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from emergence_bench.config import ConfigError
from emergence_bench.results.row import Row, emergence_step, step_budget
from emergence_bench.results.store import load_groups
from emergence_bench.stats.medians import kaplan_meier_median
from emergence_bench.stats.significance import fisher_exact, holm, sign_test

TABLE_FILE = "ablation.md"
JSON_FILE = "ablation.json"
ALPHA = 0.05
SLOWER, FASTER, NO_DIFFERENCE = "treatment slower or fails", "treatment faster or emerges more", "no difference shown"

Pair = tuple[int, Any]  # (seed, task.task_seed)


def _mixer(row: Row) -> str:
    return str(row["config"].get("mixer", {}).get("name", "?"))


def _pair(row: Row) -> Pair:
    return row["seed"], row["config"].get("task", {}).get("task_seed")


def _order(key: Pair) -> tuple[int, str]:
    return key[0], str(key[1])


def _step(row: Row) -> int | None:
    """The run's emergence step; None where it never emerged, and for a failed or diverged run (a
    diverged run may have emerged before its loss went bad: the declared test counts it as failing)."""
    return emergence_step(row) if row["status"] == "ok" else None


def arm(rows: Sequence[Row]) -> dict[str, Any]:
    """One mixer's runs in one arm: {runs, emerged, median (the Kaplan–Meier median emergence step;
    None: not reached), budget (the most steps a run trained), not_ok: ["<run id> (<status>)", ...]}."""
    steps = [_step(r) for r in rows]
    times = [float(s) if s is not None else float(step_budget(r)) for s, r in zip(steps, rows)]
    return {"runs": len(rows), "emerged": sum(s is not None for s in steps),
            "median": kaplan_meier_median(times, [s is None for s in steps]),
            "budget": max(step_budget(r) for r in rows),
            "not_ok": sorted(f"{r['run_id']} ({r['status']})" for r in rows if r["status"] != "ok")}


def _by_mixer(rows: Sequence[Row], group: str) -> dict[str, dict[Pair, Row]]:
    """``rows`` of one arm -> {mixer: {(seed, task_seed): row}}; two rows at one key are bad input."""
    found: dict[str, dict[Pair, Row]] = {}
    for row in rows:
        runs = found.setdefault(_mixer(row), {})
        key = _pair(row)
        if key in runs:
            raise ConfigError(f"group {group} holds two runs of mixer {_mixer(row)} at seed {key[0]}, task_seed "
                              f"{key[1]} ({runs[key]['run_id']}, {row['run_id']}): which of them is paired is "
                              f"not knowable; keep one")
        runs[key] = row
    return found


def compare(control: dict[Pair, Row], treatment: dict[Pair, Row]) -> dict[str, Any]:
    """One mixer's two arms, keyed by (seed, task_seed): {control, treatment (``arm``'s columns),
    fisher_p, pairs, later, earlier, sign_p (None where not every run emerged in both arms),
    unpaired: [(arm, seed, task_seed)]}; Holm's p and the verdict are the family's (``ablation``)."""
    c, t = arm(list(control.values())), arm(list(treatment.values()))
    paired = sorted(set(control) & set(treatment), key=_order)
    unpaired = [(side, *key) for side, own, other in (("control", control, treatment),
                                                      ("treatment", treatment, control))
                for key in sorted(set(own) - set(other), key=_order)]
    line: dict[str, Any] = {"control": c, "treatment": t,
                            "fisher_p": fisher_exact(c["emerged"], c["runs"], t["emerged"], t["runs"]).p,
                            "pairs": len(paired), "later": None, "earlier": None, "sign_p": None,
                            "unpaired": unpaired}
    if c["emerged"] == c["runs"] and t["emerged"] == t["runs"] and paired:  # every step is known
        differences = [float((_step(treatment[k]) or 0) - (_step(control[k]) or 0)) for k in paired]
        line.update(later=sum(d > 0 for d in differences), earlier=sum(d < 0 for d in differences),
                    sign_p=sign_test(differences).p)
    return line


def verdict(line: dict[str, Any]) -> tuple[str, str | None]:
    """(the verdict, the test that decided it: "Fisher", "sign test" or None) of a line with its Holm p."""
    c, t = line["control"], line["treatment"]
    if line["holm_p"] < ALPHA:
        return (SLOWER if t["emerged"] / t["runs"] < c["emerged"] / c["runs"] else FASTER), "Fisher"
    if line["sign_p"] is not None and line["sign_p"] < ALPHA:
        return (SLOWER if line["later"] > line["earlier"] else FASTER), "sign test"
    return NO_DIFFERENCE, None


def ablation(root: str | Path, control: str, treatment: str) -> dict[str, Any]:
    """The ablation of the results folder ``root``: {control, treatment (the groups' names), family
    (the mixers in both arms: Holm's family), mixers: [{mixer, ``compare``'s columns, holm_p, verdict,
    decided_by}], warnings: [str]}. Bad input (no rows, a group not there, no mixer in both arms) is a
    ValueError (ConfigError) of one line."""
    groups = load_groups(root)
    for name in (control, treatment):
        if name not in groups:
            raise ConfigError(f"no group {name!r} in {root}: its groups are {', '.join(groups)}")
    if control == treatment:
        raise ConfigError(f"--control and --treatment are both {control!r}: an ablation compares two groups")
    arms = {name: _by_mixer(groups[name], name) for name in (control, treatment)}
    family = sorted(set(arms[control]) & set(arms[treatment]))
    warnings = [f"mixer {mixer} has runs in {name} only: left out (nothing to compare it with)"
                for name in (control, treatment) for mixer in sorted(set(arms[name]) - set(family))]
    if not family:
        raise ConfigError(f"no mixer has runs in both {control} and {treatment}: {control} holds "
                          f"{', '.join(sorted(arms[control]))}, {treatment} {', '.join(sorted(arms[treatment]))}")
    lines = [{"mixer": mixer, **compare(arms[control][mixer], arms[treatment][mixer])} for mixer in family]
    for line, adjusted in zip(lines, holm([line["fisher_p"] for line in lines])):
        line["holm_p"] = adjusted
        line["verdict"], line["decided_by"] = verdict(line)
    names = {"control": control, "treatment": treatment}
    for line in lines:
        warnings += [f"{line['mixer']}: seed {seed}, task_seed {task_seed} has a run in {names[side]} only: left "
                     f"out of the seed pairs (Fisher's test counts it)" for side, seed, task_seed in line["unpaired"]]
        warnings += [f"{line['mixer']} in {names[side]}: {', '.join(line[side]['not_ok'])}: counted as not emerged"
                     for side in ("control", "treatment") if line[side]["not_ok"]]
    return {"control": control, "treatment": treatment, "family": family, "mixers": lines, "warnings": warnings}


def _p(p: float | None) -> str:
    return "-" if p is None else f"{p:.3g}"


def to_markdown(table: dict[str, Any]) -> str:
    """The ablation as Markdown: one line per mixer (``>N``: a median not reached within N steps),
    then the rule, the Holm family and the warnings."""
    def side(a: dict[str, Any]) -> str:
        median = f">{a['budget']}" if a["median"] is None else f"{a['median']:.0f}"
        return f"{a['emerged']}/{a['runs']}, {median}"

    control, treatment = table["control"], table["treatment"]
    lines = [f"| mixer | control {control}: emerged/runs, median | treatment {treatment}: emerged/runs, median | "
             "Fisher p | Holm p | sign test (later/pairs, p) | verdict |", "|---|---|---|---|---|---|---|"]
    for m in table["mixers"]:
        sign = "-" if m["sign_p"] is None else f"{m['later']}/{m['pairs']}, {_p(m['sign_p'])}"
        decided = f" ({m['decided_by']})" if m["decided_by"] else ""
        lines.append(f"| {m['mixer']} | {side(m['control'])} | {side(m['treatment'])} | {_p(m['fisher_p'])} | "
                     f"{_p(m['holm_p'])} | {sign} | {m['verdict']}{decided} |")
    lines += ["", f"- Fisher's exact test (two-sided) on the emerged counts, Holm over the {len(table['family'])} "
                  f"mixer(s) in both arms ({', '.join(table['family'])}); where every run emerged in both arms, the "
                  f"sign test (two-sided) on treatment − control step over the seed pairs. Significant: p < {ALPHA}."]
    lines += [f"- warning: {warning}" for warning in table["warnings"]]
    return "\n".join(lines) + "\n"
