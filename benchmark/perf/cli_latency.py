"""How fast the command line answers a mistake, and what it imports to do so: a benchmark to run by
hand, never a timed test (docs/speed.md, "How fast the command line answers")::

    .venv/bin/python -m emergence_bench.perf.cli_latency [--repeats 5]

Each path is `emergence-bench ARGS` in a fresh interpreter, timed wall to wall (Python's own start
included, as a user waits for it). The paths are interleaved, one try of each per repeat, so a load
that drifts reaches them all alike; the table gives each one's median and quartiles, and the heavy
modules it imported (from one more run of it, in-process). Python's start and the imports of torch
and Lightning alone are timed beside them, for scale.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from emergence_bench.perf.timing import summary

HEAVY = ("pandas", "torch", "lightning")

# The answers issue 55 timed (a task-key mistake, `list`), and their neighbours.
PATHS = {
    "--help": ["--help"],
    "list": ["list"],
    "a misspelt task key": ["run", "--task.widht", "3"],
    "a misspelt task name": ["run", "--task.name", "linear_mpa"],
    "a misspelt mixer key": ["run", "--mixer.widht", "3"],
    "a misspelt callback key": ["run", "--callbacks.plateau.fraq", "0.2"],
    "a misspelt fixed-section key": ["run", "--trainer.max_stepz", "3"],
    "check-mixer of an unknown mixer": ["check-mixer", "transformr"],
}
# For scale: what an answer would cost if it imported these.
REFERENCES = {
    "python, nothing imported": ["-c", "pass"],
    "import torch": ["-c", "import torch"],
    "import lightning": ["-c", "import lightning"],
}

PROBE = """
import contextlib, io, json, sys
from emergence_bench.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        status = main(json.loads(sys.argv[1]))
    except SystemExit as exit:
        status = exit.code
print(json.dumps({"status": status, "imports": [m for m in %r if m in sys.modules]}))
""" % (HEAVY,)


def command(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "emergence_bench", *args]


def wall(argv: list[str]) -> float:
    """Seconds from starting ``argv`` to its end (its output discarded)."""
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env={**os.environ, "OMP_NUM_THREADS": "1"})
    return time.perf_counter() - start


def imports(args: list[str]) -> dict:
    """The exit status of ``emergence-bench *args`` and the heavy modules it imported."""
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(args)], capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="tries of each path (default 5)")
    args = parser.parse_args()
    argvs = ({name: command(a) for name, a in PATHS.items()}
             | {name: [sys.executable, *a] for name, a in REFERENCES.items()})
    times: dict[str, list[float]] = {name: [] for name in argvs}
    for _ in range(args.repeats):
        for name, argv in argvs.items():
            times[name].append(wall(argv))
    load = os.getloadavg()[0]
    print(f"{args.repeats} interleaved tries of each; load average {load:.1f} at the end on {os.cpu_count()} cores\n")
    print("| answer | median s | quartiles | exit | imports |\n|---|---|---|---|---|")
    for name, values in times.items():
        s = summary(values)
        said = imports(PATHS[name]) if name in PATHS else {"status": "-", "imports": ["-"]}
        print(f"| {name} | {s['median']:.2f} | {s['q1']:.2f}–{s['q3']:.2f} | {said['status']} | "
              f"{', '.join(said['imports']) or 'none'} |")


if __name__ == "__main__":
    main()
