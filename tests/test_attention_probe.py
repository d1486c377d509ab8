import math

import pytest
import torch

from emergence_bench.callbacks.attention_probe import attention_stats
from emergence_bench.engine.run import run
from emergence_bench.tasks.linear_map import LinearMap


def test_entropy_and_source_mass_on_hand_built_maps():
    pattern = torch.zeros(4, 4)
    pattern[3, [0, 1]] = 1
    keys = torch.zeros(4, 4, dtype=torch.bool)
    keys[3, :3] = True
    rows = torch.tensor([False, False, False, True])
    probs = torch.zeros(2, 3, 4, 4)  # two sequences, three heads
    probs[:, 0, 3] = torch.tensor([0.5, 0.5, 0.0, 0.0])  # all on the sources
    probs[:, 1, 3] = torch.tensor([1 / 3, 1 / 3, 1 / 3, 0.0])  # uniform over the probed keys
    probs[0, 2, 3] = torch.tensor([1.0, 0.0, 0.0, 0.0])  # one sequence sharp on a source ...
    probs[1, 2, 3] = torch.tensor([0.0, 0.0, 0.5, 0.5])  # ... the other half outside the keys
    entropy, mass = attention_stats(probs, pattern, keys, rows)
    assert mass.tolist() == pytest.approx([1.0, 2 / 3, 0.5])
    assert entropy.tolist() == pytest.approx([math.log(2), math.log(3), 0.0])


def test_probe_keys_of_a_state_trajectory_are_the_previous_state():
    task = LinearMap(3, 1, trajectory_length=3)
    keys = task.probe_keys()
    assert keys[2].tolist() == [True, True, True, False, False, False, False, False]  # predicts token 3
    assert keys[5].tolist() == [False, False, False, True, True, True, False, False]  # predicts token 6
    assert not keys[:2].any()
    assert (task.ground_truth_attention().bool() <= keys).all()  # the truth lies within the probed keys


def test_probe_in_a_run_reports_every_head_and_the_pattern_found_step(tmp_path, tiny_config):
    config = tiny_config(task={"name": "linear_map", "state_size": 4, "sparsity": 1, "batch_size": 64},
                         trainer={"max_steps": 200, "eval_every": 20},
                         optim={"lr": 3e-3})
    record = run(config, tmp_path)
    probe = record["attention_probe"]
    assert probe["applicable"] and probe["layers"] == [0]
    assert len(probe["final_mass"][0]) == 2 and len(probe["final_entropy"][0]) == 2  # 2 heads
    assert [h[0] for h in probe["history"]] == list(range(20, 201, 20))
    best = max(probe["final_mass"][0])
    assert probe["best_head"]["mass"] == best
    found = probe["pattern_found_step"]
    masses = [h[1] for h in probe["history"]]
    assert found is not None  # S=4, s=1 is learned well within 200 steps
    assert masses[[h[0] for h in probe["history"]].index(found)] >= 0.5
    assert all(m < 0.5 for step, m, _ in probe["history"] if step < found)
    assert any((tmp_path / record["run_id"] / "tensorboard").glob("events.out.tfevents.*"))


def test_probe_saves_the_filmstrips_moments_in_order(tmp_path, tiny_config):
    config = tiny_config(task={"name": "linear_map", "state_size": 4, "sparsity": 1, "batch_size": 64},
                         trainer={"max_steps": 200, "eval_every": 20}, optim={"lr": 3e-3})
    record = run(config, tmp_path)
    saved = torch.load(tmp_path / record["run_id"] / "attention_maps.pt")
    moments = {m["moment"]: m["step"] for m in saved["moments"]}
    assert list(moments) == ["start", "pattern found", "emergence", "end"]  # learned well within 200 steps
    assert moments["start"] == 0 and moments["end"] == 200
    assert moments["pattern found"] == record["attention_probe"]["pattern_found_step"]
    assert moments["emergence"] == record["emergence"]["step"]
    first = saved["moments"][0]["maps"][0]
    assert first.shape == saved["maps"][0].shape and not torch.equal(first, saved["maps"][0])  # it changed
