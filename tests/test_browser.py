"""The report as a reader sees it: headless Chromium loads every figure, logs no error, and the page
gets a full-page screenshot (emergence_bench.reporting.browser). Skipped, with the reason, where no
browser is installed; `.ci/run` installs Debian's chromium so that CI runs it."""

import json

import numpy as np
import pytest

from emergence_bench.engine.run import run
from emergence_bench.reporting import report
from emergence_bench.reporting.browser import check_page, evaluate, find_browser

pytestmark = pytest.mark.skipif(find_browser() is None,
                                reason="no headless browser installed (apt-get install chromium)")


def test_every_figure_loads_nothing_logs_an_error_and_the_page_is_captured(tmp_path, tiny_config):
    for sparsity in (1, 2):
        run(tiny_config(task={"name": "linear_map", "state_size": 4, "sparsity": sparsity, "batch_size": 32}), tmp_path)
    page = report.write(tmp_path)
    check = check_page(page, tmp_path / "shot.png")
    assert check.ok, (check.broken, check.errors)
    assert len(check.images) == page.read_text().count("<img ") >= 5
    shot = (tmp_path / "shot.png").read_bytes()
    assert shot.startswith(b"\x89PNG") and len(shot) > 20_000


def test_a_broken_figure_and_a_logged_error_are_caught(tmp_path):
    page = tmp_path / "bad.html"
    page.write_text("<!doctype html><html><body><img alt='fine' src='data:image/gif;base64,"
                    "R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7'>"
                    "<img alt='broken' src='data:image/png;base64,bm90IGEgcG5n'>"
                    "<script>console.error('something went wrong')</script></body></html>")
    check = check_page(page)
    assert not check.ok and check.broken == ["broken"]
    assert any("something went wrong" in e for e in check.errors)


@pytest.mark.slow
def test_report_screenshot_flag(tmp_path, cli, tiny_config):
    run(tiny_config(), tmp_path)
    done = cli("report", tmp_path, "--screenshot")
    assert done.returncode == 0, done.stderr
    assert "all loaded" in done.stdout and (tmp_path / "report.png").is_file()


# Per figure, as Chromium lays the SVG out: each axes' background box, each legend's box, and per
# y axis its label and its labelled ticks (value, height on the page). Matplotlib writes each text's
# string as a comment before its glyphs.
LAYOUT = """JSON.stringify((() => {
  const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const said = g => { for (const n of g.childNodes) if (n.nodeType === 8) return n.data.trim(); return ''; };
  const axes = [], yaxes = [];
  for (const ax of document.querySelectorAll('g[id^="axes_"]')) {
    axes.push(box(ax.querySelector(':scope > g[id^="patch_"]')));
    const y = ax.querySelectorAll(':scope > g[id^="matplotlib.axis_"]')[1];  // x first, then y
    if (!y) continue;
    const label = Array.from(y.children).filter(c => c.id.startsWith('text_')).map(said).pop() || '';
    const ticks = Array.from(y.querySelectorAll(':scope > g[id^="ytick_"] > g[id^="text_"]'))
        .map(t => [said(t), (box(t)[1] + box(t)[3]) / 2]);
    yaxes.push({label, ticks});
  }
  return {axes, legends: Array.from(document.querySelectorAll('g[id^="legend_"]')).map(box), yaxes};
})())"""


def _rows(losses_reach_zero: bool, group: int) -> list[dict]:
    """Three seeds of one group, hand-made: a train loss falling over four decades, the eval accuracy
    rising, per-cell eval losses (reaching exactly 0 or not; the last cell a shortcut's), one seed
    stopping at its emergence."""
    from emergence_bench.config import resolve

    rows = []
    for seed in range(3):
        end = 300 if seed == 0 else 600  # seed 0 stops at its emergence
        steps = np.arange(10, end + 1, 10)
        loss = 2.0 * np.exp(-steps / 60.0)
        evals = np.arange(50, end + 1, 50)
        cells = [[int(s), [0.0 if losses_reach_zero and s >= 300 else 0.7 * np.exp(-s / (100 + 50 * c))
                           for c in range(3)]] for s in evals]
        config = resolve({"seed": seed, "task": {"name": "linear_map", "state_size": 4 + group}})
        rows.append({"run_id": f"g{group}-s{seed}", "status": "ok", "seed": seed, "config": config.to_dict(),
                     "timing": {"steps": end},
                     "curves": {"train_loss": [[int(s), float(v)] for s, v in zip(steps, loss)],
                                "eval": [[int(s), 1.0, min(1.0, s / 300)] for s in evals], "eval_cells": cells},
                     "plateau": {"end_step": 60, "threshold": 0.5},
                     "task_facts": {"shortcut_cells": [False, False, True]},
                     "emergence": {"step": 300 if seed == 0 else None, "threshold": 0.95,
                                   "per_position": [300, None, None]}})
    return rows


