from types import SimpleNamespace

import pytest
import torch

from emergence_bench.callbacks.attention_bias import AttentionBias
from emergence_bench.engine.model import SequenceModel
from emergence_bench.engine.run import run
from emergence_bench.mixers.base import MixerContext
from emergence_bench.tasks.linear_map import LinearMap


def setup_bias(**kwargs):
    torch.manual_seed(0)
    task = LinearMap(4, 2)
    model = SequenceModel(2, task.seq_len, {"name": "transformer", "n_heads": 3, "head_dim": 4},
                          d_model=16, n_layers=2)
    module = SimpleNamespace(model=model, device=torch.device("cpu"), attention_bias={})
    callback = AttentionBias(task, **kwargs)
    callback.setup(None, module, "fit")
    return task, model, module, callback


def at_step(callback, module, step, max_steps=100):
    callback.on_train_batch_start(SimpleNamespace(global_step=step, max_steps=max_steps), module, None, 0)
    return module.attention_bias


def test_bias_sits_on_the_pattern_in_the_chosen_layers_heads_and_steps():
    task, model, module, callback = setup_bias(strength=3.0, layers=[1], heads=[0, 2], until_step=5)
    pattern = task.ground_truth_attention().float()
    bias = at_step(callback, module, 0)
    assert set(bias) == {1} and bias[1].shape == (1, 3, task.seq_len, task.seq_len)
    assert torch.equal(bias[1][0, 0], 3.0 * pattern) and torch.equal(bias[1][0, 2], 3.0 * pattern)
    assert torch.equal(bias[1][0, 1], torch.zeros_like(pattern))
    assert at_step(callback, module, 4) and at_step(callback, module, 5) == {}
    report = callback.report()
    assert report["applicable"] and report["layers"] == [1] and report["heads"] == {"1": [0, 2]}
    assert report["steps_applied"] == 2 and (report["first_step"], report["last_step"]) == (0, 4)


def test_bias_changes_the_logits_exactly_where_the_pattern_is():
    """log p_biased − log p_plain = bias − (a per-row constant), on every key a row can see."""
    task, model, module, callback = setup_bias(strength=2.0, layers=[0], heads=[1])
    tokens = task.batch("train", 0)[:4, :-1]
    plain, biased = MixerContext(capture=True), MixerContext(capture=True, bias=at_step(callback, module, 0))
    with torch.no_grad():
        model(tokens, plain)
        model(tokens, biased)
    diff = biased.attention[0].log() - plain.attention[0].log()  # [B, H, L, L], -inf-(-inf) above diag
    pattern = 2.0 * task.ground_truth_attention().float()
    visible = torch.ones_like(pattern, dtype=torch.bool).tril()
    for head in range(3):
        expected = pattern if head == 1 else torch.zeros_like(pattern)
        shift = (diff[:, head] - expected)[..., :1]  # key 0 is visible to every row
        residual = torch.where(visible, diff[:, head] - expected - shift, torch.zeros_like(pattern))
        assert residual.abs().max() < 1e-4, head


def test_anneal_falls_linearly_to_zero():
    _, _, module, callback = setup_bias(strength=4.0, anneal=True, until_step=10)
    assert callback.factor(0, 100) == 1.0 and callback.factor(5, 100) == 0.5 and callback.factor(10, 100) == 0.0
    assert at_step(callback, module, 10) == {}
    _, _, _, over_run = setup_bias(anneal=True)
    assert over_run.factor(25, 100) == 0.75  # without until_step, over the whole run


def test_bad_selections_are_rejected():
    with pytest.raises(ValueError,
                       match=r"attention_bias.heads must be 'all' or a non-empty list of indices in \[0, 2\]"):
        setup_bias(heads=[3])
    with pytest.raises(ValueError, match="attention_bias.layers"):
        setup_bias(layers=[2])


