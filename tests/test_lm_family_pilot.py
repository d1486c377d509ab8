"""The induction-head pilot: the law's prediction, the stop rule, head scores on the fixed probe at
every context, a configuration stopped and resumed, the command end to end on tiny models, and its
figure. Nothing is downloaded (a tiny corpus of its own)."""

import json
import math
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
from interrupted_training import train_interrupted
from test_lm_family import LINES  # noqa: E402

from emergence_bench.analysis import head_scores, lm_pilot, pythia  # noqa: E402
from emergence_bench.analysis.corpus import train_tokenizer  # noqa: E402
from emergence_bench.analysis.lm_family import FamilyConfig, lr_factor, model_folder, neox_config  # noqa: E402
from emergence_bench.cli import main as cli_main  # noqa: E402

PLAN = Path(__file__).parents[1] / "docs" / "experiments" / "lm-pilot.yaml"


@pytest.fixture(scope="module")
def tiny_corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpus")
    for i in range(3):
        (folder / f"work{i}.txt").write_text("\n\n".join(LINES[i:] + LINES[:i]) * 6)
    return folder


def tiny_plan(path: Path, corpus: Path, **arms) -> Path:
    """A plan of tiny configurations (context 32: the smallest the fixed probe fits)."""
    import yaml

    base = {"corpus": str(corpus), "vocab_size": 300, "hidden_size": 32, "layers": 2, "heads": 2, "warmup": 2,
            "checkpoints_per_octave": 2, "eval_fraction": 0.2}
    path.write_text(yaml.safe_dump({"name": "tiny", "seed": 7, "base": base,
                                    "arms": arms or {"c32-b2": {"context": 32, "batch_size": 2}}}))
    return path


def test_the_law_predicts_the_issues_numbers_and_scales_with_the_root_of_batch_times_context():
    assert lm_pilot.predicted_tokens(16, 256) == pytest.approx(32.08e6, rel=1e-3)  # "about 32 M tokens"
    assert lm_pilot.predicted_tokens(16, 64) == pytest.approx(16.04e6, rel=1e-3)
    assert lm_pilot.predicted_tokens(8, 32) == pytest.approx(8.02e6, rel=1e-3)
    assert lm_pilot.predicted_tokens(16, 32) / lm_pilot.predicted_tokens(8, 32) == pytest.approx(math.sqrt(2))
    assert lm_pilot.budget_steps(FamilyConfig(batch_size=8, context=32)) == math.ceil(2 * 8.01899573803636e6 / 256)
    with pytest.raises(ValueError, match="batch and a context"):
        lm_pilot.predicted_tokens(0, 32)


def test_the_stop_rule_stops_at_the_threshold_or_at_twice_the_prediction():
    threshold, n = lm_pilot.INDUCTION_FORMED, 1_000_000
    assert threshold == 0.3 and lm_pilot.INDUCTION_FORMED > head_scores.uniform_scores(head_scores.PROBE_LENGTH)[
        "induction"] * 5
    assert lm_pilot.stop_reason(threshold, 0, n) == "formed"
    assert lm_pilot.stop_reason(math.nextafter(threshold, 0), 2 * n - 1, n) is None
    assert lm_pilot.stop_reason(math.nextafter(threshold, 0), 2 * n, n) == "budget"
    assert lm_pilot.stop_reason(0.9, 5 * n, n) == "formed"  # a head that formed is named, whenever


def test_the_pilots_plan_covers_the_issues_configurations():
    plan, arms = lm_pilot.read_plan(PLAN)
    assert {(a.config.context, a.config.batch_size) for a in arms} == {(32, 8), (64, 8), (32, 16), (64, 16)}
    assert {a.config.head_dim for a in arms} == {16, 32} and {a.seed for a in arms} == {100}
    assert {a.config.schedule for a in arms} == {"constant", "cosine"}
    assert "shakespeare+kjv" in {a.config.corpus for a in arms}
    for arm in arms:
        assert arm.config.max_steps * arm.tokens_per_step >= 2 * arm.predicted  # every arm up to 2× N
    assert all(a.config.max_steps == 8 for a in lm_pilot.read_plan(PLAN, max_steps=8)[1])


@pytest.mark.parametrize("arm, message", [({"context": 16}, "fixed probe needs 31"),
                                          ({"max_steps": 10}, "the law sets it"),
                                          ({"layerz": 2}, "unknown family keys"),
                                          ({"schedule": "step"}, "arm bad: schedule must be one of")])