def test_legends_lie_off_the_data_and_only_a_log_axis_says_log(tmp_path):
    """Curves, staircase and seeds figures as the report draws them, laid out by Chromium: no legend
    box overlaps a panel; every y axis has two or more tick labels; a label says "(log)" exactly where
    its ticks are spaced by the logarithm of their values (the staircase whose losses reach 0 is
    linear, and says nothing of a log)."""
    from emergence_bench.reporting.figures.curves import loss_curves
    from emergence_bench.reporting.figures.seeds import seed_scatter
    from emergence_bench.reporting.figures.staircase import staircase
    from emergence_bench.reporting.plotting import plt

    groups = [("linear_map state_size=4 · transformer", _rows(True, 0)),
              ("linear_map state_size=5 · transformer", _rows(False, 1))]
    files = []
    for name, figure in (("curves", loss_curves(groups)), ("staircase", staircase(groups, limit=2)),
                         ("seeds", seed_scatter(groups))):
        files.append(tmp_path / f"{name}.svg")
        figure.savefig(files[-1], format="svg", bbox_inches="tight")
        plt.close(figure)
    said = {}
    for path in files:
        layout = json.loads(evaluate(path, LAYOUT))
        assert layout["legends"], path.name
        for legend in layout["legends"]:
            for panel in layout["axes"]:
                apart = legend[2] <= panel[0] or panel[2] <= legend[0] or legend[3] <= panel[1] or panel[3] <= legend[1]
                assert apart, (path.name, legend, panel)
        for axis in layout["yaxes"]:
            ticks = [(float(text), height) for text, height in axis["ticks"] if _number(text)]
            assert len(ticks) >= 2, (path.name, axis)
            said[path.name, axis["label"]] = said.get((path.name, axis["label"]), []) + [_log_spaced(ticks)]
            assert axis["label"].endswith("(log)") == _log_spaced(ticks), (path.name, axis)
    assert said["staircase.svg", "eval loss per cell"] == [False]  # the losses reaching 0
    assert said["staircase.svg", "eval loss per cell (log)"] == [True]
    assert set(said["curves.svg", "train loss (log)"]) == {True}


def _number(text: str) -> bool:
    try:
        return float(text) > 0
    except ValueError:
        return False


def _log_spaced(ticks: list[tuple[float, float]]) -> bool:
    """Whether tick heights follow log(value) more closely than value (three ticks or more; two fit
    both: then whether their spacing on the page is that of a log axis is left open, i.e. False)."""
    values, heights = np.array([v for v, _ in ticks]), np.array([h for _, h in ticks])
    if len(ticks) < 3:
        return False

    def misfit(x: np.ndarray) -> float:
        fitted = np.polyval(np.polyfit(x, heights, 1), x)
        return float(np.abs(fitted - heights).max())

    return misfit(np.log(values)) < misfit(values)


# --- Each figure draws what its caption says, read in Chromium --------------------------------------------------

SHOWN = "JSON.stringify(Array.from(document.images).map(i => [i.alt, i.naturalWidth, i.clientWidth]))"
CAPTIONS = "JSON.stringify(Array.from(document.querySelectorAll('h2')).map(h => [h.textContent, " \
           "h.nextElementSibling && h.nextElementSibling.tagName === 'P' ? h.nextElementSibling.textContent : '']))"
# Per SVG figure: the box of every text (its string beside it: a comment per line), of each axes' background
# and of the whole image.
TEXTS = """JSON.stringify((() => {
  const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const said = g => Array.from(g.childNodes).filter(n => n.nodeType === 8).map(n => n.data.trim()).join(' ');
  return {texts: Array.from(document.querySelectorAll('g[id^="text_"]')).filter(g => said(g))
                  .map(g => [said(g), box(g)]),
          axes: Array.from(document.querySelectorAll('g[id^="axes_"] > g[id^="patch_"]')).map(box),
          image: box(document.documentElement)};
})())"""


def _write(folder, rows) -> None:
    for row in rows:
        (folder / row["run_id"]).mkdir(parents=True)
        (folder / row["run_id"] / "result.json").write_text(json.dumps({"schema_version": 3, **row}))


def _ranking_folder(folder) -> None:
    """Three mixers on four task ladders (one numeric task key each), one of them a plugin whose state
    is unknown, and tuning tables where no lr works for any of them on one family."""
    from test_rank import row

    families = {"linear_map": "sparsity", "cellular_automata": "rules", "mqar": "pairs", "dyck": "bracket_types"}
    states = {"transformer": 3968, "lru": 256, "my_mixer": None}
    rows = [dict(row(mixer, family, rung, seed, 100 * rung * (seed + 1) if seed < 2 else None, axis=axis),
                 state_size=state)
            for mixer, state in states.items() for family, axis in families.items() for rung in (1, 2, 3)
            for seed in range(3)]
    _write(folder, rows)

    def point(lr, area):
        return {"values": {"optim.lr": lr}, "runs": 4, "failed": 0, "emerged": int(4 * area), "area": area,
                "area_low": 0.0, "area_high": min(1.0, area + 0.4), "median_emergence_step": None}

    tables = [{"mixer": mixer, "group": family.replace("_", "-"), "family": family, "rung_axis": f"task.{axis}",
               "rungs": [2], "grid": {"optim.lr": [3e-4, 1e-3, 3e-3, 1e-2]}, "chosen": {"optim.lr": 3e-4},
               "edge": None, "points": [point(lr, 0.0 if family == "mqar" else area)
                                        for lr, area in ((3e-4, 0.25), (1e-3, 1.0), (3e-3, 0.75), (1e-2, 0.0))]}
              for mixer in states for family, axis in families.items()]
    (folder / "tuning").mkdir()
    (folder / "tuning" / "tuning.json").write_text(json.dumps({"tables": tables}))


