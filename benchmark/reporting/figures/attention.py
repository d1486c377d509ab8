"""Attention maps beside the ground truth: each head's last map (``maps``), and the best head at
four moments of training (``filmstrip``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from matplotlib.figure import Figure

from emergence_bench.measurements.attention_probe import ATTENTION_PROBE
from emergence_bench.reporting.figure import Drawn, Results, find_run_dir, register_figure
from emergence_bench.reporting.figures.staircase import staircase_seed
from emergence_bench.reporting.plotting import PAGE_INCHES, plt, slug
from emergence_bench.results.row import ResultRow
from emergence_bench.results.store import MAPS_FILE


def _map(ax: Any, image: torch.Tensor, scored: torch.Tensor, scale: dict, title: str, left: bool,
         bottom: bool) -> Any:
    """One [L, L] attention map: the rows that are not scored greyed out, query and key positions
    labelled on the outer panels. Returns the image (for the colour bar)."""
    length = image.shape[-1]
    unscored = np.repeat(~scored.numpy()[:, None], length, axis=1)
    colours = plt.get_cmap(scale["cmap"]).with_extremes(bad="#cfcfcf")  # a row not scored: grey, whatever its weights
    shown = ax.imshow(np.ma.masked_array(image.numpy(), mask=unscored), cmap=colours, vmin=scale["vmin"],
                      vmax=scale["vmax"], interpolation="nearest")
    ticks = sorted({0, length // 2, length - 1})
    ax.set_xticks(ticks, [str(t) for t in ticks] if bottom else [])
    ax.set_yticks(ticks, [str(t) for t in ticks] if left else [])
    if bottom:
        ax.set_xlabel("key position")
    if left:
        ax.set_ylabel("query position")
    ax.set_title(title, fontsize=9)
    return shown


def _map_grid(rows: int, columns: int) -> tuple[Figure, Any]:
    """A grid of square map panels at most the page's width, laid out to leave room for a colour bar."""
    side = min(1.9, (PAGE_INCHES - 1.2) / columns)
    return plt.subplots(rows, columns, figsize=(side * columns + 1.2, side * rows + 0.9), squeeze=False,
                        layout="constrained")


def attention_maps(run_dir: Path, label: str) -> Figure | None:
    """Each head's mean attention map (last eval) beside the ground truth, per probed layer, all on
    one colour scale (a colour bar beside them); the rows the task does not score are grey."""
    path = run_dir / MAPS_FILE
    if not path.is_file():
        return None
    saved = torch.load(path)
    layers, maps, truth = saved["layers"], saved["maps"], saved["ground_truth"]
    heads = max(m.shape[0] for m in maps)
    # The ground truth drawn as the attention that would follow it exactly (each row spread evenly over
    # its sources), on the heads' own colour scale: a head that found the pattern looks like it.
    ideal, scored = _ideal(truth), truth.sum(-1) > 0
    scale = {"cmap": "magma", "vmin": 0.0, "vmax": max([float(ideal.max())] + [float(m.max()) for m in maps])}
    figure, axes = _map_grid(len(layers), heads + 1)
    shown = None
    for row, (layer, probs) in enumerate(zip(layers, maps)):
        for head in range(heads + 1):
            ax, bottom = axes[row, head], row == len(layers) - 1
            if head < probs.shape[0]:
                shown = _map(ax, probs[head], scored, scale, f"layer {layer} head {head}", head == 0, bottom)
            elif head == heads:
                _map(ax, ideal, scored, scale, "ground truth", head == 0, bottom)
            else:
                ax.axis("off")
    assert shown is not None  # every map has at least one head
    figure.colorbar(shown, ax=axes.ravel().tolist(), shrink=0.8, label="attention weight")  # grey: in the caption
    figure.suptitle(f"{label + ', ' if label else ''}step {saved['step']}")
    return figure


def _ideal(truth: torch.Tensor) -> torch.Tensor:
    """The ground truth [L, L] drawn as the attention that would follow it exactly: each row spread
    evenly over its sources."""
    return truth.float() / truth.float().sum(-1, keepdim=True).clamp_min(1)


