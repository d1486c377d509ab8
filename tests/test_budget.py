"""`analyze budget` (emergence_bench.analysis.budget) on a sweep folder of known clocks: a tuning
stage and a ranking stage, seed-parallel groups whose seeds end at known seconds, and a lone run."""

import json

import pytest

from emergence_bench.analysis.budget import budget, clock, to_markdown
from emergence_bench.cli import main


def row(run_id: str, mixer: str, seconds: float, emerged: int | None, group: list[str] | None = None,
        pruned: bool = False) -> dict:
    r = {"schema_version": 3, "run_id": run_id, "status": "ok", "seed": 0,
         "config": {"seed": 0, "mixer": {"name": mixer}, "task": {"name": "induction"}, "trainer": {"max_steps": 5000}},
         "timing": {"steps": 5000, "train_seconds": seconds - 10.0, "eval_seconds": 10.0,
                    "steps_per_second": 5000 / seconds},
         "emergence": {"step": emerged}}
    if group:
        r["seed_parallel"] = {"k": len(group), "group": group}
    if pruned:
        r["pruned"] = {"at": 1000}
    return r


def write(folder, rows) -> None:
    for r in rows:
        (folder / r["run_id"]).mkdir(parents=True)
        (folder / r["run_id"] / "result.json").write_text(json.dumps(r))


@pytest.fixture
def sweep(tmp_path):
    ids = ["t0", "t1", "t2", "t3"]
    # A tuning group of 4 seeds: two emerge (ending at 100 s and 200 s), two go the whole 400 s.
    write(tmp_path / "tuning" / "induction", [row("t0", "transformer", 100, 500, ids),
                                              row("t1", "transformer", 200, 900, ids),
                                              row("t2", "transformer", 400, None, ids),
                                              row("t3", "transformer", 400, None, ids)])
    # The ranking: a group whose seeds all emerge, a pruned lone run that never did.
    pair = ["r0", "r1"]
    write(tmp_path / "induction", [row("r0", "mamba", 50, 100, pair), row("r1", "mamba", 80, 200, pair),
                                   row("lone", "lru", 300, None, pruned=True)])
    return tmp_path


def test_the_budget_counts_each_group_once_and_its_censored_tail(sweep):
    table = budget(sweep, workers=2)
    lines = {(line["stage"], line["mixer"]): line for line in table["lines"]}
    tuning = lines["tuning", "transformer"]
    assert (tuning["groups"], tuning["runs"], tuning["emerged"]) == (1, 4, 2)
    assert tuning["seconds"] == 400 and tuning["tail_seconds"] == 200  # after the last emerged seed ended
    mamba, lru = lines["ranking", "mamba"], lines["ranking", "lru"]
    assert (mamba["seconds"], mamba["tail_seconds"], mamba["groups"]) == (80, 0, 1)
    assert (lru["seconds"], lru["tail_seconds"], lru["pruned"]) == (300, 300, 1)
    assert table["stages"]["ranking"] == {"seconds": 380, "tail_seconds": 300, "runs": 3, "wall_seconds_at_least": 190}
    assert table["stages"]["tuning"]["runs"] == 4
    markdown = to_markdown(table)
    assert "| tuning | induction | transformer | 1 | 4 | 2 | 0 | 0:07 | 50% |" in markdown
    assert "- ranking: 3 runs, 0:06 of worker time (79% of it the censored tail)" in markdown


def test_a_folder_with_only_a_tuning_stage_and_bad_input(sweep, tmp_path):
    only_tuning = tmp_path / "only"
    (only_tuning / "tuning").mkdir(parents=True)
    (sweep / "tuning").rename(only_tuning / "tuning")
    (only_tuning / "tuning" / "induction").rename(only_tuning / "tuning" / "g")
    assert set(budget(only_tuning)["stages"]) == {"tuning"}
    with pytest.raises(ValueError, match="workers must be ≥ 1"):
        budget(sweep, workers=0)
    assert clock(59 * 60 + 31) == "1:00" and clock(3 * 3600 + 5 * 60) == "3:05"


def test_the_command_writes_its_table_and_refuses_an_empty_folder(sweep, tmp_path, capsys):
    assert main(["analyze", "budget", str(sweep), "--assume-workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "| ranking | induction | lru | 1 | 1 | 0 | 1 | 0:05 | 100% |" in out
    assert "at least 0:06 of wall time on 1 worker(s)" in out
    assert (sweep / "budget.md").read_text() == out
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["analyze", "budget", str(empty)]) == 2
    assert "holds no result rows" in capsys.readouterr().err
