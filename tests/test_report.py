import base64
import re

import pytest

from emergence_bench.engine.run import run
from emergence_bench.reporting import report
from emergence_bench.reporting.figure import REGISTRY, Results, show
from emergence_bench.reporting.figures import FIGURES, attention, axes, curves, seeds, staircase
from emergence_bench.reporting.page import Page


def test_report_from_a_small_sweep_has_every_figure(tmp_path, tiny_config):
    for state_size in (4, 5):
        for sparsity in (1, 2):
            run(tiny_config(task={"name": "linear_map", "state_size": state_size, "sparsity": sparsity,
                                  "batch_size": 32}), tmp_path)
    run(tiny_config(mixer={"name": "mlp_mixer"}), tmp_path)
    path = report.write(tmp_path)
    page = path.read_text()
    for heading in ("Leaderboard", "Loss curves", "Per-cell eval loss (the staircase)", "Emergence step per seed",
                    "Plateau and emergence against task.state_size", "Plateau and emergence against task.sparsity",
                    "Threshold sensitivity", "Final eval loss over task.state_size × task.sparsity",
                    "Attention over time", "Attention maps beside the ground truth"):
        assert heading in page, heading
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    # curves, the staircase, seeds' emergence, one per numeric axis, the thresholds, the heatmap, then the
    # first 4 groups' filmstrips and their last maps
    assert len(images) == 3 + 2 + 1 + 1 + 4 + 4
    for data in images:
        assert base64.b64decode(data).startswith(b"\x89PNG") and len(data) > 1000
    assert "<table>" in page and "mlp_mixer" in page
    # An index links every section; every figure is also a PNG and an SVG file beside the report.
    anchors = re.findall(r'<h2 id="([^"]+)">', page)
    assert len(anchors) == 11 and all(f'href="#{a}"' in page for a in anchors)
    # Where the numbers come from: the code, versions, machine and command of every run.
    assert ">Provenance</h2>" in page and "code (git commit)" in page and "(5 runs)" in page
    files = sorted(p.name for p in (tmp_path / "report_figures").iterdir())
    assert len(files) == 2 * len(images) and {"loss-curves.png", "loss-curves.svg", "heatmap.svg"} <= set(files)
    assert (tmp_path / "report_figures" / "heatmap.svg").read_text().lstrip().startswith("<?xml")
    # --figures draws only the named ones, and refuses a name it does not know.
    only = report.write(tmp_path, tmp_path / "only.html", figures=("seeds",)).read_text()
    assert len(re.findall(r"<img ", only)) == 1 and "Emergence step per seed" in only
    # What the results do not allow is named with its reason, not silently left out.
    assert "<li>ranking: no task family varies one numeric task key" in page
    with pytest.raises(ValueError, match="no figure named curvs"):
        report.write(tmp_path, figures=("curvs",))


@pytest.mark.slow
def test_report_command(tmp_path, cli, tiny_config):
    run(tiny_config(), tmp_path)
    result = cli("report", tmp_path, "--out", tmp_path / "r.html")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "r.html").read_text().startswith("<!doctype html>")
    bad = cli("report", tmp_path, "--axes", "task.state_size")
    assert bad.returncode == 2 and "--axes takes two config keys" in bad.stderr
    missing = cli("report", tmp_path / "nothing")
    assert missing.returncode == 2 and "no such results directory" in missing.stderr
    (tmp_path / "empty").mkdir()
    empty = cli("report", tmp_path / "empty")
    assert empty.returncode == 2 and "no result.json" in empty.stderr


def test_seed_scatter_keeps_settings_of_one_mixer_apart():
    def row(sparsity, step):
        return {"status": "ok", "emergence": {"step": step}, "timing": {"steps": 600},
                "config": {"task": {"sparsity": sparsity}, "trainer": {"max_steps": 600}}}

    groups = [("transformer · s=2", [row(2, 50), row(2, 80)]), ("transformer · s=3", [row(3, 200), row(3, None)])]
    assert seeds.seed_columns(groups) == [("transformer · s=2", [50, 80], []),
                                           ("transformer · s=3", [200], [600])]