def filmstrip(run_dir: Path, record: ResultRow, label: str) -> Figure | None:
    """The best head's map at the start, when the pattern was found, at emergence and at the end,
    beside the ground truth, all on one colour scale; None without saved moments (an older run) or
    without a best head (a mixer without attention scores)."""
    path, best = run_dir / MAPS_FILE, ATTENTION_PROBE.read(record).get("best_head")
    if not path.is_file() or not best:
        return None
    saved = torch.load(path)
    moments = saved.get("moments")
    if not moments:
        return None
    index = saved["layers"].index(best["layer"])
    moments = sorted(moments, key=lambda m: m["step"])  # emergence may come before "pattern found"
    frames = [(f"{m['moment']} (step {m['step']})", m["maps"][index][best["head"]]) for m in moments]
    frames.append(("ground truth", _ideal(saved["ground_truth"])))
    scale = {"cmap": "magma", "vmin": 0.0, "vmax": max(float(frame.max()) for _, frame in frames)}
    scored = saved["ground_truth"].sum(-1) > 0
    figure, axes = _map_grid(1, len(frames))
    for i, (ax, (title, frame)) in enumerate(zip(axes[0], frames)):
        shown = _map(ax, frame, scored, scale, title, i == 0, True)
    figure.colorbar(shown, ax=axes.ravel().tolist(), shrink=0.8, label="attention weight")
    figure.suptitle(f"{label + ', ' if label else ''}seed {record['seed']}: layer {best['layer']} head {best['head']}")
    return figure


def _filmstrip_of(results: Results, label: str, members: list) -> Figure | None:
    record = staircase_seed(members, results.seed) or (None if results.seed is not None else members[0])
    run_dir = find_run_dir(results.root, record) if record is not None and results.root else None
    return filmstrip(run_dir, record, results.titles[label]) if run_dir and record is not None else None


def _maps_of(results: Results, label: str, members: list) -> Figure | None:
    run_dir = find_run_dir(results.root, members[0]) if results.root else None
    title = results.titles[label]
    return attention_maps(run_dir, f"{title + ', ' if title else ''}seed {members[0]['seed']}") if run_dir else None


def per_group(draw: Callable[[Results, str, list], Figure | None], name: str, alt: str,
              caption: str) -> Callable[[Results], list[Drawn]]:
    """A figure per group (``draw(results, label, members)``, None where a group has none to show), at
    most ``results.maps`` of them, saved as ``<name>-<group>``; where groups are left unlooked-at once
    that many are drawn, the ``caption`` says so."""
    def drawn(results: Results) -> list[Drawn]:
        figures: list[Drawn] = []
        for i, (label, members) in enumerate(results.groups):
            if len(figures) >= results.maps:
                figures[0].caption = (f"{caption} Drawn for the first {len(figures)} groups that have it, in the "
                                      f"leaderboard's order; {len(results.groups) - i} of the {len(results.groups)} "
                                      f"groups were left out (the report's --maps N sets how many are drawn).")
                break
            figure = draw(results, label, members)
            if figure:
                figures.append(Drawn(figure, f"{name}-{slug(label)}", alt=f"{alt} {label}"))
        return figures

    return drawn


FILMSTRIP = ("The best head's map at the start, when the pattern was found, at emergence and at the end, beside "
             "the ground truth, all on one colour scale (the truth drawn as the attention that follows it exactly).")
MAPS = ("Each group's last attention maps (one panel a head; rows: the query position, columns: the key it attends "
        "to) next to the task's true sources, on one colour scale; grey rows are positions the task does not score.")
register_figure("filmstrip", "Attention over time", FILMSTRIP,
                "no run saved its attention maps at the four moments (a mixer without attention scores, or results "
                "from an older version)")(per_group(_filmstrip_of, "filmstrip", "attention over time", FILMSTRIP))
register_figure("maps", "Attention maps beside the ground truth", MAPS,
                "no run saved attention maps (mixers without attention scores, or no attention probe)")(
    per_group(_maps_of, "attention", "attention", MAPS))
