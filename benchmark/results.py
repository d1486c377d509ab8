"""One versioned result record per run, written atomically as JSON; ``load`` gives a DataFrame."""

from __future__ import annotations

import json
import os
import platform
import tempfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pandas as pd

SCHEMA_VERSION = 2  # 2: task_facts, full-sequence losses, init and bias patterns in the config
RESULT_FILE = "result.json"
FINISHED = ("ok", "diverged")  # a sweep does not rerun these; `failed` runs are retried


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically: readers see the old file or the new one, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, data: dict) -> None:
    """Write ``data`` as JSON to ``path`` atomically (strict JSON: no NaN)."""
    write_text(path, json.dumps(data, indent=2, allow_nan=False))


def versions() -> dict:
    found = {"python": platform.python_version()}
    for package in ("emergence-bench", "torch", "lightning", "torchmetrics"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = None
    return found


def read_result(run_dir: Path) -> dict | None:
    path = Path(run_dir) / RESULT_FILE
    if not path.is_file():
        return None
    return json.loads(path.read_text())


def result_paths(root: str | Path) -> list[Path]:
    return sorted(Path(root).rglob(RESULT_FILE))


def load_records(root: str | Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in result_paths(root)]


def load(root: str | Path) -> pd.DataFrame:
    """Every result.json under ``root`` as one flat DataFrame (nested keys joined by dots)."""
    records = load_records(root)
    if not records:
        return pd.DataFrame()
    return pd.json_normalize(records)
