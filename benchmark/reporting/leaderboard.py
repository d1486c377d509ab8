"""The leaderboard: result rows grouped over seeds into one row per configuration.

A group is every run whose resolved config is equal except for the keys in ``over`` (default: the
seed), i.e. one row per (task config, mixer config, intervention, other settings). Emergence and
plateau times are Kaplan–Meier medians with 95% intervals, runs that never got there censored at
their budget; success rates have 95% Wilson intervals.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from emergence_bench import registry
from emergence_bench.config import scientific
from emergence_bench.result_row import ResultRow, SectionName, emergence_step, forecast_stopped, section, step_budget
from emergence_bench.results import LEADERBOARD_STEM, TUNING_DIR, load_records, write_json, write_text
from emergence_bench.reporting.stats import kaplan_meier_median, kaplan_meier_median_ci, wilson_interval
from emergence_bench.reporting.table import Table


def flatten(data: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _label(flat: dict, prefix: str, varying: list[str]) -> str:
    params = [f"{k[len(prefix):]}={flat[k]}" for k in varying
              if k.startswith(prefix) and k != prefix + "name" and k in flat]
    return " ".join([str(flat[prefix + "name"])] + params)


def _interventions(config: dict) -> list[str]:
    """The configured callbacks that change training (``is_intervention``), sorted."""
    names = []
    for name in sorted(config.get("callbacks", {})):
        try:
            cls = registry.callbacks.get(name)
        except KeyError:  # a plugin that is not installed here
            cls = None
        if getattr(cls, "is_intervention", False):
            names.append(name)
    return names


def _intervention_label(config: dict) -> str:
    labels = [f"{name}({', '.join(f'{k}={v}' for k, v in config['callbacks'][name].items())})"
              for name in _interventions(config)]
    return " + ".join(labels) or "none"


def _without_interventions(config: dict, flat: dict) -> str:
    """The group signature with the interventions left out: equal for a row and its baseline."""
    prefixes = tuple(f"callbacks.{name}" for name in _interventions(config))
    return json.dumps({k: v for k, v in sorted(flat.items()) if not k.startswith(prefixes)},
                      default=str)


def km_time(records: list[ResultRow], name: SectionName, key: str) -> dict:
    """Kaplan–Meier median (and 95% interval) of ``record[name][key]``, each run that never got
    there censored at its step budget."""
    times, censored, budgets = [], [], []
    for r in records:
        value = section(r, name).get(key)
        budget = step_budget(r)
        times.append(value if value is not None else budget)
        censored.append(value is None)
        budgets.append(budget)
    low, high = kaplan_meier_median_ci(times, censored)
    return {"median": kaplan_meier_median(times, censored), "low": low, "high": high,
            "budget": max(budgets, default=0), "measured": any(name in r for r in records)}


def build(records: list[ResultRow], over: tuple[str, ...] = ("seed",), keep_keys: bool = False,
          baseline: str | None = None) -> pd.DataFrame:
    """One row per group of ``records`` (result dicts), aggregated over the ``over`` keys
    (``keep_keys`` keeps each row's ``group_key`` in a ``_key`` column). With ``baseline``
    ("key=value") each row gets its medians' ratios to its baseline row (see _baseline_ratios)."""
    if not records:
        return pd.DataFrame()
    flats = [flatten(scientific(r["config"])) for r in records]  # not how it ran (threads)
    keys = sorted({k for f in flats for k in f} - set(over))
    varying = [k for k in keys if len({json.dumps(f.get(k), default=str) for f in flats}) > 1]
    intervention_names = {n for r in records for n in _interventions(r["config"])}
    groups: dict[str, list[int]] = {}
    for i, record in enumerate(records):
        groups.setdefault(group_key(record, over), []).append(i)

    rows = []
    for key, indices in groups.items():
        members = [records[i] for i in indices]
        flat = flats[indices[0]]
        measured = [r for r in members if r["status"] in ("ok", "diverged")]
        # A run a forecast stopped has no known outcome: out of the success count, censored in the medians.
        known = [r for r in measured if not forecast_stopped(r)]
        emerged = sum(1 for r in known if emergence_step(r) is not None)
        low, high = wilson_interval(emerged, len(known))
        emergence = km_time(measured, "emergence", "step")
        plateau = km_time(measured, "plateau", "end_step")
        probed = [r for r in measured if section(r, "attention_probe").get("applicable")]
        pattern = km_time(probed, "attention_probe", "pattern_found_step")
        influenced = [r for r in measured if r.get("influence_probe")]
        influence = km_time(influenced, "influence_probe", "pattern_found_step")
        speeds = [r["timing"]["steps_per_second"] for r in members if section(r, "timing").get("steps_per_second")]
        losses = _values(measured, "metrics", "final_eval_loss")
        # Over every row, only where every row was trained: otherwise x0's rows were never fit.
        full_losses = _values([r for r in measured if r["config"]["trainer"].get("train_on") == "all"],
                              "metrics", "final_eval_full_sequence_loss")
        shortcut = _values(measured, "task_facts", "shortcut_loss")
        cells = _cells_learned(measured)
        other = [k for k in varying if not k.startswith(("task.", "mixer."))
                 and not (k.startswith("callbacks.") and k.split(".")[1] in intervention_names)]
        rows.append({
            "task": _label(flat, "task.", varying),
            "mixer": _label(flat, "mixer.", varying),
            "setting": " ".join(f"{k}={flat.get(k)}" for k in other) or "-",
            "intervention": _intervention_label(members[0]["config"]),
            "seeds": len(members),
            "diverged": sum(r["status"] == "diverged" for r in members),
            "failed": sum(r["status"] == "failed" for r in members),
            "forecast_stopped": len(measured) - len(known),
            "emerged": emerged,
            "success_rate": emerged / len(known) if known else None,
            "success_low": low,
            "success_high": high,
            "median_emergence_step": emergence["median"],
            "emergence_low": emergence["low"],
            "emergence_high": emergence["high"],
            "median_plateau_end": plateau["median"],
            "plateau_low": plateau["low"],
            "plateau_high": plateau["high"],
            "plateau_measured": plateau["measured"],
            "median_pattern_found": pattern["median"] if probed else None,
            "probed": bool(probed),
            "median_influence_found": influence["median"] if influenced else None,
            "influence_probed": bool(influenced),
            "budget": emergence["budget"],
            "final_eval_loss": sum(losses) / len(losses) if losses else None,
            "final_full_sequence_loss": sum(full_losses) / len(full_losses) if full_losses else None,
            "shortcut_loss": shortcut[0] if shortcut else None,
            "plateau_measures_shortcut": any(section(r, "plateau").get("measures_shortcut") for r in measured),
            **cells,
            "steps_per_second": sum(speeds) / len(speeds) if speeds else None,
            "_key": key,
            "_baseline": _without_interventions(members[0]["config"], {k: v for k, v in flat.items()
                                                                        if k not in over}),
        })
    _plateau_ratios(rows)
    if baseline:
        _baseline_ratios(rows, {group_key(records[i], over): {k: v for k, v in flats[i].items() if k not in over}
                                for i in range(len(records))}, baseline)
    table = pd.DataFrame(rows).drop(columns="_baseline")
    table.attrs["baseline"] = baseline
    # Each baseline ("none") sits right above its intervention rows.
    table["_order"] = table["intervention"] != "none"
    table = table.sort_values(["task", "mixer", "setting", "_order", "intervention"], ignore_index=True)
    return table.drop(columns="_order" if keep_keys else ["_order", "_key"])


def _values(records: list[ResultRow], name: SectionName, key: str) -> list:
    return [section(r, name)[key] for r in records if section(r, name).get(key) is not None]


def _cells_learned(records: list[ResultRow]) -> dict:
    """Mean over runs of the output cells that emerged, split by how they can be predicted: through
    the sparse pattern, or through the shortcut of earlier outputs (tasks that name shortcut cells)."""
    counts = []
    for r in records:
        shortcut = section(r, "task_facts").get("shortcut_cells")
        per_cell = section(r, "emergence").get("per_position")
        if shortcut is None or per_cell is None or len(per_cell) != len(shortcut):
            continue
        learned = [step is not None for step in per_cell]
        counts.append((sum(l and not s for l, s in zip(learned, shortcut)), shortcut.count(False),
                       sum(l and s for l, s in zip(learned, shortcut)), shortcut.count(True)))
    if not counts:
        return {"pattern_cells_learned": None, "pattern_cells": None,
                "shortcut_cells_learned": None, "shortcut_cells": None}
    mean = [sum(c[i] for c in counts) / len(counts) for i in range(4)]
    return {"pattern_cells_learned": mean[0], "pattern_cells": mean[1],
            "shortcut_cells_learned": mean[2], "shortcut_cells": mean[3]}


def group_key(record: ResultRow, over: tuple[str, ...] = ("seed",)) -> str:
    """Runs with equal keys form one leaderboard row: the flat config without the ``over`` keys."""
    flat = flatten(scientific(record["config"]))
    return json.dumps({k: v for k, v in sorted(flat.items()) if k not in over}, default=str)


def row_label(row: dict) -> str:
    parts = [row["task"], row["mixer"]] + [row[k] for k in ("setting", "intervention") if row[k] not in ("-", "none")]
    return " · ".join(parts)


def median_ratio(value, budget, base_value, base_budget) -> tuple[float | None, str | None]:
    """(ratio, bound) of two Kaplan–Meier medians, either possibly not reached (None).

    bound is "=" for two reached medians, "<" when only the baseline's was not reached (so the true
    ratio is below value / base budget), ">" when only this row's was not; (None, None) when neither.
    """
    if value is not None and base_value is not None:
        return value / max(base_value, 1), "="
    if value is not None:
        return value / max(base_budget, 1), "<"
    if base_value is not None:
        return budget / max(base_value, 1), ">"
    return None, None


def _plateau_ratios(rows: list[dict]) -> None:
    """Each intervention row's median plateau end over that of the same row without it."""
    baselines = {row["_baseline"]: row for row in rows if row["intervention"] == "none"}
    for row in rows:
        row["plateau_ratio"], row["plateau_ratio_bound"] = None, None
        base = baselines.get(row["_baseline"])
        if row["intervention"] != "none" and base is not None:
            row["plateau_ratio"], row["plateau_ratio_bound"] = median_ratio(
                row["median_plateau_end"], row["budget"], base["median_plateau_end"], base["budget"])


def _baseline_ratios(rows: list[dict], flats: dict[str, dict], spec: str) -> None:
    """Ratios of each row's medians to its baseline row's: the row whose config is the same except
    under ``key``, where it has ``value`` (``spec`` = "key=value", e.g. "mixer=transformer")."""
    if "=" not in spec:
        raise ValueError(f"--baseline takes key=value, e.g. mixer=transformer; got {spec!r}")
    key, value = (part.strip() for part in spec.split("=", 1))

    def outside(flat: dict) -> str:
        return json.dumps({k: v for k, v in sorted(flat.items()) if k != key and not k.startswith(key + ".")},
                          default=str)

    def is_baseline(flat: dict) -> bool:
        return str(flat.get(key, flat.get(f"{key}.name"))) == value

    if not any(key == k or k.startswith(key + ".") for flat in flats.values() for k in flat):
        raise ValueError(f"--baseline: no config key {key!r} in these results")
    baselines = {outside(flats[row["_key"]]): row for row in rows if is_baseline(flats[row["_key"]])}
    if not baselines:
        present = sorted({str(flat.get(key, flat.get(f"{key}.name"))) for flat in flats.values()})
        raise ValueError(f"--baseline {key}={value}: no row has {key} {value!r}; here {key} is one of "
                         f"{', '.join(present)}")
    for row in rows:
        base = baselines.get(outside(flats[row["_key"]]))
        for column, name in (("median_emergence_step", "emergence"), ("median_plateau_end", "plateau")):
            ratio, bound = (None, None) if base is None else median_ratio(
                row[column], row["budget"], base[column], base["budget"])
            row[f"{name}_vs_baseline"], row[f"{name}_vs_baseline_bound"] = ratio, bound


def _ratio_cell(ratio, bound) -> str:
    if ratio is None or pd.isna(ratio):
        return "-"
    return ("" if bound == "=" else bound) + f"{ratio:.2f}×"


def _median_cell(value, budget, low=None, high=None, interval=False) -> str:
    def step(v):
        return f">{budget}" if v is None or pd.isna(v) else f"{int(v)}"

    return f"{step(value)} ({step(low)}–{step(high)})" if interval else step(value)


def to_markdown(table: pd.DataFrame) -> str:
    """The human table (``human_table``) as Markdown."""
    return "(no results)\n" if table.empty else human_table(table).markdown() + "\n"


def human_table(table: pd.DataFrame) -> Table:
    """The table people read: success with its 95% interval, medians ('>N' = not reached within N
    steps), one row per leaderboard row."""
    baseline = table.attrs.get("baseline")
    header = ["task", "mixer", "setting", "intervention", "seeds", "success (95% CI)",
              "median emergence (95% CI)", "median plateau end (95% CI)", "plateau vs none",
              "median pattern found", "final loss", "full-sequence loss", "shortcut loss", "steps/s"]
    cells_known = bool(table["pattern_cells"].notna().any())
    if cells_known:
        header.insert(header.index("shortcut loss") + 1, "cells learned: pattern + shortcut")
    influence = bool(table["influence_probed"].any())
    if influence:
        header.insert(header.index("final loss"), "median influence found")
    if baseline:
        header += [f"emergence vs {baseline}", f"plateau vs {baseline}"]
    rows = []
    for row in table.to_dict("records"):
        rate = "-" if row["success_rate"] is None or pd.isna(row["success_rate"]) else (
            f"{row['emerged']}/{row['seeds'] - row['failed'] - row['forecast_stopped']} "
            f"({row['success_low']:.2f}–{row['success_high']:.2f})")
        notes = []
        if row["diverged"]:
            notes.append(f"{row['diverged']} diverged")
        if row["failed"]:
            notes.append(f"{row['failed']} failed")
        if row["forecast_stopped"]:
            notes.append(f"{row['forecast_stopped']} forecast-stopped")
        seeds = f"{row['seeds']}" + (f" ({', '.join(notes)})" if notes else "")
        loss = _number(row["final_eval_loss"])
        speed = "-" if pd.isna(row["steps_per_second"]) else f"{row['steps_per_second']:.1f}"
        cells = [row["task"], row["mixer"], row["setting"], row["intervention"], seeds, rate,
                 _median_cell(row["median_emergence_step"], row["budget"], row["emergence_low"],
                              row["emergence_high"], interval=True),
                 (_median_cell(row["median_plateau_end"], row["budget"], row["plateau_low"], row["plateau_high"],
                               interval=True) + (" (shortcut)" if row["plateau_measures_shortcut"] else ""))
                 if row["plateau_measured"] else "n/a", _ratio_cell(row["plateau_ratio"], row["plateau_ratio_bound"]),
                 _median_cell(row["median_pattern_found"], row["budget"]) if row["probed"] else "n/a"]
        if influence:
            cells.append(_median_cell(row["median_influence_found"], row["budget"])
                         if row["influence_probed"] else "-")
        cells += [loss, _number(row["final_full_sequence_loss"]), _number(row["shortcut_loss"])]
        if cells_known:
            cells.append("-" if pd.isna(row["pattern_cells"]) else
                         f"{row['pattern_cells_learned']:.3g}/{row['pattern_cells']:.3g} + "
                         f"{row['shortcut_cells_learned']:.3g}/{row['shortcut_cells']:.3g}")
        cells.append(speed)
        if baseline:
            cells += [_ratio_cell(row["emergence_vs_baseline"], row["emergence_vs_baseline_bound"]),
                      _ratio_cell(row["plateau_vs_baseline"], row["plateau_vs_baseline_bound"])]
        rows.append([str(c) for c in cells])
    return Table(header, rows)


def _number(value) -> str:
    return "-" if value is None or pd.isna(value) else f"{value:.3g}"


def write(root: str | Path, over: tuple[str, ...] = ("seed",), baseline: str | None = None,
          strict: bool = False) -> tuple[pd.DataFrame, str]:
    """Build the leaderboard of every result under ``root`` but its tuning runs (``leaderboard
    DIR/tuning`` shows those); write leaderboard.md/.csv/.json there. ``strict``: an unreadable
    result file is an error, not a warning (see results.load_records)."""
    root = Path(root)
    table = build(load_records(root, strict=strict, exclude=(TUNING_DIR,)), over, baseline=baseline)
    markdown = to_markdown(table)
    write_text(root / f"{LEADERBOARD_STEM}.md", markdown)
    write_text(root / f"{LEADERBOARD_STEM}.csv", table.to_csv(index=False))
    write_json(root / f"{LEADERBOARD_STEM}.json", json.loads(table.to_json(orient="records")))
    return table, markdown
