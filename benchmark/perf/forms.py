"""Each float-order form of a mixer against the form ladder v2 ran (`speed`'s forms table).

A form is a config key that changes how a mixer's reference sums, never what it computes: Gated
DeltaNet's ``chunk_size`` (the chunked delta rule's chunk length) and mLSTM's ``quadratic_up_to``
(the longest sequence the quadratic form runs; chunks of 16 above). Which is faster at the
ranking's own lengths is a measurement of the whole training step (8 seeds batched, as the ranking
trains them), not of the core op alone: the core op's gain can vanish among the layer's other work.
Interleaved blocks, as every ratio here: the ratio's median over the repeats, with its spread.
"""

from __future__ import annotations

from emergence_bench.config import resolve
from emergence_bench.perf.loops import stacked_loop
from emergence_bench.perf.mixers import SEEDS, length_config
from emergence_bench.perf.timing import bracketed, interleave, summary

# mixer -> (its form key, the values timed; the first is ladder v2's form, the one the others are timed against)
FORMS: dict[str, tuple[str, list[int]]] = {"gated_deltanet": ("chunk_size", [32, 16, 8]),
                                           "mlstm": ("quadratic_up_to", [64, 16])}
LENGTHS = (20, 32, 64, 128)  # the linear map's 20, cellular automata's 32, Dyck's rungs and one above


def form_ratios(lengths: tuple[int, ...] = LENGTHS, repeats: int = 5, steps: int = 5) -> list[dict]:
    """Per mixer of FORMS and length: each form's training step over ladder v2's form, interleaved.
    Rows {mixer, key, value, length, step_ms, vs_v2 (a ``summary``; v2's own row reads 1)}."""
    rows = []
    for mixer, (key, values) in FORMS.items():
        for length in lengths:
            blocks = {}
            for value in values:
                raw = length_config(mixer, length)
                raw["mixer"][key] = value
                loop = stacked_loop(resolve(raw), SEEDS)
                loop.run(2)  # warm-up: the allocator's first blocks
                blocks[value] = (loop.run, steps)
            v2, others = values[0], values[1:]
            reference, times = interleave(blocks[v2], {v: blocks[v] for v in others}, repeats)
            rows.append({"mixer": mixer, "key": key, "value": v2, "length": length,
                         "step_ms": summary(reference)["median"] * 1e3, "vs_v2": summary([1.0] * repeats)})
            rows += [{"mixer": mixer, "key": key, "value": v, "length": length,
                      "step_ms": summary(times[v])["median"] * 1e3, "vs_v2": summary(bracketed(reference, times[v]))}
                     for v in others]
    return rows


def render_forms(rows: list[dict]) -> str:
    lines = ["| mixer | form | length | step (ms) | × ladder v2's form |", "|---|---|---|---|---|"]
    for r in rows:
        s = r["vs_v2"]
        first = FORMS[r["mixer"]][1][0] == r["value"]
        ratio = "1 (ladder v2's)" if first else f"{s['median']:.2f} ({s['min']:.2f}–{s['max']:.2f})"
        lines.append(f"| {r['mixer']} | {r['key']}={r['value']} | {r['length']} | {r['step_ms']:.1f} | {ratio} |")
    return "\n".join(lines) + "\n"