def test_metric_against_an_axis_has_one_line_per_mixer_and_censored_medians():
    def row(mixer, state_size, seed, step):
        return {"status": "ok", "seed": seed, "emergence": {"step": step}, "plateau": {"end_step": step},
                "timing": {"steps": 1000},
                "config": {"seed": seed, "task": {"name": "linear_map", "state_size": state_size},
                           "mixer": {"name": mixer}, "trainer": {"max_steps": 1000}}}

    records = ([row("transformer", s, i, 10 * s) for s in (4, 8, 16) for i in range(3)]
               + [row("mamba", s, i, None if s == 16 else 50) for s in (4, 8, 16) for i in range(3)])
    assert axes.numeric_axes(records) == ["task.state_size"]
    lines = axes.axis_lines(records, "task.state_size").lines
    assert set(lines) == {"name=transformer", "name=mamba"}
    assert [p["emergence"]["median"] for p in lines["name=transformer"]] == [40, 80, 160]
    assert lines["name=mamba"][2]["emergence"]["median"] is None  # censored: drawn at the budget
    assert lines["name=mamba"][2]["emergence"]["budget"] == 1000
    assert axes.axis_figure(records, "task.state_size")
    # A key that changes with the axis (head_dim as heads rise at a fixed width) makes no line of its own.
    heads = [{**row("transformer", 8, i, 10 * h),
              "config": {**row("transformer", 8, i, 0)["config"],
                         "mixer": {"name": "transformer", "n_heads": h, "head_dim": 64 // h}}}
             for h in (1, 4, 16) for i in range(2)]
    # Its one line is named by what its runs are (not "all runs"), and the caption says what follows the axis.
    along = axes.axis_lines(heads, "mixer.n_heads")
    assert list(along.lines) == ["linear_map · transformer"] and along.follows == {"mixer.head_dim": [64, 16, 4]}
    assert "Changing with mixer.n_heads, value for value (so not the axis alone): mixer.head_dim (64, 16, 4)" \
        in axes.what_it_draws(along)
    # An axis whose every value is another mixer compares the mixers, not the axis: no figure.
    two = [row("transformer", 8, 0, 10), row("mamba", 8, 0, 20)]
    two[0]["config"]["mixer"]["n_heads"], two[1]["config"]["mixer"]["n_heads"] = 2, 8
    other = axes.axis_lines(two, "mixer.n_heads")
    assert other.lines == {} and "another task or mixer" in other.why_not


def test_the_staircase_shows_the_median_emergence_seed_and_needs_per_cell_curves():
    def seed(i, step, cells=True):
        return {"seed": i, "emergence": {"step": step, "per_position": [step, None]},
                "curves": {"eval_cells": [[0, [0.7, 0.7]], [step or 10, [0.1, 0.6]]] if cells else []}}

    members = [seed(0, 300), seed(1, 100), seed(2, None), seed(3, 200)]
    assert staircase.staircase_seed(members)["seed"] == 3  # 100, 200, 300: the median is 200
    assert staircase.staircase_seed([seed(0, None), seed(1, None)])["seed"] == 0
    assert staircase.staircase_seed([seed(0, 50, cells=False)]) is None  # an older result: nothing to draw
    assert staircase.staircase_seed(members, seed=2)["seed"] == 2  # --seed chooses
    figure = staircase.staircase([("g", members)], limit=4)
    assert len(figure.axes[0].lines) == 2  # one line per output cell


def test_heads_and_ground_truth_share_one_colour_scale(tmp_path):
    import torch

    from emergence_bench.results.store import MAPS_FILE

    truth = torch.tensor([[1, 0, 0], [1, 0, 0], [0, 1, 1]])
    maps = [torch.tensor([[[0.9, 0.1, 0.0], [0.2, 0.3, 0.5], [0.1, 0.45, 0.45]]])]
    torch.save({"layers": [0], "maps": maps, "ground_truth": truth, "step": 10}, tmp_path / MAPS_FILE)
    figure = attention.attention_maps(tmp_path, "g")
    head, ground = (ax.images[0] for ax in figure.axes[:2])
    assert head.get_cmap().name == ground.get_cmap().name and head.get_clim() == ground.get_clim() == (0.0, 1.0)
    # The truth is drawn as the attention that follows it: row 2 spreads evenly over its two sources.
    assert ground.get_array()[2].tolist() == [0.0, 0.5, 0.5]


def test_loss_curves_stay_small_for_a_large_sweep():
    def member(n):
        return {"seed": 0, "status": "ok", "emergence": {"step": None}, "timing": {"steps": n},
                "plateau": {"end_step": None, "threshold": 0.5}, "config": {"trainer": {"max_steps": n}},
                "curves": {"train_loss": [[i, 1.0] for i in range(n)]}}

    groups = [(f"g{i}", [member(5000), member(3000)]) for i in range(30)]
    figure = curves.loss_curves(groups)
    drawn = [ax for ax in figure.axes if ax.lines]
    assert len(drawn) == curves.MAX_CURVE_PANELS  # the first 24 of 30 groups
    longest = max(len(line.get_xdata()) for ax in drawn for line in ax.lines)
    assert longest <= curves.CURVE_POINTS + 1


def test_every_figure_is_registered_with_its_reason_when_absent_and_the_cli_offers_each(capsys):
    from emergence_bench.cli import parser

    assert FIGURES == ("curves", "staircase", "seeds", "ranking", "axes", "thresholds", "heatmap", "filmstrip",
                       "maps", "claims", "language")
    for figure in REGISTRY.values():
        assert figure.name and figure.title and figure.absent, figure
        assert figure.part_of in (None, *FIGURES), figure
    assert [f.name for f in REGISTRY.values() if f.part_of == "ranking"] == ["tuning", "survival", "forest",
                                                                                      "state"]
    with pytest.raises(SystemExit):
        parser().parse_args(["report", "DIR", "--help"])
    offered = " ".join(capsys.readouterr().out.split())
    assert all(name in offered for name in FIGURES)
    # Nothing drawable: each figure is listed, by name, with its reason.
    page = Page()
    for name in FIGURES:
        assert not show(page, REGISTRY[name], Results([]))
    assert page.missing == [(name, REGISTRY[name].absent) for name in FIGURES]


def test_a_seed_that_emerged_at_its_last_step_is_drawn_below_the_never_row():
    def row(step, steps=600):
        return {"status": "ok", "emergence": {"step": step}, "timing": {"steps": steps},
                "config": {"task": {"sparsity": 2}, "trainer": {"max_steps": 600}}}

    figure = seeds.seed_scatter([("transformer · s=2", [row(600), row(None), row(100, 100)])])
    ax = figure.axes[0]
    emerged, never = (collection.get_offsets()[:, 1] for collection in ax.collections[:2])
    assert sorted(emerged) == [100, 600] and list(never) == [600 * seeds.NEVER_ABOVE]
    assert [t.get_text() for t in ax.get_yticklabels()][-1] == "never"


def test_the_mean_curve_carries_a_stopped_seed_at_its_last_value():
    import numpy as np

    stopped = np.array([[10, 1.0], [20, 0.5]])  # stopped at step 20 (at its emergence)
    running = np.array([[10, 1.0], [20, 0.9], [30, 0.8], [40, 0.7]])
    steps, mean = curves.carried_mean([stopped, running])
    assert list(steps) == [10, 20, 30, 40] and np.allclose(mean, [1.0, 0.7, 0.65, 0.6])


def test_the_heatmap_draws_two_keys_varied_together_with_integer_labels_never_a_diagonal():
    from emergence_bench.reporting.figures.heatmap import heatmap

    def row(task, loss=0.5):
        return {"status": "ok", "metrics": {"final_eval_loss": loss}, "config": {"seed": 0, "task": task}}

    families = [row({"name": "linear_map", "state_size": 10, "sparsity": s}) for s in (1, 2)] + \
               [row({"name": "cellular_automata", "state_size": 8, "rules": r}) for r in (2, 3)]
    assert heatmap(families, None) == (None, None)  # state size is one value per family: no grid
    grid = families + [row({"name": "linear_map", "state_size": 12, "sparsity": s}) for s in (1, 2)]
    figure, used = heatmap(grid, None)
    assert used == ("task.state_size", "task.sparsity")
    ax = figure.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2"]  # not 1.0, 2.0
    assert [t.get_text() for t in ax.get_yticklabels()] == ["10", "12"]


def test_edge_markers_of_a_sweep_axis_lie_inside_the_panel():
    def row(sparsity, seed, step):
        return {"status": "ok", "seed": seed, "emergence": {"step": step}, "plateau": {"end_step": step},
                "timing": {"steps": 1000},
                "config": {"seed": seed, "task": {"name": "linear_map", "sparsity": sparsity},
                           "mixer": {"name": "transformer"}, "trainer": {"max_steps": 1000}}}

    figure = axes.axis_figure([row(s, i, 100 * s) for s in (1, 2, 3) for i in range(3)], "task.sparsity")
    for ax in figure.axes:
        low, high = ax.get_xlim()
        assert low < 1 - 0.1 and high > 3 + 0.1  # room for a marker's half at either end


def test_a_ranking_of_two_budgets_in_one_cell_is_not_drawn_and_the_page_says_why(tmp_path):
    """As `rank` refuses it: the page lists the ranking with rank's reason (the cell and its budgets),
    not the generic one, and draws none of its parts."""
    import json

    from test_rank import BUDGET, ladder_records

    longer = [dict(r, run_id=r["run_id"] + "-long", config={**r["config"], "trainer": {"max_steps": 2 * BUDGET}})
              for r in ladder_records()[:2]]
    for r in ladder_records() + longer:
        (tmp_path / r["run_id"]).mkdir()
        (tmp_path / r["run_id"] / "result.json").write_text(json.dumps(r))
    page = report.write(tmp_path, figures=("ranking",)).read_text()
    assert "<li>ranking: not ranked: the cell a · linear_map sparsity=1 mixes runs of two settings" in page
    assert "<img " not in page
