"""`analyze ablation` (emergence_bench.analysis.ablation) on results folders of known outcome, the
arms two groups as docs/experiments/induction-conv.yaml writes them: 8 seeds a mixer on one task
instance, each mixer with its convolution (width 4) and without it (width 1)."""

import json

import pytest

from emergence_bench.analysis.ablation import FASTER, NO_DIFFERENCE, SLOWER, ablation, to_markdown
from emergence_bench.cli import main
from emergence_bench.config import ConfigError

SEEDS = range(100, 108)
BUDGET = 5000


def row(group: str, mixer: str, seed: int, step: int | None, status: str = "ok") -> dict:
    """A row as a sweep of the yaml writes it (the emergence callback stops a run at its step)."""
    conv = 4 if group == "with-conv" else 1
    return {"schema_version": 3, "run_id": f"induction-{mixer}-seed{seed}-{group}", "status": status, "seed": seed,
            "config": {"seed": seed, "mixer": {"name": mixer, "conv_size": conv},
                       "task": {"name": "induction", "length": 25, "task_seed": 100},
                       "trainer": {"max_steps": BUDGET}},
            "timing": {"steps": BUDGET if step is None else step}, "emergence": {"step": step}}


def write(root, rows) -> None:
    for r in rows:
        group = "with-conv" if r["run_id"].endswith("with-conv") else "without-conv"
        (root / group / r["run_id"]).mkdir(parents=True)
        (root / group / r["run_id"] / "result.json").write_text(json.dumps(r))


def arms(mixer: str, control: list, treatment: list) -> list[dict]:
    """One mixer's runs in both arms, its steps per seed (None: never emerged)."""
    return [row("with-conv", mixer, s, step) for s, step in zip(SEEDS, control)] + \
        [row("without-conv", mixer, s, step) for s, step in zip(SEEDS, treatment)]


EARLY = [1000 + 100 * i for i in range(8)]  # 1000..1700
# mamba fails without its convolution (8/8 against 0/8); gated_deltanet emerges in every run of both
# arms, 500 steps later in every seed pair without it; mlstm emerges in all, later in 4 pairs, earlier in 4.
FAILS = arms("mamba", EARLY, [None] * 8)
LATER = arms("gated_deltanet", EARLY, [s + 500 for s in EARLY])
MIXED = arms("mlstm", EARLY, [s + (300 if i % 2 else -300) for i, s in enumerate(EARLY)])


@pytest.fixture
def folder(tmp_path):
    write(tmp_path, FAILS + LATER + MIXED)
    return tmp_path


def lines(table: dict) -> dict:
    return {line["mixer"]: line for line in table["mixers"]}


def test_a_failing_treatment_a_later_one_and_no_difference(folder):
    table = ablation(folder, "with-conv", "without-conv")
    assert table["family"] == ["gated_deltanet", "mamba", "mlstm"] and table["warnings"] == []
    found = lines(table)
    mamba, gdn, mlstm = found["mamba"], found["gated_deltanet"], found["mlstm"]
    # Fisher: 8/8 against 0/8, two-sided, is 2 / C(16, 8); Holm's smallest of 3 is 3 × that.
    assert (mamba["control"]["emerged"], mamba["treatment"]["emerged"]) == (8, 0)
    assert mamba["fisher_p"] == pytest.approx(2 / 12870) and mamba["holm_p"] == pytest.approx(3 * 2 / 12870)
    assert (mamba["verdict"], mamba["decided_by"]) == (SLOWER, "Fisher")
    assert mamba["control"]["median"] == 1300 and mamba["treatment"]["median"] is None
    assert mamba["sign_p"] is None  # not every run emerged: no sign test
    # All emerge: Fisher cannot tell; the sign test over 8 pairs, all later, is 2 / 2^8.
    assert gdn["fisher_p"] == 1 and (gdn["later"], gdn["earlier"], gdn["pairs"]) == (8, 0, 8)
    assert gdn["sign_p"] == pytest.approx(2 / 256) and (gdn["verdict"], gdn["decided_by"]) == (SLOWER, "sign test")
    assert gdn["treatment"]["median"] == 1800
    assert (mlstm["later"], mlstm["sign_p"], mlstm["verdict"], mlstm["decided_by"]) == (4, 1, NO_DIFFERENCE, None)
    markdown = to_markdown(table)
    assert "| mamba | 8/8, 1300 | 0/8, >5000 | 0.000155 | 0.000466 | - | treatment slower or fails (Fisher) |" \
        in markdown
    assert "| gated_deltanet | 8/8, 1300 | 8/8, 1800 | 1 | 1 | 8/8, 0.00781 | treatment slower or fails (sign test) |" \
        in markdown
    assert "| mlstm | 8/8, 1300 | 8/8, 1300 | 1 | 1 | 4/8, 1 | no difference shown |" in markdown


def test_arms_swapped_read_the_other_way(folder):
    """The treatment emerging more, or sooner, is the opposite finding, not the declared one."""
    found = lines(ablation(folder, "without-conv", "with-conv"))
    assert (found["mamba"]["verdict"], found["gated_deltanet"]["verdict"]) == (FASTER, FASTER)
    assert found["gated_deltanet"]["later"] == 0 and found["mlstm"]["verdict"] == NO_DIFFERENCE


