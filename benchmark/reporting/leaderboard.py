"""The leaderboard: result rows grouped over seeds into one row per configuration.

A group is every run whose resolved config is equal except for the keys in ``over`` (default: the
seed), i.e. one row per (task config, mixer config, intervention, other settings). A row is its
frame (the group's labels and run counts) and then the columns of every registered measurement
(``emergence_bench.measurements``), aggregated as each declares: emergence and plateau times are
Kaplan–Meier medians with 95% intervals, runs that never got there censored at their budget;
success rates have 95% Wilson intervals.
"""

from __future__ import annotations

import difflib
import json
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd

from emergence_bench import registry
from emergence_bench.config import hashed_config
from emergence_bench.measurements import measurements
from emergence_bench.reporting.table import Table
from emergence_bench.results.atomic import write_files
from emergence_bench.results.columns import (
    BUDGET,
    Median,
    km_time,  # noqa: F401  (the figures read it from here)
    ratio_cell,
)
from emergence_bench.results.row import ResultRow, forecast_stopped
from emergence_bench.results.store import LEADERBOARD_STEM, TUNING_DIR, json_text, load_records


def flatten(data: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _label(flat: dict, prefix: str, varying: dict[object, list[str]]) -> str:
    """``name key=value ...``: the task's (``prefix`` "task.") or mixer's name and the keys that differ
    between the rows of that name (``_varying_within``)."""
    name = flat[prefix + "name"]
    return " ".join([str(name)] + [f"{k[len(prefix):]}={flat[k]}" for k in varying.get(name, []) if k in flat])


def _varying_within(flats: list[dict], keys: list[str], prefix: str) -> dict[object, list[str]]:
    """Per task (``prefix`` "task.") or mixer name, those of ``keys`` under ``prefix`` that differ
    between its rows: a label names only these, never a key just because another task lacks it."""
    by_name: dict[object, list[dict]] = {}
    for flat in flats:
        by_name.setdefault(flat.get(prefix + "name"), []).append(flat)
    return {name: [k for k in keys if k.startswith(prefix) and k != prefix + "name"
                   and len({json.dumps(f.get(k), default=str) for f in members}) > 1]
            for name, members in by_name.items()}


def _interventions(config: dict) -> list[str]:
    """The configured callbacks that change training (``is_intervention``; a built-in's read from its
    catalog, so no callback is imported), sorted."""
    names = []
    for name in sorted(config.get("callbacks", {})):
        try:
            changes_training = registry.callbacks.fact(name, "is_intervention")
        except KeyError:  # a plugin that is not installed here
            changes_training = False
        if changes_training:
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


def build(records: list[ResultRow], over: tuple[str, ...] = ("seed",), keep_keys: bool = False,
          baseline: str | None = None) -> pd.DataFrame:
    """One row per group of ``records`` (result dicts), aggregated over the ``over`` keys
    (``keep_keys`` keeps each row's ``group_key`` in a ``_key`` column): the frame (the group's
    labels and run counts), then every registered measurement's columns. With ``baseline``
    ("key=value") each row gets its medians' ratios to its baseline row (see _baseline_ratios)."""
    if not records:
        return pd.DataFrame()
    flats = [flatten(hashed_config(r["config"])) for r in records]  # not how it ran (threads)
    keys = sorted({k for f in flats for k in f} - set(over))
    varying = [k for k in keys if len({json.dumps(f.get(k), default=str) for f in flats}) > 1]
    intervention_names = {n for r in records for n in _interventions(r["config"])}
    other = [k for k in varying if not k.startswith(("task.", "mixer."))
             and not (k.startswith("callbacks.") and k.split(".")[1] in intervention_names)]
    task_keys, mixer_keys = _varying_within(flats, keys, "task."), _varying_within(flats, keys, "mixer.")
    groups: dict[str, list[int]] = {}
    for i, record in enumerate(records):
        groups.setdefault(group_key(record, over), []).append(i)

    rows = []
    for key, indices in groups.items():
        members = [records[i] for i in indices]
        flat = flats[indices[0]]
        measured = [r for r in members if r["status"] in ("ok", "diverged")]
        row: dict[str, Any] = {
            "task": _label(flat, "task.", task_keys),
            "mixer": _label(flat, "mixer.", mixer_keys),
            "setting": " ".join(f"{k}={flat.get(k)}" for k in other) or "-",
            "intervention": _intervention_label(members[0]["config"]),
            "seeds": len(members),
            "diverged": sum(r["status"] == "diverged" for r in members),
            "failed": sum(r["status"] == "failed" for r in members),
            # A run a forecast stopped has no known outcome: out of the success count, censored in the medians.
            "forecast_stopped": sum(map(forecast_stopped, measured)),
        }
        for measurement in measurements():
            row.update(measurement.aggregate(members))
        row["_key"] = key
        row["_baseline"] = _without_interventions(members[0]["config"],
                                                  {k: v for k, v in flat.items() if k not in over})
        rows.append(row)
    _ratios_against_none(rows)
    if baseline:
        _baseline_ratios(rows, {group_key(records[i], over): {k: v for k, v in flats[i].items() if k not in over}
                                for i in range(len(records))}, baseline)
    table = pd.DataFrame(rows).drop(columns="_baseline")
    table.attrs["baseline"] = baseline
    # Each baseline ("none") sits right above its intervention rows.
    table["_order"] = table["intervention"] != "none"
    table = table.sort_values(["task", "mixer", "setting", "_order", "intervention"], ignore_index=True)
    return table.drop(columns="_order" if keep_keys else ["_order", "_key"])


def _compared_medians() -> list[tuple[str, Median]]:
    """(label, median) of each declared median that a row compares with another row's (``Median.ratios``)."""
    return [(c.ratios, c) for m in measurements() for c in m.columns if isinstance(c, Median) and c.ratios]


def group_key(record: ResultRow, over: tuple[str, ...] = ("seed",)) -> str:
    """Runs with equal keys form one leaderboard row: the flat config without the ``over`` keys."""
    flat = flatten(hashed_config(record["config"]))
    return json.dumps({k: v for k, v in sorted(flat.items()) if k not in over}, default=str)


def row_label(row: dict) -> str:
    parts = [row["task"], row["mixer"]] + [row[k] for k in ("setting", "intervention") if row[k] not in ("-", "none")]
    return " · ".join(parts)


def median_ratio(value: float | None, budget: float, base_value: float | None,
                 base_budget: float) -> tuple[float | None, str | None]:
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


def _ratios_against_none(rows: list[dict]) -> None:
    """Each intervention row's declared medians (``Median.against_none``) over those of the same row
    without interventions: ``{label}_ratio`` and its bound."""
    baselines = {row["_baseline"]: row for row in rows if row["intervention"] == "none"}
    for label, median in _compared_medians():
        if not median.against_none:
            continue
        ratio, bound = f"{label}_ratio", f"{label}_ratio_bound"
        for row in rows:
            row[ratio], row[bound] = None, None
            base = baselines.get(row["_baseline"])
            if row["intervention"] != "none" and base is not None:
                row[ratio], row[bound] = median_ratio(row[median.name], row[BUDGET], base[median.name], base[BUDGET])


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
        for label, median in _compared_medians():
            ratio, bound = (None, None) if base is None else median_ratio(
                row[median.name], row[BUDGET], base[median.name], base[BUDGET])
            row[f"{label}_vs_baseline"], row[f"{label}_vs_baseline_bound"] = ratio, bound


def to_markdown(table: pd.DataFrame) -> str:
    """The human table (``human_table``) as Markdown."""
    return "(no results)\n" if table.empty else human_table(table).markdown() + "\n"


def human_table(table: pd.DataFrame) -> Table:
    """The table people read: the frame, then each measurement's declared human columns (success with
    its 95% interval, medians: '>N' = not reached within N steps, ...), then the ratios to
    ``--baseline``; one row per leaderboard row."""
    baseline = table.attrs.get("baseline")
    rows = table.to_dict("records")
    shown = [column for m in measurements() for declared in m.columns for column in declared.shown(rows)]
    if baseline:
        shown += [(f"{label} vs {baseline}", partial(_baseline_cell, label)) for label, _ in _compared_medians()]
    header = ["task", "mixer", "setting", "intervention", "seeds", *(title for title, _ in shown)]
    cells = [[row["task"], row["mixer"], row["setting"], row["intervention"], _seeds_cell(row),
              *(cell(row) for _, cell in shown)] for row in rows]
    return Table(header, [[str(c) for c in row] for row in cells])


def _seeds_cell(row: dict[str, Any]) -> str:
    """``5 (1 diverged, 1 failed)``: the runs, and those that did not end normally."""
    notes = [f"{row[column]} {label}" for column, label in
             (("diverged", "diverged"), ("failed", "failed"), ("forecast_stopped", "forecast-stopped")) if row[column]]
    return f"{row['seeds']}" + (f" ({', '.join(notes)})" if notes else "")


def _baseline_cell(label: str, row: dict[str, Any]) -> str:
    return ratio_cell(row[f"{label}_vs_baseline"], row[f"{label}_vs_baseline_bound"])


def check_over(records: list[ResultRow], over: tuple[str, ...]) -> None:
    """Every ``--over`` key must be a config key of some row (``seed``, ``task.task_seed``); a typo
    would otherwise aggregate over nothing and overwrite the folder's leaderboard with a per-seed one."""
    known = {k for r in records for k in flatten(hashed_config(r["config"]))} | {"seed"}
    unknown = [k for k in over if k not in known]
    if unknown:
        close = difflib.get_close_matches(unknown[0], sorted(known), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"--over {', '.join(unknown)}: no such config key in these results{hint}")


def write(root: str | Path, over: tuple[str, ...] = ("seed",), baseline: str | None = None,
          strict: bool = False) -> tuple[pd.DataFrame, str]:
    """Build the leaderboard of every result under ``root`` but its tuning runs (``leaderboard
    DIR/tuning`` shows those); write leaderboard.md/.csv/.json there. ``strict``: an unreadable
    result file is an error, not a warning (see results.load_records)."""
    root = Path(root)
    records = load_records(root, strict=strict, exclude=(TUNING_DIR,))
    if not records:  # nothing to aggregate: say so, and leave DIR's files as they were
        raise ValueError(f"no readable results under {root} (an unreadable one is named above): nothing to aggregate")
    check_over(records, over)
    table = build(records, over, baseline=baseline)
    markdown = to_markdown(table)
    write_files({root / f"{LEADERBOARD_STEM}.md": markdown, root / f"{LEADERBOARD_STEM}.csv": table.to_csv(index=False),
                 root / f"{LEADERBOARD_STEM}.json": json_text(json.loads(table.to_json(orient="records")))})
    return table, markdown
