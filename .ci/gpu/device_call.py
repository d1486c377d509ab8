"""Print the exact `device` tool call of a GPU lease (docs/gpu.md), checked against the tool's limits.

The call runs .ci/gpu-check on the device's bare image and carries the wheels it lacks (.whl/,
`make gpu-wheels`). Checked here, before any device time is spent: the command is at most 2,000
characters; at most 8 carried paths, each present; .whl/ holds exactly the wheels of
.ci/gpu/wheels.txt, one version each; what travels (tracked and untracked files that git does not
ignore, shared/ if the checkout has one, and the carried paths) is at most 64 MiB; timeout_s is
within the tool's 600 s and leaves the script's own budget room to write its summary; the script
declares at most 8 output files (the tool brings back 8).
Exits 2 with an ``error:`` line when one of these fails.

usage: python .ci/gpu/device_call.py [REPO_ROOT]
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

BUDGET_S = 450  # .ci/gpu-check stops each phase so that it is done by then
TIMEOUT_S = 480  # the call's limit: the budget plus time to start the command and write the summary
CARRY = [".whl"]
COMMAND = f"GPU_CHECK_BUDGET_S={BUDGET_S} bash .ci/gpu-check"
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
    return sum(f.stat().st_size for f in files if f.is_file()) + (size(root / "shared") if (root / "shared").is_dir() else 0)


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


def main(argv: list[str]) -> int:
    root = Path(argv[0] if argv else ".").resolve()
    problems = []
    missing = [p for p in CARRY if not (root / p).exists()]
    problems += [f"carried path {p} is missing: run `make gpu-wheels`" for p in missing]
    if not missing:
        problems += wheel_problems(root)
    travel = tree_bytes(root) + sum(size(root / p) for p in CARRY if p not in missing)
    if len(COMMAND) > LIMITS["command_chars"]:
        problems.append(f"the command has {len(COMMAND)} characters, over {LIMITS['command_chars']}")
    if len(CARRY) > LIMITS["carry_paths"]:
        problems.append(f"{len(CARRY)} carried paths, over {LIMITS['carry_paths']}")
    if travel > LIMITS["travel_bytes"]:
        problems.append(f"{travel / 2**20:.1f} MiB would travel, over 64 MiB")
    outputs = declared_outputs(root)
    if not 0 < len(outputs) <= LIMITS["outputs"]:
        problems.append(f".ci/gpu-check declares {len(outputs)} output files (OUTPUTS=...), not 1 to {LIMITS['outputs']}")
    if not BUDGET_S + 20 <= TIMEOUT_S <= LIMITS["timeout_s"]:
        problems.append(f"timeout_s {TIMEOUT_S} must be within {LIMITS['timeout_s']} s and leave the {BUDGET_S} s budget room")
    if problems:
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        return 2
    print("The device tool's `run` call for a GPU lease (docs/gpu.md):")
    print(json.dumps({"command": COMMAND, "carry": CARRY, "timeout_s": TIMEOUT_S}, indent=2))
    print(f"checked: command {len(COMMAND)}/{LIMITS['command_chars']} characters; {len(CARRY)}/8 carried paths; "
          f"{travel / 2**20:.1f}/64 MiB travels (carried: {sum(size(root / p) for p in CARRY) / 2**20:.1f} MiB); "
          f"timeout_s {TIMEOUT_S}/{LIMITS['timeout_s']} (the script's budget: {BUDGET_S} s); "
          f"{len(outputs)}/{LIMITS['outputs']} output files ({', '.join(outputs)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
