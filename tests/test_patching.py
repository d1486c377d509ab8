"""Causal head patching and the `analyze emergence` / `analyze patch` commands on a tiny trained run."""

import argparse
import copy
import json
import math

import pytest
import torch

from emergence_bench.analysis import checkpoint_analysis
from emergence_bench.analysis.head_patching import attention_layers, capture, ground_truth_maps, patch_models
from emergence_bench.callbacks.checkpoints import saved_checkpoints
from emergence_bench.commands import analyze as analyze_command
from emergence_bench.engine.model import SequenceModel
from emergence_bench.engine.run import run
from emergence_bench.tasks.linear_map import LinearMap

HEADS, HEAD_DIM = 4, 8


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_config):
    """A linear map S=4, s=1 that emerges within ~25 steps at lr 3e-3, with checkpoints (~3 s).

    Small initial weights (N(0, 0.02)): at this tiny size a larger init lets the model solve the
    task through nearly uniform attention (a prefix average of position-coded values carries every
    bit), and the patching tests need a model whose answer lives in its attention maps."""
    torch.set_num_threads(1)
    config = tiny_config(task={"state_size": 4, "sparsity": 1, "batch_size": 64},
                         mixer={"name": "transformer", "n_heads": HEADS, "head_dim": HEAD_DIM},
                         model={"d_model": 32, "init": "normal"}, optim={"lr": 3e-3},
                         trainer={"max_steps": 200, "eval_every": 25, "eval_batches": 2},
                         checkpoints={"every": 25, "log_spaced": True})
    out = tmp_path_factory.mktemp("runs")
    record = run(config, out)
    assert record["status"] == "ok" and record["emergence"]["step"] is not None
    return out / record["run_id"]


def cli(*argv: str) -> int:
    """`emergence-bench analyze ARGV` through the analyze module's own parser wiring."""
    parser = argparse.ArgumentParser()
    analyze_command.add_parser(parser.add_subparsers(dest="command", required=True))
    args, extra = parser.parse_known_args(["analyze", *argv])
    return analyze_command.main(args, extra)


def models(run_dir, *steps):
    config, task, checkpoints = checkpoint_analysis.load_run(run_dir)
    cpu = torch.device("cpu")
    return task, [checkpoint_analysis.load_model(config, task, checkpoints[s], cpu) for s in steps]


def test_patching_a_head_with_its_own_pattern_changes_nothing():
    torch.manual_seed(0)
    task = LinearMap(4, 2, batch_size=16)
    model = SequenceModel(task.vocab_size, task.seq_len, {"name": "transformer", "n_heads": 3, "head_dim": 4},
                          d_model=16, n_layers=2).eval()
    report = patch_models(model, copy.deepcopy(model), task.batch("eval", 0), task.loss_mask, top_k=6)
    assert len(report["heads"]) == 6  # 2 layers × 3 heads
    assert all(row["delta_p"] == 0.0 for row in report["heads"])  # bit for bit, not just close
    assert report["all_heads"]["delta_p"] == 0.0 and report["gap"] == 0.0
    assert report["all_heads"]["fraction_recovered"] is None  # no gap to recover


def test_patching_every_head_of_a_one_layer_model_recovers_the_whole_gap(trained):
    task, (final, init) = models(trained, 200, 0)
    # The old model is the trained one with its queries and keys from step 0: the two differ only in
    # their attention maps, so patching every head's map must make the old model the new one.
    old_state = {k: v.clone() for k, v in final.state_dict().items()}
    qk = slice(0, 2 * HEADS * HEAD_DIM)  # qkv rows: queries, then keys, then values
    for name in ("blocks.0.mixer.qkv.weight", "blocks.0.mixer.qkv.bias"):
        old_state[name][qk] = init.state_dict()[name][qk]
    old = copy.deepcopy(final)
    old.load_state_dict(old_state)
    report = patch_models(old, final, task.batch("eval", 0), task.loss_mask, top_k=2)
    assert report["gap"] > 0.2  # random queries and keys do lose the capability
    assert report["all_heads"]["fraction_recovered"] == pytest.approx(1.0, abs=1e-5)
    assert report["all_heads"]["p"] == pytest.approx(report["p_new"], abs=1e-6)
    ranked = [row["delta_p"] for row in report["heads"]]
    assert ranked == sorted(ranked, reverse=True) and [row["rank"] for row in report["heads"]] == [1, 2, 3, 4]
    assert [t["k"] for t in report["top_k"]] == [1, 2]
    assert report["top_k"][0]["heads"] == [[report["heads"][0]["layer"], report["heads"][0]["head"]]]


