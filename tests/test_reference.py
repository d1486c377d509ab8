"""Shipped reference results (emergence_bench.reporting.reference): ranking a plugin against them, and
refusing them, in one line, where they do not apply."""

import copy
import gzip
import json

import pytest

from emergence_bench.cli import main
from emergence_bench.config import ConfigError
from emergence_bench.reporting import rank, reference


def row(mixer, sparsity, seed, emerged, torch="2.13.0", max_steps=600, lr=1e-3):
    """A schema 3 row whose held plateau and first drop end where it emerged."""
    return {"schema_version": 3, "run_id": f"{mixer}-{sparsity}-{seed}", "status": "ok", "seed": seed, "error": None,
            "parameters": 100, "versions": {"torch": torch},
            "config": {"seed": seed, "task": {"name": "linear_map", "sparsity": sparsity, "state_size": 10},
                       "mixer": {"name": mixer}, "model": {"d_model": 32}, "optim": {"lr": lr, "weight_decay": 0.01},
                       "trainer": {"max_steps": max_steps}, "callbacks": {}},
            "timing": {"steps": emerged or max_steps}, "emergence": {"step": emerged},
            "plateau": {"end_step": emerged, "censored": emerged is None, "worth": True, "first_drop_step": emerged,
                        "first_drop_censored": emerged is None}}


def built_in_rows():
    """Two built-in mixers on a 2-rung ladder, 4 seeds: transformer solves both, lru only the first."""
    return [row("transformer", s, seed, 100 * s) for s in (1, 2) for seed in range(4)] + \
           [row("lru", s, seed, 200 if s == 1 else None, lr=3e-3) for s in (1, 2) for seed in range(4)]


def a_reference(rows=None):
    rows = rows or built_in_rows()
    tables = [{"mixer": "lru", "group": "lm", "family": "linear_map", "chosen": {"optim.lr": 3e-3}, "grid": {},
               "points": [], "edge": None}]
    return {"format": reference.FORMAT, "schema_version": 3, "preset": "toy", "ladder": "toy-v1",
            "tuned_keys": ["optim.lr"], "commit": "abc", "versions": {"torch": "2.13.0"}, "machine": {"cpus": 2},
            "created": "2026-12-04",
            "families": reference.families(rows, ["optim.lr"]), "tuning": tables,
            "rows": [reference.compact(r) for r in rows]}


def write_reference(path, data):
    path.write_bytes(gzip.compress(json.dumps(data).encode()))
    return str(path)


def results(tmp_path, rows):
    for r in rows:
        folder = tmp_path / "runs" / "linear-map" / r["run_id"]
        folder.mkdir(parents=True)
        (folder / "result.json").write_text(json.dumps(r))
    return tmp_path / "runs"


def plugin(**kw):
    return [row("my_mixer", s, seed, 150 if s == 1 else (300 if seed < 2 else None), **kw)
            for s in (1, 2) for seed in range(4)]


def test_a_plugin_is_ranked_against_the_reference_without_its_rows_being_retrained(tmp_path):
    file = write_reference(tmp_path / "ref.json.gz", a_reference())
    ranked, markdown = rank.write(results(tmp_path, plugin()), reference_name=file)
    table = ranked["ranking"].set_index("mixer")
    assert sorted(table.index) == ["lru", "my_mixer", "transformer"]
    assert table.loc["transformer", "score"] == 1.0 and table.loc["my_mixer", "score"] == 0.75
    assert table.loc["lru", "score"] == 0.5
    assert ranked["lr"]["lru"] == {"linear_map": [3e-3]} and ranked["reference"]["ladder"] == "toy-v1"
    assert [t["mixer"] for t in ranked["tuning"]] == ["lru"]  # the reference's table behind lru's lr
    assert markdown.startswith("Ranked against reference toy (ladder toy-v1, commit abc")


def test_the_users_own_run_of_a_built_in_mixer_replaces_the_references():
    ours = [row("lru", s, seed, 50) for s in (1, 2) for seed in range(4)]
    rows = reference.rows(a_reference(), without={"lru"})
    assert {r["config"]["mixer"]["name"] for r in rows} == {"transformer"}
    assert all(r["versions"] == {"torch": "2.13.0"} and r["schema_version"] == 3 for r in rows)
    assert reference.refusal(a_reference(), ours) is None


