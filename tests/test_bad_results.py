"""A results folder with a bad result.json: named, counted as unfinished, the rest still aggregated."""

import json

import pytest
from test_rank import ladder_records

from emergence_bench.reporting import leaderboard
from emergence_bench.results.store import UnreadableResult, load_records, read_result


def folder_with(tmp_path, bad: dict[str, str]) -> None:
    """The ranking test's 18 rows, plus run folders holding the given bad texts."""
    for r in ladder_records():
        (tmp_path / r["run_id"]).mkdir()
        (tmp_path / r["run_id"] / "result.json").write_text(json.dumps({"schema_version": 2, **r}))
    for name, text in bad.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "result.json").write_text(text)


BAD = {"truncated": '{"schema_version": 2, "run_id": "x", "sta', "not-a-row": "[1, 2]",
       "old-schema": json.dumps({"schema_version": 1, "run_id": "y", "status": "ok", "config": {}})}


def test_each_bad_file_is_named_and_the_rest_aggregated(tmp_path, capsys):
    folder_with(tmp_path, BAD)
    records = load_records(tmp_path)
    assert len(records) == 18
    err = capsys.readouterr().err
    for name in BAD:
        assert f"{tmp_path / name / 'result.json'}" in err
    assert "not readable JSON" in err and "not a result row" in err and "schema_version 1" in err
    table, _ = leaderboard.write(tmp_path)
    assert table["seeds"].sum() == 18


def test_strict_turns_a_bad_file_into_an_error(tmp_path):
    folder_with(tmp_path, {"truncated": BAD["truncated"]})
    with pytest.raises(UnreadableResult, match="truncated"):
        load_records(tmp_path, strict=True)


def test_a_resumed_sweep_sees_a_corrupt_result_as_unfinished(tmp_path, capsys):
    folder_with(tmp_path, {"truncated": BAD["truncated"]})
    assert read_result(tmp_path / "truncated") is None
    assert "counted as unfinished" in capsys.readouterr().err


def test_written_files_follow_the_umask_like_any_other_file(tmp_path):
    import os

    from emergence_bench.results.store import write_json

    previous = os.umask(0o022)
    try:
        write_json(tmp_path / "a" / "result.json", {"x": 1})
        os.umask(0o077)
        write_json(tmp_path / "private.json", {"x": 1})
    finally:
        os.umask(previous)
    assert (tmp_path / "a" / "result.json").stat().st_mode & 0o777 == 0o644  # a colleague can read it
    assert (tmp_path / "private.json").stat().st_mode & 0o777 == 0o600


def test_an_empty_or_all_corrupt_folder_is_an_error_and_its_files_are_left_alone(tmp_path):
    (tmp_path / "leaderboard.md").write_text("an earlier table\n")
    with pytest.raises(ValueError, match="no readable results"):
        leaderboard.write(tmp_path)
    for name, text in BAD.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "result.json").write_text(text)
    with pytest.raises(ValueError, match="no readable results"):
        leaderboard.write(tmp_path)
    assert (tmp_path / "leaderboard.md").read_text() == "an earlier table\n"


def test_a_typo_in_over_is_named_with_the_closest_key_and_overwrites_nothing(tmp_path):
    folder_with(tmp_path, {})
    leaderboard.write(tmp_path)
    before = (tmp_path / "leaderboard.md").read_text()
    with pytest.raises(ValueError, match="task.sparsty.*did you mean 'task.sparsity'"):
        leaderboard.write(tmp_path, over=("seed", "task.sparsty"))
    assert (tmp_path / "leaderboard.md").read_text() == before
    table, _ = leaderboard.write(tmp_path, over=("seed", "task.sparsity"))
    assert len(table) == 2  # one row per mixer once the sparsity is aggregated over


def test_rank_refuses_a_folder_without_a_finished_run_and_an_unknown_family(tmp_path):
    from emergence_bench.config import ConfigError
    from emergence_bench.reporting import rank

    folder_with(tmp_path, {})
    with pytest.raises(ConfigError, match="no task family 'nosuch'.*families: linear_map"):
        rank.write(tmp_path, {"nosuch": "task.x"})
    failed = tmp_path / "failed"
    failed.mkdir()
    for i, r in enumerate(ladder_records()[:4]):
        (failed / str(i)).mkdir()
        status = "failed" if i % 2 else "diverged"
        (failed / str(i) / "result.json").write_text(json.dumps({"schema_version": 2, **r, "status": status}))
    with pytest.raises(ConfigError, match=r"finished ok \(2 diverged, 2 failed\)"):
        rank.write(failed)


def test_rank_that_cannot_read_its_folder_leaves_its_earlier_files_alone(tmp_path):
    from emergence_bench.config import ConfigError
    from emergence_bench.reporting import rank

    folder_with(tmp_path, {})
    (tmp_path / "rank.md").write_text("an earlier ranking\n")
    with pytest.raises(ConfigError, match="no task family 'nosuch'"):
        rank.write(tmp_path, {"nosuch": "task.x"})
    (tmp_path / "corrupt").mkdir()
    (tmp_path / "corrupt" / "result.json").write_text('{"schema_version": 2, "run_id": "x", "sta')
    with pytest.raises(ValueError, match="corrupt"):
        rank.write(tmp_path, strict=True)
    with pytest.raises(ValueError, match="corrupt"):
        leaderboard.write(tmp_path, strict=True)
    assert (tmp_path / "rank.md").read_text() == "an earlier ranking\n"
    assert not (tmp_path / "leaderboard.md").exists()


@pytest.mark.parametrize("key, value", [("metrics", None), ("emergence", None), ("timing", [1]), ("config", "x"),
                                        ("status", "finished")])
def test_a_row_with_a_section_that_is_not_one_is_named_and_counts_as_no_seed(tmp_path, capsys, key, value):
    """A finished row whose metrics (or another section) is null was counted as a seed whose numbers
    were missing: the final loss averaged over fewer runs than the seeds column said, a run counted
    as never emerged. It is named and left out (as a corrupt file is), so the leaderboard and rank
    count only the seeds they read."""
    from emergence_bench.reporting import rank

    records = ladder_records()
    bad = {**records[0], "run_id": "bad", "seed": 9, key: value}
    folder_with(tmp_path, {"bad": json.dumps(bad)})
    err = capsys.readouterr().err
    assert not err
    assert len(load_records(tmp_path)) == len(records)
    line = capsys.readouterr().err
    assert str(tmp_path / "bad" / "result.json") in line and (key if key != "status" else "'finished'") in line
    table, _ = leaderboard.write(tmp_path)
    assert table["seeds"].sum() == len(records)
    ranked, _ = rank.write(tmp_path)
    assert ranked["cells"]["seeds"].sum() == len(records)
    with pytest.raises(UnreadableResult, match="bad"):
        load_records(tmp_path, strict=True)
