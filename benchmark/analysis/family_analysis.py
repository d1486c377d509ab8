"""The language family, analysed as the paper analyses Pythia: per seed and probe, the probe's accuracy
at every checkpoint, the emergence step by bisection, every head's previous-token and induction
scores, and head patching between the bracketing checkpoints; then, per probe, the three claims'
numbers across seeds (the paper's first part: docs/science.md, "Language probes"):

1. at a fixed scale, seeds differ in when and whether: the emergence steps and their spread;
2. heads jump from diffuse to a pattern together with the emergence: each seed's first induction
   (and previous-token) head against its emergence bracket;
3. a few heads carry it: the gap recovered by the top K heads patched together, K = 1, 2, 4, 8, 16.

Rows go to ``OUT/analysis/<run id>/result.json`` (``analyze pythia``'s, which the leaderboard and the
report read); the summary to ``OUT/analysis/family.json``, with the three claims judged as declared
before the family trained where a judge is given (``FamilyJudge``: ``claims.family_judge.scorecard``,
passed in by the command, since the claims sit a layer above this module).
"""

from __future__ import annotations

import json
import statistics
import warnings
from collections.abc import Callable
from pathlib import Path

from emergence_bench.analysis import pythia
from emergence_bench.analysis.head_scores import JUMP
from emergence_bench.analysis.language_probes import PROBES, SHAKESPEARE
from emergence_bench.analysis.lm_family import FamilyConfig, family_file, model_folder, trained_seeds
from emergence_bench.results.store import without_non_finite, write_json
from emergence_bench.stats.transition_share import transition

K_SHOWN = (1, 2, 4, 8, 16)
MOST = 0.8  # "carried by k heads": the fewest top heads that recover this much of the gap
SUMMARY_FILE = "family.json"
FamilyJudge = Callable[[list[dict]], dict]  # the family's analysis rows (every seed and probe) -> a scorecard


def recovered(patching: dict) -> dict[int, float | None]:
    """{k: fraction of the gap the top k heads recover} for the k of K_SHOWN that were patched."""
    by_k = {row["k"]: row["fraction_recovered"] for row in patching.get("top_k", [])}
    return {k: by_k[k] for k in K_SHOWN if k in by_k}


def heads_for_most(patching: dict) -> int | None:
    """The fewest top heads that together recover ≥ MOST of the gap (None: none of the patched sets)."""
    for row in patching.get("top_k", []):
        if row["fraction_recovered"] is not None and row["fraction_recovered"] >= MOST:
            return int(row["k"])
    return None


