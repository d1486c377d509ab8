"""Two rankings of one ladder compared (emergence_bench.reporting.reproduction): the cells that differ
beyond chance, the tiers the two order oppositely, and `rank DIR --against OTHER`."""

import json

import pytest

from emergence_bench.cli import main
from emergence_bench.config import ConfigError
from emergence_bench.reporting import reproduction

SEEDS = range(8)


def row(mixer, sparsity, seed, emerged, max_steps=600, task="linear_map"):
    """The smallest result row a ranking reads (tests/test_reference.py's shape)."""
    return {"schema_version": 2, "run_id": f"{mixer}-{task}-{sparsity}-{seed}", "status": "ok", "seed": seed,
            "error": None, "parameters": 100, "versions": {"torch": "2.13.0"},
            "config": {"seed": seed, "task": {"name": task, "sparsity": sparsity, "state_size": 10},
                       "mixer": {"name": mixer}, "model": {"d_model": 32}, "optim": {"lr": 1e-3, "weight_decay": 0.01},
                       "trainer": {"max_steps": max_steps}, "callbacks": {}},
            "timing": {"steps": emerged or max_steps}, "emergence": {"step": emerged}, "plateau": {"end_step": emerged}}


def ladder(seeds=SEEDS, lru_hard=None, step=100):
    """Transformer solves both rungs; lru the first only (``lru_hard``: its emergence steps on the second)."""
    return [row("transformer", s, seed, step * s) for s in (1, 2) for seed in seeds] + \
           [row("lru", s, seed, 200 if s == 1 else (lru_hard or {}).get(seed)) for s in (1, 2) for seed in seeds]


def results(folder, rows):
    for r in rows:
        run = folder / r["run_id"]
        run.mkdir(parents=True)
        (run / "result.json").write_text(json.dumps(r))
    return folder


def test_identical_sets_differ_nowhere_and_agree_on_every_tier():
    comparison = reproduction.compare(ladder(), ladder())
    summary = comparison["summary"]
    assert (summary["cells"], summary["tested"], summary["differing"], summary["differing_holm"]) == (4, 4, 0, 0)
    assert summary["success_count_changed"] == 0 and summary["median_abs_median_shift"] == 0
    assert summary["expected_by_chance_at_most"] == pytest.approx(0.2)
    assert comparison["disagreements"] == {"first": [], "second": []}
    assert all(c["p"] == 1.0 for c in comparison["cells"])
    assert comparison["only_first"] == comparison["only_second"] == []
    assert [(r["mixer"], r["first_rank"], r["second_rank"]) for r in comparison["ranking"]] == \
           [("transformer", 1, 1), ("lru", 2, 2)]


def test_a_cell_that_goes_from_all_to_none_is_counted_and_named():
    first = ladder(lru_hard={seed: 300 for seed in SEEDS})  # lru solves the second rung in every seed here
    comparison = reproduction.compare(first, ladder())
    summary = comparison["summary"]
    assert (summary["differing"], summary["differing_holm"], summary["success_count_changed"]) == (1, 1, 1)
    assert summary["one_median_reached"] == 1 and summary["both_medians"] == 3
    (cell,) = [c for c in comparison["cells"] if c["p"] < 0.05]
    assert (cell["mixer"], cell["rung"], cell["first"]["emerged"], cell["second"]["emerged"]) == ("lru", 2, 8, 0)
    assert cell["p"] == pytest.approx(2 / 12870)  # the two extreme tables of C(16, 8)
    assert (cell["first"]["median_emergence_step"], cell["second"]["median_emergence_step"]) == (300, None)
    text = reproduction.render(comparison, "a", "b")
    assert "1 of 4 cells differ at p < 0.05" in text and "at most 4·0.05 = 0.2 expected by chance" in text
    assert "lru linear_map task.sparsity=2 (8/8 vs 0/8, p = 0.00016)" in text
    assert "| linear_map | task.sparsity=2 | lru | 8/8 | 0/8 | 0.00016 | 0.00062 | 300 | >600 |" in text
    assert "| lru | 1 | 1.00 | 2 | 0.50 |\n| transformer | 1 (tie) | 1.00 | 1 | 1.00 |" in text  # tied in a only


def test_two_mixers_that_swap_order_give_both_disagreement_pairs():
    swapped = [row("transformer", s, seed, 100 if s == 1 else None) for s in (1, 2) for seed in SEEDS] + \
              [row("lru", s, seed, 200) for s in (1, 2) for seed in SEEDS]
    comparison = reproduction.compare(ladder(), swapped)
    assert comparison["disagreements"] == {"first": [["transformer", "lru"]], "second": [["lru", "transformer"]]}
    assert [(r["mixer"], r["first_rank"], r["first_score"], r["second_rank"], r["second_score"])
            for r in comparison["ranking"]] == [("transformer", 1, 1.0, 2, 0.5), ("lru", 2, 0.5, 1, 1.0)]
    assert [(a["mixer"], a["first_area"], a["second_area"]) for a in comparison["areas"]] == \
           [("lru", 0.5, 1.0), ("transformer", 1.0, 0.5)]
    assert comparison["summary"]["differing"] == 2


def test_a_cell_only_one_set_has_is_named_not_compared():
    extra = [row("mamba", s, seed, 50) for s in (1, 2) for seed in SEEDS]
    comparison = reproduction.compare(ladder() + extra, ladder())
    assert comparison["summary"]["cells"] == 4
    assert comparison["only_first"] == ["mamba linear_map task.sparsity=1", "mamba linear_map task.sparsity=2"]


def test_sets_with_no_common_cell_are_refused():
    other = [row("mamba", s, seed, 50, task="associative_recall") for s in (1, 2) for seed in SEEDS]
    with pytest.raises(ConfigError, match="share no cell"):
        reproduction.compare(ladder(), other)


def test_rank_against_writes_the_comparison_beside_the_ranking(tmp_path, capsys):
    first = results(tmp_path / "seeds-0-7", ladder(step=100))
    second = results(tmp_path / "seeds-8-15", ladder(seeds=range(8, 16), step=120))
    assert main(["rank", str(first), "--against", str(second)]) == 0
    out = capsys.readouterr().out
    assert out.index("## Ranking") < out.index(f"## Reproduction: {first} against {second}")
    assert "0 of 4 cells differ at p < 0.05" in out and "0 pairs ordered above" in out
    assert "median absolute difference 20 steps over the 3 cells where both reached a median" in out
    written = (first / "reproduction.md").read_text()
    assert written in out and (first / "rank.md").is_file()
    saved = json.loads((first / "reproduction.json").read_text())
    assert saved["second"] == str(second) and saved["summary"]["cells"] == 4
    assert not list(first.glob(".*.tmp"))  # written atomically: no temporary file left


def test_rank_against_a_folder_with_no_common_cell_fails_in_one_line(tmp_path, capsys):
    first = results(tmp_path / "a", ladder())
    second = results(tmp_path / "b", [row("mamba", s, seed, 50, task="associative_recall")
                                      for s in (1, 2) for seed in SEEDS])
    assert main(["rank", str(first), "--against", str(second)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: the two result sets share no cell") and "mamba associative_recall" in err[-1]
    assert not (first / "reproduction.md").exists()


def test_rank_against_a_missing_folder_fails_in_one_line(tmp_path, capsys):
    first = results(tmp_path / "a", ladder())
    assert main(["rank", str(first), "--against", str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err.strip() == f"error: no such results directory: {tmp_path / 'nowhere'}"
    assert not (first / "rank.md").exists()