def _boxes_apart(a, b) -> bool:
    return a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1]


def test_the_ranking_figures_name_every_mixer_keep_their_labels_apart_and_fit_the_page(tmp_path):
    """A plugin of unknown state is in the state figure (a dashed line, "state unknown" in the legend and
    the caption); its labels never overlap, nor leave the image; the tuning curves' three "none works"
    of one panel sit above it, apart from each other and from the points; every figure of the page is
    shown at the width it was drawn (none wider than the page, its text shrunk); and a figure is drawn
    against each of the four task axes that vary, its caption naming the runs it draws."""
    folder = tmp_path / "mine"
    _ranking_folder(folder)
    page = report.write(folder)
    check = check_page(page)
    assert check.ok, (check.broken, check.errors)
    shown = json.loads(evaluate(page, SHOWN))
    assert all(natural <= width for _, natural, width in shown), shown
    captions = dict(json.loads(evaluate(page, CAPTIONS)))
    assert "my_mixer: state unknown" in captions["State size and quality"]
    for family, axis in (("linear_map", "sparsity"), ("cellular_automata", "rules"), ("mqar", "pairs"),
                         ("dyck", "bracket_types")):
        caption = captions[f"Plateau and emergence against task.{axis}"]
        assert f"Drawn: the 27 runs that set task.{axis} ({family}, lru, my_mixer, transformer), 3 lines" in caption
    figures = folder / "report_figures"
    state = json.loads(evaluate(figures / "state.svg", TEXTS))
    said = [text for text, _ in state["texts"]]
    assert {"transformer", "lru", "my_mixer (state unknown)"} <= set(said), said
    image = state["image"]
    for text, box in state["texts"]:
        assert image[0] <= box[0] and box[2] <= image[2] and image[1] <= box[1] and box[3] <= image[3], (text, box)
    for i, (text, box) in enumerate(state["texts"]):
        for other, other_box in state["texts"][i + 1:]:
            assert _boxes_apart(box, other_box), (text, other)
    tuning = json.loads(evaluate(figures / "tuning-curves.svg", TEXTS))
    (title,) = [box for text, box in tuning["texts"] if "none works" in text]
    assert all(_boxes_apart(title, panel) for panel in tuning["axes"])  # above its panel, never on the points
    for i, (text, box) in enumerate(tuning["texts"]):
        for other, other_box in tuning["texts"][i + 1:]:
            assert _boxes_apart(box, other_box), (text, other)


def test_a_figure_that_leaves_groups_out_says_which_and_why(tmp_path):
    """Twelve groups: the staircase draws four (the report's --maps) and threshold sensitivity ten (more
    lines cannot be told apart); each caption says so, naming the groups left out or the flag that
    draws them; the sweep axis's one line is named by its runs, not "all runs"."""
    from emergence_bench.reporting.figures.threshold_sensitivity import MAX_LINES

    rows = [dict(r, run_id=f"{r['run_id']}-{group}") for group in range(12) for r in _rows(False, group)]
    _write(tmp_path, rows)
    page = report.write(tmp_path, figures=("staircase", "thresholds", "axes"))
    check = check_page(page)
    assert check.ok, (check.broken, check.errors)
    captions = dict(json.loads(evaluate(page, CAPTIONS)))
    assert "Drawn: the first 4 of the 12 groups with per-cell curves" in captions["Per-cell eval loss (the staircase)"]
    assert "--maps 12 draws every one" in captions["Per-cell eval loss (the staircase)"]
    thresholds = captions["Threshold sensitivity"]
    assert f"Drawn: the first {MAX_LINES} of the 12 groups with eval curves" in thresholds
    assert "left out: state_size=8; state_size=9." in thresholds, thresholds  # the leaderboard sorts labels as text
    against = captions["Plateau and emergence against task.state_size"]
    assert "Drawn: the 36 runs that set task.state_size (linear_map, transformer), one line" in against
    legend = json.loads(evaluate(tmp_path / "report_figures" / "against-task-state-size.svg", TEXTS))
    assert "linear_map · transformer" in [text for text, _ in legend["texts"]]
    assert all(natural <= width for _, natural, width in json.loads(evaluate(page, SHOWN)))
