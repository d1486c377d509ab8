"""The report as a reader sees it: headless Chromium loads every figure, logs no error, and the page
gets a full-page screenshot (emergence_bench.reporting.browser). Skipped, with the reason, where no
browser is installed; `.ci/run` installs Debian's chromium so that CI runs it."""

import json

import numpy as np
import pytest

from emergence_bench.engine.run import run
from emergence_bench.reporting import report
from emergence_bench.reporting.browser import check_page, evaluate, find_browser

pytestmark = pytest.mark.skipif(find_browser() is None, reason="no headless browser installed (apt-get install chromium)")


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
        cells = [[int(s), [0.0 if losses_reach_zero and s >= 300 else 0.7 * np.exp(-s / (100 + 50 * c)) for c in range(3)]]
                 for s in evals]
        rows.append({"run_id": f"g{group}-s{seed}", "status": "ok", "seed": seed,
                     "config": resolve({"seed": seed, "task": {"name": "linear_map", "state_size": 4 + group}}).to_dict(),
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