def test_a_bad_plan_is_refused_by_name(tmp_path, tiny_corpus, arm, message):
    plan = tiny_plan(tmp_path / "plan.yaml", tiny_corpus, bad={"context": 32, "batch_size": 2, **arm})
    with pytest.raises(ValueError, match=message):
        lm_pilot.read_plan(plan)


def perfect_and_uniform(probs: torch.Tensor) -> torch.Tensor:
    """Layer 0's attention [B, H, L, L] made up: head 0 a perfect induction head (a previous-token
    head before the repeat), head 1 uniform over the positions so far."""
    length = (probs.shape[-1] - 1) // 2
    size = probs.shape[-1]
    made = torch.tril(torch.ones(size, size)) / torch.arange(1, size + 1)[:, None]
    induction = torch.zeros(size, size)
    induction[0, 0] = 1
    induction[torch.arange(1, size), torch.arange(0, size - 1)] = 1
    for i in range(length + 1, size):
        induction[i] = 0
        induction[i, i - length + 1] = 1
    out = probs.clone()
    out[:, 0], out[:, 1] = induction, made
    return out


def test_scores_on_the_fixed_probe_mean_the_same_at_every_context(tmp_path, tiny_corpus):
    """A perfect induction head scores 1 and a uniform head the uniform level of T = 15, whether the
    model's context is 32, 64 or 256: every model is scored on the same 31 positions."""
    tokenizer = train_tokenizer([(tiny_corpus / "work0.txt").read_text()], 300)
    uniform = head_scores.uniform_scores(head_scores.PROBE_LENGTH)
    assert uniform["induction"] == pytest.approx(0.0431, abs=1e-4)
    assert head_scores.uniform_scores(31)["induction"] < uniform["induction"] * 0.6  # why T must be fixed
    for context in (32, 64, 256):
        folder = tmp_path / f"c{context}" / "lm-seed0"
        from transformers import GPTNeoXForCausalLM

        config = FamilyConfig(context=context, hidden_size=32, heads=2, layers=2)
        GPTNeoXForCausalLM(neox_config(config, len(tokenizer))).save_pretrained(folder / "step3")
        tokenizer.save_pretrained(folder)
        hook = lm_pilot.ScoreCheckpoints(folder, tokens_per_step=context, predicted=1e9)
        outer = pythia.load_model(str(folder), "step3", torch.device("cpu"))
        with pythia.eager_attention(outer, patch={0: perfect_and_uniform}):
            assert hook(3, folder / "step3")  # an induction head: the rule stops here
        scored = json.loads((folder / lm_pilot.SCORES_FILE).read_text())["checkpoints"]["3"]
        assert scored["tokens"] == 3 * context
        assert scored["induction"][0][0] == pytest.approx(1.0) and scored["previous_token"][0][0] > 0.4
        assert scored["induction"][0][1] == pytest.approx(uniform["induction"], rel=1e-4)
        assert scored["previous_token"][0][1] == pytest.approx(uniform["previous_token"], rel=1e-4)


def test_a_configuration_stopped_and_resumed_scores_and_trains_as_one_never_stopped(tmp_path, tiny_corpus, monkeypatch):
    plan = tiny_plan(tmp_path / "plan.yaml", tiny_corpus,
                     cosine={"context": 32, "batch_size": 2, "schedule": "cosine", "lr_floor": 0.2})
    _, (arm,) = lm_pilot.read_plan(plan, max_steps=8)
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    for out in (whole, stopped):
        lm_pilot.prepare(out / arm.name, arm.config)
    lm_pilot.train_arm(whole, arm)
    train_interrupted(monkeypatch, lambda: lm_pilot.train_arm(stopped, arm))
    folder = model_folder(stopped / arm.name, arm.seed)
    state = torch.load(folder / "state.pt")
    assert state["step"] == 4  # the last checkpoint before the stop, and the cosine lr there
    assert state["optimizer"]["param_groups"][0]["lr"] == pytest.approx(arm.config.lr * lr_factor(4, arm.config))
    assert sorted(json.loads((folder / lm_pilot.SCORES_FILE).read_text())["checkpoints"], key=int) == \
        ["0", "1", "2", "3", "4"]
    lm_pilot.train_arm(stopped, arm)
    rows = [lm_pilot.arm_summary(out, arm) for out in (whole, stopped)]
    for row in rows:
        row.pop("minutes")
    assert rows[0] == rows[1] and rows[0]["status"] == "not formed" and rows[0]["capped"]
    assert [p[0] for p in rows[0]["curve"]] == [s * 64 for s in (0, 1, 2, 3, 4, 6, 8)]
    assert not (folder / "state.pt").exists()