def split_words(out: Path) -> list[str]:
    """The probe words (all but the number words) that the family's tokenizer splits into several
    tokens: a probe then scores only the first piece of such an answer."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(out / "tokenizer"))
    lexicon = SHAKESPEARE
    words = lexicon.symbols + lexicon.words + lexicon.names + lexicon.places + lexicon.objects
    return sorted({w for w in words if len(tokenizer(" " + w, add_special_tokens=False)["input_ids"]) > 1})


def probe_summary(rows: dict[int, dict]) -> dict:
    """One probe across seeds: {seed: its numbers}, and the spread of the emergence steps."""
    seeds = {}
    for seed, row in sorted(rows.items()):
        if row["status"] != "ok":
            seeds[seed] = {"status": row["status"], "error": row["error"]}
            continue
        e, p, h = row["emergence"], row["patching"], row.get("head_scores", {})
        seeds[seed] = {
            "status": "ok", "emerged": not e["censored"], "step": e["first_solved"], "bracket": e["bracket"],
            "final_accuracy": row["metrics"]["final_eval_accuracy"],
            "induction_jump": h.get("induction_jump", {}).get("step"),
            "previous_token_jump": h.get("previous_token_jump", {}).get("step"),
            "recovered": {str(k): v for k, v in recovered(p).items()}, "heads_for_most": heads_for_most(p),
            "top_heads": [[t["layer"], t["head"]] for t in p.get("top_heads", [])[:4]],
        }
    steps = [s["step"] for s in seeds.values() if s.get("emerged")]
    return {"seeds": seeds, "emerged": len(steps), "of": len(seeds), "spread": spread(steps)}


def spread(steps: list[int]) -> dict | None:
    """min, median, max of the steps and max/min (None when there are none)."""
    if not steps:
        return None
    return {"min": min(steps), "median": statistics.median(steps), "max": max(steps),
            "max_over_min": max(steps) / min(steps) if min(steps) > 0 else None}


def head_summary(rows: dict[int, dict]) -> dict:
    """Per head pattern (previous-token, induction), across seeds: the step its best head reached the
    jump score, that step's spread, and how abrupt the best head's rise was (abruptness.transition on
    the best score against step: its share of the time to its end; ≤ 0.25 reads abrupt)."""
    found = {}
    for kind in ("previous_token", "induction"):
        seeds = {}
        for seed, row in sorted(rows.items()):
            h = row.get("head_scores")
            if row["status"] != "ok" or not h:
                continue
            steps = [s for s, _ in h["history"]]
            best = [max(max(layer) for layer in grid[kind]) for _, grid in h["history"]]
            rise = transition(steps, [-b for b in best], min_drop=0.1)
            seeds[seed] = {"jump": h[f"{kind}_jump"]["step"], "best_final": best[-1], "best_max": max(best),
                           "transition": None if rise is None else rise.to_dict()}
        jumps = [s["jump"] for s in seeds.values() if s["jump"] is not None]
        found[kind] = {"seeds": seeds, "formed": len(jumps), "of": len(seeds), "spread": spread(jumps)}
    return found


def analyze_family(out: Path, probes: list[str] | None = None, prompts: int = 64, threshold: float = 0.5,
                   device: str = "auto", judge: FamilyJudge | None = None) -> dict:
    """Analyse every trained seed of the family in ``out`` on ``probes`` (default all, in the
    shakespeare lexicon); writes and returns the summary, with ``judge``'s scorecard of the rows as
    its ``claims`` (an unbounded number, such as a spread with a seed that never emerged, is null in
    the file)."""
    probes = list(probes or PROBES)
    unknown = sorted(set(probes) - set(PROBES))
    if unknown:
        raise ValueError(f"unknown probes {unknown}; known: {sorted(PROBES)}")
    saved = json.loads(family_file(out).read_text())["config"]
    config = FamilyConfig.from_dict(saved)
    seeds = trained_seeds(out)
    if not seeds:
        raise ValueError(f"{out} has no seed trained to the end; run `lm-family train {out}` (it resumes)")
    heads = config.layers * config.heads
    split = split_words(out)
    if split:
        warnings.warn(f"the family's tokenizer splits these probe words into several tokens: {', '.join(split)}")
    rows: dict[str, dict[int, dict]] = {probe: {} for probe in probes}
    for seed in seeds:
        for probe in probes:
            row = pythia.analyze(str(model_folder(out, seed)), probe, out=out / "analysis", prompts=prompts,
                                 threshold=threshold, top_k=min(max(K_SHOWN), heads), device=device,
                                 lexicon="shakespeare", curve=True, scores=True)
            rows[probe][seed] = row
            print(f"seed {seed} {probe}: " + _line(row), flush=True)
    summary = {"family": str(out), "config": saved, "seeds": seeds,
               "threshold": threshold, "prompts": prompts, "heads_per_model": heads, "split_probe_words": split,
               "probes": {probe: probe_summary(by_seed) for probe, by_seed in rows.items()},
               "heads": head_summary(rows[probes[0]])}  # the same models and repeats under every probe
    if judge is not None:
        summary["claims"] = judge([row for by_seed in rows.values() for row in by_seed.values()])
    write_json(out / "analysis" / SUMMARY_FILE, without_non_finite(summary)[0])
    return summary


def _line(row: dict) -> str:
    if row["status"] != "ok":
        return f"{row['status']}: {row['error'].splitlines()[0]}"
    e = row["emergence"]
    found = "never solved" if e["censored"] else f"emerged between step {e['last_unsolved']} and {e['first_solved']}"
    return f"final accuracy {row['metrics']['final_eval_accuracy']:.2f}, {found}"


def print_summary(summary: dict) -> None:
    """The heads' patterns across seeds, then the three claims' numbers, a block per probe."""
    for kind, k in summary["heads"].items():
        name = kind.replace("_", "-")
        print(f"{name} heads (score ≥ {JUMP}): formed in {k['formed']} of {k['of']} seeds"
              + (f", steps min {k['spread']['min']}, median {k['spread']['median']:g}, max {k['spread']['max']}"
                 if k["spread"] else ""))
        for seed, r in k["seeds"].items():
            t = r["transition"]
            rise = "no rise" if t is None else (f"rose over steps {t['start']}–{t['end']} (share {t['share']:.2f}"
                                                f"{', abrupt' if t['share'] <= 0.25 else ''})")
            print(f"  seed {seed}: first at {_step(r['jump'])}, best {r['best_max']:.2f}; {rise}")
    for probe, s in summary["probes"].items():
        print(f"\n{probe}: emerged in {s['emerged']} of {s['of']} seeds (accuracy ≥ {summary['threshold']})")
        if s["spread"]:
            sp = s["spread"]
            ratio = "n/a" if sp["max_over_min"] is None else f"{sp['max_over_min']:.2f}x"
            print(f"  steps: min {sp['min']}, median {sp['median']:g}, max {sp['max']} (max/min {ratio})")
        print("  seed  step   bracket       induction head  prev-token head  " + "  ".join(f"K={k}" for k in K_SHOWN)
              + "  heads for 80%")
        for seed, r in s["seeds"].items():
            if r["status"] != "ok":
                print(f"  {seed:>4}  {r['status']}")
                continue
            cells = "  ".join("  —  " if r["recovered"].get(str(k)) is None else f"{r['recovered'][str(k)]:.2f} "
                              for k in K_SHOWN)
            bracket = "—" if r["step"] is None else f"{r['bracket'][0]}–{r['bracket'][1]}"
            print(f"  {seed:>4}  {r['step'] if r['step'] is not None else 'never':>5}  {bracket:<12}  "
                  f"{_step(r['induction_jump']):>14}  {_step(r['previous_token_jump']):>15}  {cells}  "
                  f"{r['heads_for_most'] if r['heads_for_most'] is not None else '—':>5}")


def _step(step: int | None) -> str:
    return "never" if step is None else str(step)
