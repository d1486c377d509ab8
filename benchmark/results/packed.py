"""A packed file: rows shipped as one gzipped JSON (the ranking's reference, the claims' reference),
written byte for byte the same from the same data, and read back with a one-line refusal of a file
that is not one. Its curves are rounded (``rounded``) to keep it small.
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path
from typing import Any

from emergence_bench.config import ConfigError
from emergence_bench.results.atomic import write_atomic

CURVE_DIGITS = 4  # significant digits of a kept loss: far below eval noise (about 1% of chance − floor)


def rounded(value: Any) -> Any:
    """``value`` with every float to ``CURVE_DIGITS`` significant digits (steps, ints, stay exact)."""
    if isinstance(value, float):
        return float(f"{value:.{CURVE_DIGITS}g}")
    if isinstance(value, list):
        return [rounded(v) for v in value]
    return value


def write(data: Any, path: str | Path) -> int:
    """Writes ``data`` as gzipped canonical JSON (no timestamp: the same data, the same bytes),
    atomically; returns the file's size in bytes."""
    packed = gzip.compress(json.dumps(data, sort_keys=True, separators=(",", ":"), default=str).encode(), mtime=0)
    write_atomic(path, lambda file: file.write(packed))
    return len(packed)


def read(path: Path, name: str, what: str) -> dict[str, Any]:
    """The JSON object packed in ``path`` (called ``name`` in the error). A file that is not one (not
    gzip, cut short, not UTF-8 JSON, JSON of another shape) is a ConfigError naming it and ending
    with ``what`` (what the file should be, and how to make one)."""
    try:
        with gzip.open(path, "rt", encoding="utf-8") as file:
            data = json.load(file)
    # BadGzipFile and a read error are OSErrors, a cut-short file an EOFError (or zlib's error), a
    # JSON error a ValueError, like a text that is not UTF-8.
    except (OSError, EOFError, zlib.error, ValueError) as error:
        why = " ".join(str(error).split()) or type(error).__name__
        raise ConfigError(f"reference {name} is not a reference file ({why}); {what}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"reference {name} holds a JSON {type(data).__name__}, not a reference file; {what}")
    return data