def test_mixer_without_attention_scores_is_reported_not_applicable(tmp_path, tiny_config):
    config = tiny_config(mixer={"name": "mlp_mixer"}, callbacks={"attention_bias": {"strength": 5.0}})
    record = run(config, tmp_path)
    assert record["status"] == "ok"
    assert record["attention_bias"]["applicable"] is False
    assert "CausalMLPMixer" in record["attention_bias"]["not_applicable"]
    assert record["attention_bias"]["steps_applied"] == 0
    assert record["attention_probe"] == {"applicable": False,
                                         "not_applicable": "CausalMLPMixer exposes no attention scores"}


@pytest.mark.slow
def test_bias_shortens_the_plateau_and_the_leaderboard_shows_the_ratio(tmp_path):
    from emergence_bench.reporting import leaderboard

    base = {"task": {"name": "linear_map", "state_size": 8, "sparsity": 3},
            "trainer": {"max_steps": 300, "eval_every": 50, "accelerator": "cpu"}}
    plain = run(base, tmp_path)
    biased = run({**base, "callbacks": {"attention_bias": {"strength": 5.0}}}, tmp_path)
    assert biased["plateau"]["first_drop_step"] is not None
    before, after = plain["plateau"]["first_drop_step"], biased["plateau"]["first_drop_step"]
    assert before is None or after < before / 2
    table, markdown = leaderboard.write(tmp_path)
    assert list(table["intervention"]) == ["none", "attention_bias(strength=5.0, layers=auto, heads=all, "
                                                   "pattern=auto, until_step=None, anneal=False, in_eval=True)"]
    assert table["plateau_ratio"][1] < 0.5 and "×" in markdown


def test_the_default_bias_follows_the_task():
    """Linear map: every layer and head on `predict`; cellular automata: layer 0 only, half its heads
    on `predict` and half on `own`."""
    from emergence_bench.tasks.cellular_automata import CellularAutomata

    ca = CellularAutomata(state_size=5, trajectory_length=3, rules=4, batch_size=2)
    model = SequenceModel(ca.vocab_size, ca.seq_len, {"name": "transformer", "n_heads": 4, "head_dim": 4},
                          d_model=16, n_layers=2)
    callback = AttentionBias(ca, strength=2.0)
    callback.setup(None, SimpleNamespace(model=model, device=torch.device("cpu")), "fit")
    assert set(callback._bias) == {0}
    bias = callback._bias[0][0]
    for head, name in enumerate(["predict", "predict", "own", "own"]):
        assert torch.equal(bias[head], 2.0 * ca.pattern(name).float()), head
    assert callback.report()["patterns"] == {"0": ["predict", "predict", "own", "own"]}
    _, _, _, linear = setup_bias(strength=1.0)
    assert sorted(linear._bias) == [0, 1] and linear.report()["patterns"]["1"] == ["predict"] * 3


def test_a_pattern_per_head_and_bad_patterns_are_rejected():
    from emergence_bench.tasks.cellular_automata import CellularAutomata

    ca = CellularAutomata(state_size=5, trajectory_length=3, rules=4, batch_size=2)
    model = SequenceModel(ca.vocab_size, ca.seq_len, {"name": "transformer", "n_heads": 3, "head_dim": 4},
                          d_model=16, n_layers=1)
    callback = AttentionBias(ca, layers=[0], heads=[0, 2], pattern=["own", "predict"])
    assert callback.plan(model) == {0: [(0, "own"), (2, "predict")]}
    with pytest.raises(ValueError, match="one name per biased head"):
        AttentionBias(ca, layers=[0], heads=[0, 1, 2], pattern=["own", "predict"]).plan(model)
    with pytest.raises(ValueError, match="own"):  # the message lists the task's patterns
        AttentionBias(ca, pattern="window")


@pytest.mark.parametrize("bias", [{"layers": [3]}, {"heads": [8]}])
def test_a_bias_naming_a_missing_layer_or_head_fails_before_training(bias, tmp_path, tiny_config):
    from emergence_bench.engine.run import plan

    config = tiny_config(callbacks={"attention_bias": {"strength": 1.0, **bias}})
    with pytest.raises(ValueError, match="layers|heads"):
        plan(config)