@pytest.mark.parametrize("change, says", [
    (dict(torch="3.0.1"), "your runs used torch 3.x, another major version"),
    (dict(max_steps=2400), "trainer.max_steps=2400, its ladder 600: another ladder version"),
])
def test_a_reference_that_does_not_apply_is_refused_in_one_line(tmp_path, change, says, capsys):
    ref = a_reference()
    assert says in reference.refusal(ref, plugin(**change))
    file = write_reference(tmp_path / "ref.json.gz", ref)
    folder = results(tmp_path, plugin(**change))
    assert main(["rank", str(folder), "--reference", file]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: reference toy (ladder toy-v1, torch 2.13.0)")
    assert says in err
    assert not (folder / "rank.md").exists()


def test_one_rung_of_the_ladder_is_ranked_against_the_reference(tmp_path):
    one_rung = [r for r in plugin() if r["config"]["task"]["sparsity"] == 2]
    assert reference.refusal(a_reference(), one_rung) is None
    file = write_reference(tmp_path / "ref.json.gz", a_reference())
    ranked, _ = rank.write(results(tmp_path, one_rung), reference_name=file)
    assert sorted(ranked["ranking"]["mixer"]) == ["lru", "my_mixer", "transformer"]


def test_a_rung_or_family_the_reference_lacks_is_refused():
    extra_rung = [row("my_mixer", 3, seed, None) for seed in range(4)] + plugin()
    assert "rung(s) [3] it lacks" in reference.refusal(a_reference(), extra_rung)
    other = copy.deepcopy(plugin())
    for r in other:
        r["config"]["task"]["name"] = "dyck"
    assert "it has no dyck family" in reference.refusal(a_reference(), other)


def test_an_unknown_reference_name_lists_what_there_is():
    with pytest.raises(ConfigError, match="no reference 'nope'"):
        reference.load("nope")


@pytest.mark.slow  # ~11 s: resolves the whole tuned preset (make test stays under 4 minutes)
def test_the_builtin_reference_is_of_the_frozen_tuned_ladder():
    from emergence_bench.execution.sweep_spec import load_sweep

    ref = reference.load(reference.BUILTIN)
    sweep = load_sweep(reference.BUILTIN_PRESET)
    assert ref["ladder"] == sweep.ladder and ref["tuned_keys"] == sorted(sweep.tuning.grid)
    # Every row is a run the frozen preset makes (same id), and every run of the preset has its row.
    assert sorted(r["run_id"] for r in ref["rows"]) == sorted(c.run_id() for _, c in sweep.runs())
    assert ref["commit"] and ref["versions"]["torch"] and ref["machine"]
    assert {(t["mixer"], t["group"]) for t in ref["tuning"]} == {(m, g) for m in sweep.tuned for g in sweep.tuned[m]}
    assert all(t["chosen"] == sweep.tuned[t["mixer"]][t["group"]] for t in ref["tuning"])


def test_tuned_v2_runs_are_refused_against_the_builtin_v3_reference_in_one_line(tmp_path, capsys):
    """The shipped tuned-v2 rows of one built-in mixer, as a user's runs: the builtin reference is
    ladder v3's, so rank refuses them in one line naming what differs; against their own ladder's
    shipped reference they rank."""
    v2, v3 = reference.load("standard-cpu-v2-tuned"), reference.load(reference.BUILTIN)
    assert v2["ladder"] == "v2-tuned" and v3["ladder"] == "v3-tuned"
    builtin = {"transformer", "mlp_mixer", "mamba", "gated_deltanet", "rwkv7", "mlstm", "lru"}
    ours = reference.rows(v2, without=builtin - {"lru"})
    assert {r["config"]["mixer"]["name"] for r in ours} == {"lru"} and len(ours) == 96
    says = reference.refusal(v3, ours)
    assert says is not None and ("another ladder version" in says or "ladder varies" in says)
    assert reference.refusal(v2, ours) is None
    folder = tmp_path / "runs"
    for r in ours:
        (folder / r["run_id"]).mkdir(parents=True)
        (folder / r["run_id"] / "result.json").write_text(json.dumps(r))
    assert main(["rank", str(folder), "--reference", "builtin"]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "ladder v3-tuned" in err and not (folder / "rank.md").exists()


def tuning_table(mixer, lr, areas):
    """A tuning table over optim.lr ∈ {1e-3, 3e-3} on the linear map, its choice at ``lr``."""
    points = [{"values": {"optim.lr": x}, "area": a, "area_low": max(0.0, a - 0.2), "area_high": min(1.0, a + 0.2)}
              for x, a in zip((1e-3, 3e-3), areas)]
    return {"mixer": mixer, "group": "lm", "family": "linear_map", "chosen": {"optim.lr": lr},
            "grid": {"optim.lr": [1e-3, 3e-3]}, "points": points, "edge": None, "rung_axis": "task.sparsity",
            "rungs": [2]}


def test_a_plugins_report_shows_the_ranking_figures_beside_the_reference(tmp_path):
    """One plugin's folder: `report --reference` (or the reference its rank.json names) draws the
    ranking, the tuning curves (the plugin's own table beside the reference's), survival and the
    forest; without a reference the ranking is absent, naming --reference."""
    from emergence_bench.reporting import report
    from emergence_bench.results.store import write_tables

    data = a_reference()
    data["tuning"] = [tuning_table("lru", 3e-3, (0.25, 0.5))]
    file = write_reference(tmp_path / "ref.json.gz", data)
    folder = results(tmp_path, plugin())
    write_tables(folder / "tuning", [tuning_table("my_mixer", 1e-3, (0.75, 0.5))])
    drawn = ("ranking", "tuning-curves", "survival", "forest")

    ranking = {"figures": ("ranking",), "maps": 0}  # the ranking and its parts
    alone = report.write(folder, out=tmp_path / "alone.html", **ranking)
    assert "report DIR --reference builtin" in alone.read_text() and not (tmp_path / "alone_figures").exists()
    page = report.write(folder, out=tmp_path / "given.html", reference=file, **ranking)
    assert all((tmp_path / "given_figures" / f"{name}.png").is_file() for name in drawn)
    assert "<h2" in page.read_text() and "Tuning curves" in page.read_text()
    rank.write(folder, reference_name=file)  # rank.json names the reference: report ranks against it too
    report.write(folder, out=tmp_path / "saved.html", **ranking)
    assert all((tmp_path / "saved_figures" / f"{name}.png").is_file() for name in drawn)
    with pytest.raises(ConfigError, match="no reference 'nosuch'"):
        report.write(folder, out=tmp_path / "bad.html", reference="nosuch", **ranking)


def test_a_reference_rank_json_names_but_that_is_gone_leaves_the_report_ranking_its_own_rows(tmp_path):
    from emergence_bench.reporting.rows_to_rank import rows_to_rank

    file = write_reference(tmp_path / "ref.json.gz", a_reference())
    folder = results(tmp_path, plugin())
    rank.write(folder, reference_name=file)
    (tmp_path / "ref.json.gz").unlink()
    rows, ref, axes = rows_to_rank(plugin(), folder, None)
    assert ref is None and len(rows) == len(plugin()) and axes == {"linear_map": "task.sparsity"}
    with pytest.raises(ConfigError):
        rows_to_rank(plugin(), folder, file)  # named on the command line: refused


def test_a_reference_of_schema_2_reads_its_plateau_as_the_first_drop():
    """The references shipped before schema 3 kept the first drop as the plateau's ``end_step``: read,
    it is the first drop, and the held plateau is absent (not "still held")."""
    data = a_reference()
    del data["schema_version"]
    for r in data["rows"]:
        r["plateau"] = {"end_step": r["plateau"]["first_drop_step"], "censored": r["plateau"]["first_drop_censored"]}
    rows = reference.rows(data)
    assert all(r["schema_version"] == 3 for r in rows)
    assert all(r["plateau"]["first_drop_step"] == r["emergence"]["step"] and "end_step" not in r["plateau"]
               for r in rows)


def test_a_reference_keeps_each_rows_curves_so_rank_reads_the_built_ins_abruptness(tmp_path):
    """The compact rows keep the per-cell eval and train-loss curves (rounded to 4 digits), so the
    reference's mixers get abrupt cells and plateaus in `rank`, not `-`."""
    import math

    steps = list(range(20, 601, 20))
    drop = [math.log(2) / (1 + math.exp((t - 300) / 8)) for t in steps]  # held at chance, then a sharp drop
    curved = [{**r, "task_facts": {"chance_loss": math.log(2), "floor_loss": 0.0},
               "curves": {"eval_cells": [[t, [y, y]] for t, y in zip(steps, drop)],
                          "train_loss": [[t, y] for t, y in zip(steps, drop)],
                          "eval": [[t, y] for t, y in zip(steps, drop)]}}
              for r in built_in_rows()]
    data = a_reference(curved)
    kept = data["rows"][0]
    assert set(kept["curves"]) == {"eval_cells", "train_loss"} and kept["task_facts"]["chance_loss"] == math.log(2)
    assert kept["curves"]["train_loss"][3][1] == float(f"{drop[3]:.4g}")  # rounded, steps exact
    file = write_reference(tmp_path / "ref.json.gz", data)
    _, markdown = rank.write(results(tmp_path, plugin()), reference_name=file)
    abruptness = {line.split(" | ")[0]: line for line in markdown.splitlines() if "(0.06 dec; share" in line}
    assert set(abruptness) == {"| transformer", "| lru"}  # the plugin's rows here hold no curves: `-`
    assert "16/16" in abruptness["| transformer"]  # 2 rungs x 4 seeds x 2 cells, every one abrupt
