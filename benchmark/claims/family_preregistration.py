"""The language family's Part-1 claims, declared before any family seed trained: recorded and hashed,
so that a change made after the family trains shows.

``DECLARED`` is the three claims (``family_seeds``, ``family_heads``, ``family_patching``), the ones
``family_judge`` judges. ``record()`` is what they declare: the stage, alpha and the Holm family, and
each claim's id, the paper's words, its statistic, effect, direction and settings (the shared design
of ``family_design`` included). ``preregistration.digest`` hashes it. The file
``benchmark/presets/lm-family.design.json`` holds both, committed before the family trained;
``check()`` says whether the declaration still matches it, and what changed where it does not.

``python -m emergence_bench.claims.family_preregistration`` writes the file: a declaration, made once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from emergence_bench.claims.family_design import STAGE
from emergence_bench.claims.family_heads import HEADS_JUMP
from emergence_bench.claims.family_patching import FEW_HEADS
from emergence_bench.claims.family_seeds import SEEDS_DIFFER
from emergence_bench.claims.judge import ALPHA
from emergence_bench.claims.preregistration import changes, digest
from emergence_bench.execution.sweep_spec import PRESETS_DIR

DECLARED = (SEEDS_DIFFER, HEADS_JUMP, FEW_HEADS)
NAME = "lm-family"


def path() -> Path:
    """Where the declaration is committed: beside the presets, as the replication's design is."""
    return PRESETS_DIR / f"{NAME}.design.json"


def record() -> dict[str, Any]:
    """The declaration (see the module docstring), as plain JSON values."""
    claims = [{"id": c.id, "number": c.number, "paper": c.paper, "paper_number": c.paper_number,
               "statistic": c.statistic, "effect": c.effect, "predicts": c.predicts, "kind": c.kind,
               "settings": dict(c.settings)} for c in DECLARED]
    # json round trip: tuples as lists, so a record reads back equal to itself
    return json.loads(json.dumps({"stage": STAGE, "alpha": ALPHA, "family": "Holm over the stage's three rows",
                                  "claims": claims}))


def write() -> Path:
    """Writes the declaration and its sha256; returns the file's path."""
    design = record()
    target = path()
    target.write_text(json.dumps({"sha256": digest(design), "design": design}, indent=1) + "\n", encoding="utf-8")
    return target


def check() -> str | None:
    """None where the declaration still matches the committed file; else what changed, and why it
    must not (the claims were declared before the family trained)."""
    target = path()
    if not target.is_file():
        return f"{target} is missing: the family's claims were never declared (`python -m {__name__}`)"
    stored = json.loads(target.read_text(encoding="utf-8"))
    current = record()
    if digest(stored["design"]) == stored["sha256"] == digest(current):
        return None
    what = changes(stored["design"], current) or ["the file's sha256 does not match its own design"]
    return ("the language family's Part-1 claims were declared before the family's seeds trained, and the "
            f"declaration no longer matches its hash in {target}: " + "; ".join(what) + ". Once a family seed "
            "has trained, the declaration stands: undo the change, or declare new claims (new ids, a new stage) "
            "and judge them on a family trained after them. Only if none has trained, declare again: run "
            f"`python -m {__name__}` and commit the file with a line in docs/results.md saying what changed "
            "and why.")


if __name__ == "__main__":
    print(f"wrote {write()}")
