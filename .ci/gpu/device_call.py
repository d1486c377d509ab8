"""Print the exact `device` tool calls of a GPU lease (docs/gpu.md), checked against the tool's limits.

The first call runs all of .ci/gpu-check on the device's bare image and carries the wheels it lacks
(.whl/, `make gpu-wheels`); two shorter reruns follow it, for when a phase failed or ran out of
time. Checked here, before any device time is spent: each command is at most 2,000 characters; at
most 8 carried paths, each present; .whl/ holds exactly the wheels of
.ci/gpu/wheels.txt, one version each; what travels (tracked and untracked files that git does not
ignore, shared/ if the checkout has one, and the carried paths) is at most 64 MiB; timeout_s is
within the tool's 600 s, MARGIN_S past the script's own budget so that its summary is written; the
script declares at most 8 output files (the tool brings back 8).
Exits 2 with an ``error:`` line when one of these fails.

usage: python .ci/gpu/device_call.py [REPO_ROOT]
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

CARRY = [".whl"]
MARGIN_S = 30  # a call's timeout_s beyond the script's budget (GPU_CHECK_BUDGET_S): start and summary
CALLS = {  # what each call is for -> the environment .ci/gpu-check runs with
    "the check (the first call: 8 minutes at most)": {"GPU_CHECK_BUDGET_S": "450"},
    "rerun: the gpu tests only": {"GPU_CHECK_PHASES": "tests", "GPU_CHECK_BUDGET_S": "270"},
    "rerun: speed only, shorter": {"GPU_CHECK_PHASES": "speed", "GPU_CHECK_BUDGET_S": "210",
                                   "GPU_CHECK_SPEED_ARGS": "--lengths 256 --steps 10 --repeats 5 --seeds 16,64,256"},
}
LIMITS = {"command_chars": 2000, "carry_paths": 8, "travel_bytes": 64 * 2**20, "timeout_s": 600, "outputs": 8}


def size(path: Path) -> int:
    """Bytes of a file, or of every file under a folder."""
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def tree_bytes(root: Path) -> int:
    """Bytes of what the tool sends besides the carried paths: tracked and untracked-not-ignored
    files, and shared/ where the checkout has one."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=root, capture_output=True, text=True, check=True).stdout
    files = [root / name for name in listed.split("\0") if name]
    shared = size(root / "shared") if (root / "shared").is_dir() else 0
    return sum(f.stat().st_size for f in files if f.is_file()) + shared


def pinned_wheels(root: Path) -> dict[str, str]:
    """wheels.txt's pins: normalised name -> version."""
    pins = {}
    for line in (root / ".ci/gpu/wheels.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[re.sub(r"[-_.]+", "_", name).lower()] = version
    return pins


def wheel_problems(root: Path) -> list[str]:
    """How .whl/ differs from wheels.txt: a pin with no wheel, a wheel with no pin, two versions."""
    pins = pinned_wheels(root)
    found: dict[str, list[str]] = {}
    for wheel in sorted((root / ".whl").glob("*.whl")):
        name, version = wheel.name.split("-")[:2]
        found.setdefault(name.lower(), []).append(version)
    problems = [f"{name}=={v} is pinned in .ci/gpu/wheels.txt but not in .whl/" for name, v in pins.items()
                if v not in found.get(name, [])]
    problems += [f".whl/ holds {name} {', '.join(vs)}, not (only) the pinned version" for name, vs in found.items()
                 if vs != [pins.get(name)]]
    return problems


def declared_outputs(root: Path) -> list[str]:
    """The files .ci/gpu-check writes to $OUT (its OUTPUTS=(...) line)."""
    found = re.search(r"^OUTPUTS=\((.*)\)$", (root / ".ci/gpu-check").read_text(), re.MULTILINE)
    return found.group(1).split() if found else []


def device_call(env: dict[str, str]) -> dict:
    """The tool's `run` arguments for .ci/gpu-check under ``env``."""
    command = " ".join(f"{key}={shlex.quote(value)}" for key, value in env.items()) + " bash .ci/gpu-check"
    return {"command": command, "carry": CARRY, "timeout_s": int(env["GPU_CHECK_BUDGET_S"]) + MARGIN_S}


def main(argv: list[str]) -> int:
    root = Path(argv[0] if argv else ".").resolve()
    calls = {name: device_call(env) for name, env in CALLS.items()}
    problems = []
    missing = [p for p in CARRY if not (root / p).exists()]
    problems += [f"carried path {p} is missing: run `make gpu-wheels`" for p in missing]
    if not missing:
        problems += wheel_problems(root)
    travel = tree_bytes(root) + sum(size(root / p) for p in CARRY if p not in missing)
    for name, call in calls.items():
        if len(call["command"]) > LIMITS["command_chars"]:
            problems.append(f"{name}: the command has {len(call['command'])} characters, "
                            f"over {LIMITS['command_chars']}")
        if call["timeout_s"] > LIMITS["timeout_s"]:
            problems.append(f"{name}: timeout_s {call['timeout_s']} is over the tool's {LIMITS['timeout_s']} s")
    if len(CARRY) > LIMITS["carry_paths"]:
        problems.append(f"{len(CARRY)} carried paths, over {LIMITS['carry_paths']}")
    if travel > LIMITS["travel_bytes"]:
        problems.append(f"{travel / 2**20:.1f} MiB would travel, over 64 MiB")
    outputs = declared_outputs(root)
    if not 0 < len(outputs) <= LIMITS["outputs"]:
        problems.append(f".ci/gpu-check declares {len(outputs)} output files (OUTPUTS=...), "
                        f"not 1 to {LIMITS['outputs']}")
    if problems:
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        return 2
    print("The device tool's `run` calls of a GPU lease (docs/gpu.md): the check; then at most one rerun, one\n"
          "whose timeout_s + 120 s (a fresh machine's start) fits status's budget_left_s; give_back after the last.")
    for name, call in calls.items():
        print(f"\n{name}:\n{json.dumps(call)}")
    longest = max(len(call["command"]) for call in calls.values())
    print(f"\nchecked: commands up to {longest}/{LIMITS['command_chars']} characters; {len(CARRY)}/8 carried paths; "
          f"{travel / 2**20:.1f}/64 MiB travels (carried: {sum(size(root / p) for p in CARRY) / 2**20:.1f} MiB); "
          f"timeout_s up to {max(c['timeout_s'] for c in calls.values())}/{LIMITS['timeout_s']}; "
          f"{len(outputs)}/{LIMITS['outputs']} output files ({', '.join(outputs)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