def test_a_configuration_stops_at_the_checkpoint_where_its_induction_head_forms(tmp_path, tiny_corpus, monkeypatch):
    _, (arm,) = lm_pilot.read_plan(tiny_plan(tmp_path / "plan.yaml", tiny_corpus), max_steps=8)
    lm_pilot.prepare(tmp_path / arm.name, arm.config)
    monkeypatch.setattr(lm_pilot, "INDUCTION_FORMED", 0.0)  # every head has formed: the rule stops at once
    record = lm_pilot.train_arm(tmp_path, arm)
    assert record["status"] == "ok" and record["stopped_at"] == 0 and record["checkpoints"] == [0]
    row = lm_pilot.arm_summary(tmp_path, arm)
    assert row["status"] == "formed" and row["formed_tokens"] == 0 and row["formed_after"] is None
    assert sorted(p.name for p in model_folder(tmp_path / arm.name, arm.seed).glob("step*")) == ["step0"]


def in_this_process(jobs, workers, threads):
    """run_jobs without its worker processes (each spawn imports torch anew: seconds a worker)."""
    for job in jobs:
        lm_pilot.train_seed(job.out, job.config, job.seed, threads, job.on_checkpoint)


@pytest.mark.parametrize("workers", [pytest.param("processes", marks=pytest.mark.slow), "in this process"])
def test_the_pilot_runs_side_by_side_resumes_and_writes_its_table_and_figure(workers, tmp_path, tiny_corpus, capsys,
                                                                            monkeypatch):
    if workers == "in this process":
        monkeypatch.setattr(lm_pilot, "run_jobs", in_this_process)
    arms = {"c32-b2": {"context": 32, "batch_size": 2}, "c40-b1-hd8": {"context": 40, "batch_size": 1, "heads": 4}}
    plan = tiny_plan(tmp_path / "plan.yaml", tiny_corpus, **arms)
    out = tmp_path / "pilot"
    argv = ["lm-family", "pilot", str(out), "--plan", str(plan), "--max-steps", "4", "--workers", "2"]
    assert cli_main(argv) == 0
    summary = json.loads((out / lm_pilot.PILOT_FILE).read_text())
    assert [a["name"] for a in summary["arms"]] == ["c32-b2", "c40-b1-hd8"]
    assert [a["head_dim"] for a in summary["arms"]] == [16, 8]
    for a in summary["arms"]:
        assert a["status"] == "not formed" and [p[0] for p in a["curve"]][-1] == 4 * a["config"]["batch_size"] * \
            a["config"]["context"] and a["predicted_tokens"] == lm_pilot.predicted_tokens(a["config"]["batch_size"],
                                                                                         a["config"]["context"])
    assert (out / lm_pilot.FIGURE_FILE).read_bytes()[:4] == b"\x89PNG"
    table = (out / lm_pilot.TABLE_FILE).read_text()
    assert "| c40-b1-hd8 | 40 | 1 | 4 × 8 | constant |" in table and "not formed (budget capped)" in table
    trained = {p: p.stat().st_mtime_ns for p in out.glob("*/lm-seed7/train.json")}
    capsys.readouterr()
    assert cli_main(argv) == 0  # finished: nothing trains again, the same table
    assert {p: p.stat().st_mtime_ns for p in trained} == trained and (out / lm_pilot.TABLE_FILE).read_text() == table
    assert "c32-b2" in capsys.readouterr().out


def test_the_figure_marks_each_configurations_prediction_on_a_log_token_axis():
    from emergence_bench.reporting.figures.pilot import pilot_figure

    def arm(name, n, curve, formed=None):
        return {"name": name, "predicted_tokens": n, "curve": curve, "formed_tokens": formed}

    summary = {"threshold": 0.3, "probe_length": 15, "uniform": {"induction": 0.044},
               "arms": [arm("a", 8e6, [[0, 0.02, 0.05], [1e5, 0.03, 0.2], [1e7, 0.5, 0.6]], formed=1e7),
                        arm("b", 16e6, [[0, 0.02, 0.05], [1e6, 0.02, 0.3], [3.2e7, 0.03, 0.5]]),
                        arm("not started", 11e6, [])]}
    figure = pilot_figure(summary)
    induction = figure.axes[0]
    assert induction.get_xscale() == "log" and len(induction.lines) >= 2
    verticals = sorted(line.get_xdata()[0] for line in induction.lines if len(set(line.get_xdata())) == 1
                       and line.get_linestyle() == "--")
    assert verticals == [8e6, 16e6]  # the started configurations' predictions
    assert pilot_figure({**summary, "arms": [arm("x", 8e6, [[0, 0.02, 0.05]])]}) is None
