"""The gpu tests' outcome from pytest's JUnit XML: counts, and each test that did not pass.

Exits 1 when a test failed or errored, when none ran, or when one was skipped for a reason that
does not match ``--allow-skip REGEX`` (on the device only mamba's kernel tests may skip: mamba-ssm is
not carried; in the dry run on a CPU every gpu test skips, so it allows any reason).

usage: python outcome.py JUNIT_XML [--allow-skip REGEX]
"""

from __future__ import annotations

import argparse
import re
import sys
import xml.etree.ElementTree as ET


def outcomes(path: str) -> list[tuple[str, str, str]]:
    """(test id, outcome, message) per test case; outcome is passed, failed, error or skipped."""
    rows = []
    for case in ET.parse(path).getroot().iter("testcase"):
        test = f"{case.get('classname', '')}::{case.get('name', '')}"
        for outcome in ("failure", "error", "skipped"):
            found = case.find(outcome)
            if found is not None:
                message = (found.get("message") or found.text or "").strip().splitlines()
                rows.append((test, "failed" if outcome == "failure" else outcome, message[0] if message else ""))
                break
        else:
            rows.append((test, "passed", ""))
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit")
    parser.add_argument("--allow-skip", default=None, help="regex a skip's reason must match")
    args = parser.parse_args(argv)
    try:
        rows = outcomes(args.junit)
    except (OSError, ET.ParseError) as error:
        print(f"error: no readable test report {args.junit}: {error}", file=sys.stderr)
        return 2
    counts = {k: sum(r[1] == k for r in rows) for k in ("passed", "failed", "error", "skipped")}
    print("gpu tests: " + ", ".join(f"{n} {k}" for k, n in counts.items()))
    unexpected = []
    for test, outcome, message in rows:
        if outcome != "passed":
            print(f"  {outcome.upper()} {test}: {message}")
        if outcome == "skipped" and not (args.allow_skip and re.search(args.allow_skip, message)):
            unexpected.append(test)
    if not rows:
        print("error: no gpu test ran", file=sys.stderr)
    for test in unexpected:
        print(f"error: skipped, and not allowed to be: {test}", file=sys.stderr)
    return 1 if counts["failed"] or counts["error"] or not rows or unexpected else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