def test_ground_truth_patch_raises_p_correct_before_emergence(trained):
    found = checkpoint_analysis.emergence(trained, device="cpu")
    old, new = found["last_unsolved"], found["first_solved"]
    task, (old_model, new_model) = models(trained, old, new)
    tokens = task.batch("eval", 0)
    report = patch_models(old_model, new_model, tokens, task.loss_mask, top_k=4,
                          ground_truth=task.ground_truth_attention())
    assert report["source"] == "ground_truth"
    assert report["all_heads"]["p"] > report["p_old"] + 0.02
    assert report["heads"][0]["delta_p"] > 0
    # The patched-in map is the row-normalised ground truth on the rows that predict a cell, the
    # model's own map elsewhere.
    _, own = capture(old_model, tokens, task.loss_mask)
    maps = ground_truth_maps(task.ground_truth_attention(), own)[0]
    scored = task.ground_truth_attention().sum(-1) > 0
    assert torch.allclose(maps[:, :, scored].sum(-1), torch.ones(1))
    assert torch.equal(maps[:, :, ~scored], own[0][:, :, ~scored])


def test_a_mixer_without_attention_scores_is_refused():
    model = SequenceModel(2, 7, {"name": "mlp_mixer"}, d_model=8)
    with pytest.raises(ValueError, match="exposes no attention scores"):
        attention_layers(model)


def test_analyze_emergence_command_bisects_the_checkpoints(trained, capsys):
    assert cli("emergence", str(trained), "--device", "cpu") == 0
    report = json.loads((trained / "analysis" / "emergence.json").read_text())
    steps = list(saved_checkpoints(trained))
    assert report["steps"] == steps and report["checkpoints"] == len(steps)
    assert report["evaluations"] <= math.ceil(math.log2(len(steps) + 1))
    # Brute force: the first checkpoint reaching the threshold, given every checkpoint evaluated.
    config, task, checkpoints = checkpoint_analysis.load_run(trained)
    tokens = checkpoint_analysis.probe_tokens(task, config.trainer.eval_batches)
    loaded = {s: checkpoint_analysis.load_model(config, task, p, torch.device("cpu")) for s, p in checkpoints.items()}
    accuracy = {s: checkpoint_analysis.greedy_accuracy(model, tokens, task.loss_mask) for s, model in loaded.items()}
    first = next(s for s in steps if accuracy[s] >= report["threshold"])
    assert report["first_solved"] == first and report["emergence_step"] == first
    assert report["last_unsolved"] == steps[steps.index(first) - 1]
    assert all(accuracy[s] == a for s, a in report["accuracy"])
    assert report["eval_emergence_step"] is not None
    out = capsys.readouterr().out
    assert f"emergence between step {report['last_unsolved']} and step {first}" in out


def test_analyze_patch_command_writes_both_variants(trained, capsys):
    assert cli("patch", str(trained), "--old", "0", "--new", "200", "--top-k", "2", "--device", "cpu") == 0
    report = json.loads((trained / "analysis" / "patch_0_200.json").read_text())
    assert report["old"] == 0 and report["new"] == 200 and report["source"] == "new"
    assert len(report["heads"]) == HEADS and [t["k"] for t in report["top_k"]] == [1, 2]
    assert report["p_new"] > report["p_old"]
    assert "top 2 (" in capsys.readouterr().out
    assert cli("patch", str(trained), "--old", "0", "--new", "200", "--ground-truth", "--device", "cpu") == 0
    gt = json.loads((trained / "analysis" / "patch_0_200_ground_truth.json").read_text())
    assert gt["source"] == "ground_truth" and gt["p_old"] == report["p_old"]
    with pytest.raises(ValueError, match="no checkpoint at step 7; saved steps: 0, 1, 2"):
        cli("patch", str(trained), "--old", "7", "--new", "200")
    with pytest.raises(ValueError, match="not a run directory"):
        cli("emergence", str(trained / "analysis"))