def test_holm_over_the_mixers_in_both_arms_decides_a_verdict(tmp_path):
    """8/8 against 3/8: Fisher's p is 2·C(8,3)/C(16,11) ≈ 0.026. Holm over three mixers (second smallest:
    ×2 = 0.051) shows no difference; with the third mixer in one arm only, the family is two and it does."""
    write(tmp_path, FAILS + arms("lru", EARLY, EARLY[:3] + [None] * 5) + MIXED)
    lru = lines(ablation(tmp_path, "with-conv", "without-conv"))["lru"]
    assert lru["fisher_p"] == pytest.approx(2 * 56 / 4368) and lru["holm_p"] == pytest.approx(4 * 56 / 4368)
    assert lru["verdict"] == NO_DIFFERENCE
    for path in (tmp_path / "without-conv").glob("*mlstm*/result.json"):
        path.unlink()
    table = ablation(tmp_path, "with-conv", "without-conv")
    assert table["family"] == ["lru", "mamba"] and lines(table)["lru"]["holm_p"] == pytest.approx(2 * 56 / 4368)
    assert (lines(table)["lru"]["verdict"], lines(table)["lru"]["decided_by"]) == (SLOWER, "Fisher")
    assert table["warnings"] == ["mixer mlstm has runs in with-conv only: left out (nothing to compare it with)"]
    assert "Holm over the 2 mixer(s) in both arms (lru, mamba)" in to_markdown(table)


def test_an_unpaired_seed_is_left_out_of_the_pairs_and_a_failed_run_counts_as_not_emerged(tmp_path):
    later = [r for r in LATER if r["run_id"] != "induction-gated_deltanet-seed107-without-conv"]
    # mlstm: a run that diverged after it emerged counts as not emerged, as a failed run does.
    mixed = [row("without-conv", "mlstm", 100, 900, "diverged") if r["run_id"] == "induction-mlstm-seed100-without-conv"
             else row("with-conv", "mlstm", 101, None, "failed") if r["run_id"] == "induction-mlstm-seed101-with-conv"
             else r for r in MIXED]
    write(tmp_path, later + mixed)
    table = ablation(tmp_path, "with-conv", "without-conv")
    gdn, mlstm = lines(table)["gated_deltanet"], lines(table)["mlstm"]
    assert (gdn["control"]["runs"], gdn["treatment"]["runs"], gdn["pairs"], gdn["later"]) == (8, 7, 7, 7)
    assert gdn["sign_p"] == pytest.approx(2 / 128) and gdn["verdict"] == SLOWER
    assert (mlstm["control"]["emerged"], mlstm["treatment"]["emerged"], mlstm["sign_p"]) == (7, 7, None)
    assert table["warnings"] == [
        "gated_deltanet: seed 107, task_seed 100 has a run in with-conv only: left out of the seed pairs "
        "(Fisher's test counts it)",
        "mlstm in with-conv: induction-mlstm-seed101-with-conv (failed): counted as not emerged",
        "mlstm in without-conv: induction-mlstm-seed100-without-conv (diverged): counted as not emerged"]


def test_bad_input_is_one_line_naming_it(folder, tmp_path):
    with pytest.raises(ConfigError, match=r"no group 'with_conv' in .*: its groups are with-conv, without-conv"):
        ablation(folder, "with_conv", "without-conv")
    with pytest.raises(ConfigError, match="both 'with-conv'"):
        ablation(folder, "with-conv", "with-conv")
    with pytest.raises(ValueError, match="is not a results folder"):
        ablation(tmp_path / "nowhere", "with-conv", "without-conv")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no result rows"):
        ablation(tmp_path / "empty", "with-conv", "without-conv")
    apart = tmp_path / "apart"
    write(apart, [r for r in FAILS if "with-conv" in r["run_id"]] + [r for r in MIXED if "without" in r["run_id"]])
    with pytest.raises(ConfigError, match="no mixer has runs in both with-conv and without-conv: with-conv holds "
                                          "mamba, without-conv mlstm"):
        ablation(apart, "with-conv", "without-conv")
    twice = dict(FAILS[0], run_id="induction-mamba-seed100-again-with-conv")
    write(folder, [twice])
    with pytest.raises(ConfigError, match="group with-conv holds two runs of mixer mamba at seed 100, task_seed 100"):
        ablation(folder, "with-conv", "without-conv")


def test_the_command_prints_and_writes_its_table_and_refuses_bad_input(folder, tmp_path, capsys):
    argv = ["analyze", "ablation", str(folder), "--control", "with-conv", "--treatment", "without-conv"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert (folder / "ablation.md").read_text() == out and "| mamba | 8/8, 1300 | 0/8, >5000 |" in out
    assert f"wrote {folder / 'ablation.md'} and {folder / 'ablation.json'}" in err
    written = json.loads((folder / "ablation.json").read_text())
    assert written["control"] == "with-conv" and written["family"] == ["gated_deltanet", "mamba", "mlstm"]
    assert [m["verdict"] for m in written["mixers"]] == [SLOWER, SLOWER, NO_DIFFERENCE]
    assert main([*argv[:-1], "no-such-group"]) == 2
    assert capsys.readouterr().err.startswith("error: no group 'no-such-group'")
    (tmp_path / "empty").mkdir()
    assert main(["analyze", "ablation", str(tmp_path / "empty"), "--control", "a", "--treatment", "b"]) == 2
    assert "holds no result rows" in capsys.readouterr().err
    try:
        code = main(argv[:-2])  # no --treatment
    except SystemExit as exit:
        code = exit.code
    assert code == 2 and "--treatment" in capsys.readouterr().err
