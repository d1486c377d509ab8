"""Writing a shipped reference, a maintainer's command (``reporting/reference.py`` reads and applies
one): the compact rows, families and tuning tables of a finished tuned ranking sweep, with where they
came from. Not a subcommand of `emergence-bench`: run it as a module.

    python -m emergence_bench.commands.reference_build DIR --preset standard-cpu
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

from emergence_bench.config import ConfigError
from emergence_bench.reporting.reference import BUILTIN_PRESET, FORMAT, REFERENCE_DIR, compact, families
from emergence_bench.results import packed
from emergence_bench.results.row import section
from emergence_bench.results.store import SCHEMA_VERSION, TUNING_DIR, code_version, load_records, read_tables


def build(root: str | Path, preset: str) -> dict:
    """A reference from the finished ranking under ``root`` (its tuning tables too, if there)."""
    from emergence_bench.execution.sweep_spec import load_sweep

    sweep = load_sweep(preset)
    if sweep.tuning is None or sweep.ladder is None:
        raise ConfigError(f"preset {preset!r} has no ladder version and tuning: a reference is of a tuned ladder")
    records = load_records(root, strict=True, exclude=(TUNING_DIR,))
    unfinished = [r["run_id"] for r in records if r["status"] == "failed"]
    if unfinished or not records:
        raise ConfigError(f"{root}: {len(unfinished)} failed run(s) (or none at all): finish the sweep first")
    first = records[0]
    commits = sorted({code_version(r) for r in records})  # "abc1234 (dirty)" where the tree had changes
    tuned_keys = sorted(sweep.tuning.grid)
    return {"format": FORMAT, "schema_version": SCHEMA_VERSION, "preset": preset, "ladder": sweep.ladder,
            "tuned_keys": tuned_keys, "commit": ", ".join(commits),
            "versions": first["versions"], "machine": section(first, "provenance").get("machine", {}),
            "created": time.strftime("%Y-%m-%d", time.gmtime()), "python": platform.python_version(),
            "families": families(records, tuned_keys), "tuning": read_tables(Path(root) / TUNING_DIR),
            "rows": [compact(r) for r in sorted(records, key=lambda r: r["run_id"])]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="write a reference file from a finished tuned ranking sweep")
    parser.add_argument("dir")
    parser.add_argument("--preset", default=BUILTIN_PRESET)
    parser.add_argument("--out", help=f"default: {REFERENCE_DIR}/<preset>.json.gz")
    args = parser.parse_args(argv)
    reference = build(args.dir, args.preset)
    out = Path(args.out or REFERENCE_DIR / f"{args.preset}.json.gz")
    packed.write(reference, out)
    print(f"wrote {out}: {len(reference['rows'])} rows, {len(reference['tuning'])} tuning tables, "
          f"ladder {reference['ladder']}, commit {reference['commit']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
