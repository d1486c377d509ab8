"""`emergence-bench speed`'s measurement: the interleaving and its arithmetic on scripted timings,
and that the loops it times do the suite's work (same losses, same updates). No timed assertions."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from emergence_bench.config import resolve
from emergence_bench.engine import training
from emergence_bench.engine.run import run
from emergence_bench.engine.seed_parallel import run_seed_parallel
from emergence_bench.perf import loops, speed, timing


# --- the arithmetic, on scripted timings -----------------------------------------------------------
def test_summary_gives_median_and_spread():
    s = timing.summary([1.10, 0.90, 1.00, 1.40, 1.05])
    assert s["median"] == pytest.approx(1.05)
    assert (s["min"], s["max"]) == (0.90, 1.40)
    assert (s["q1"], s["q3"]) == (pytest.approx(1.00), pytest.approx(1.10))
    assert s["values"] == [1.10, 0.90, 1.00, 1.40, 1.05]
    one = timing.summary([2.0])
    assert one["median"] == one["min"] == one["max"] == one["q1"] == one["q3"] == 2.0


def test_bracketed_divides_by_the_reference_blocks_either_side():
    assert timing.bracketed([1.0, 3.0, 1.0], [4.0, 6.0]) == [2.0, 3.0]
    with pytest.raises(ValueError, match="one more reference block"):
        timing.bracketed([1.0, 2.0], [1.0, 1.0])


class FakeClock:
    """A clock that only the scripted blocks advance."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_interleave_alternates_blocks_and_cancels_a_drifting_load():
    """Blocks run ref, a, b, ref, b, a, ref, ...; per-step seconds come from the injected clock; a
    load that slows everything linearly over time leaves the bracketed ratios exact."""
    clock, order = FakeClock(), []

    def block(name: str, cost: float):
        def run(steps: int) -> None:
            order.append((name, steps))
            slowdown = 1 + 0.1 * len(order)  # the machine gets busier, block by block
            clock.now += cost * steps * slowdown
        return run

    ref, times = timing.interleave((block("ref", 1.0), 10), {"a": (block("a", 2.0), 5), "b": (block("b", 0.5), 20)},
                                  repeats=3, clock=clock)
    assert [name for name, _ in order] == ["ref", "a", "b", "ref", "b", "a", "ref", "a", "b", "ref"]
    assert dict(order) == {"ref": 10, "a": 5, "b": 20}
    assert len(ref) == 4 and len(times["a"]) == len(times["b"]) == 3
    assert ref[0] == pytest.approx(1.1) and times["a"][0] == pytest.approx(2.0 * 1.2)
    # a sits right after its repeat's first reference block, so its ratio is off by the drift
    # within the repeat only; b's ratio errs the other way in the next repeat.
    a = timing.bracketed(ref, times["a"])
    assert all(1.8 < r < 2.2 for r in a)
    assert timing.summary(a)["median"] == pytest.approx(2.0, rel=0.05)


def test_repeats_below_the_minimum_are_refused_before_anything_runs(tmp_path):
    with pytest.raises(ValueError, match="--repeats must be at least 5"):
        speed.main(tmp_path / "speed.json", repeats=3)
    assert not (tmp_path / "speed.json").exists()


# --- the loops do the suite's work -----------------------------------------------------------------
@pytest.mark.parametrize("train_on", ["scored", "all"])
def test_bare_loop_starts_from_the_suites_loss(tmp_path, train_on, tiny_config):
    """Same config and seed: the bare loop's first loss is the suite's step-0 loss (same init, data, rows)."""
    config = resolve(tiny_config(seed=3, trainer={"max_steps": 1, "eval_every": 1, "train_on": train_on},
                                 callbacks={}))
    metrics = run(config, tmp_path)["metrics"]
    suite = metrics["final_train_full_sequence_loss" if train_on == "all" else "final_train_loss"]
    pick = 1 if train_on == "all" else 0
    bare = loops.single_loop(config)
    with torch.no_grad():
        loss = float(bare.module.losses(bare.batches(0))[pick])
    assert loss == pytest.approx(suite, rel=1e-5)
    other = loops.single_loop(dataclasses.replace(config, seed=4))
    with torch.no_grad():
        assert float(other.module.losses(other.batches(0))[pick]) != pytest.approx(suite, rel=1e-5)


def test_batched_seed_steps_equal_k_bare_loops(tiny_config):
    """Two steps of the K-seed batched step = two steps of each seed's own bare loop: losses and
    parameters within float tolerance (decay, a warmup schedule and tight clipping all shape them)."""
    config = resolve(tiny_config(seed=5, optim={"weight_decay": 0.1, "grad_clip": 0.05, "warmup_steps": 3},
                                 trainer={"log_every": 1}))
    K = 3
    batched, read = loops.stacked_loop(config, K), []  # read: [K] scored losses of every step read back
    batched.module.on_losses = lambda steps, scored, full, at_step: read.extend(scored)
    batched.run(2)
    stack = batched.module
    for k in range(K):
        bare = loops.single_loop(dataclasses.replace(config, seed=config.seed + k))
        bare.run(2)
        assert [step[k] for step in read] == pytest.approx(list(bare.module.recent_train_losses), rel=1e-5)
        assert len(read) == 2
        for name, p in bare.module.model.named_parameters():
            ours, theirs = stack.stacked[stack.names.index(name)][k].detach(), p.detach()
            if name.endswith("qkv.bias"):
                # The key bias's gradient is 0 in exact arithmetic (a softmax ignores a shift shared by
                # every key), so AdamW turns each path's rounding noise into steps of up to lr.
                key = torch.arange(ours.numel()) // (ours.numel() // 3) == 1  # of the q, k, v thirds
                torch.testing.assert_close(ours[key], theirs[key], rtol=0, atol=2 * config.optim.lr)
                ours, theirs = ours[~key], theirs[~key]
            torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    before = loops.single_loop(config)  # and the steps did move the weights
    moved = [not torch.equal(p, before_p) for p, before_p in
             zip(stack.stacked, (q.detach() for q in before.module.model.parameters()))]
    assert any(moved)


def test_speed_and_a_run_execute_the_same_training_step(tmp_path, monkeypatch, tiny_config):
    """The step `speed` times is the step runs train with: ``training.step``, patched, is what a run, a
    seed-parallel group and every loop `speed` times call, once per step."""
    calls, original = [], training.step

    def spy(module, tokens, batch_idx):
        calls.append((type(module).__name__, batch_idx))
        return original(module, tokens, batch_idx)

    monkeypatch.setattr(training, "step", spy)
    config = resolve(tiny_config(trainer={"max_steps": 2, "eval_every": 2}, callbacks={}))
    assert run(config, tmp_path / "run")["status"] == "ok"
    assert calls == [("EmergenceModule", 0), ("EmergenceModule", 1)]
    calls.clear()
    rows = run_seed_parallel([dataclasses.replace(config, seed=s) for s in (0, 1)], tmp_path / "group")
    assert [r["seed_parallel"]["k"] for r in rows] == [2, 2]
    assert calls == [("SeedStack", 0), ("SeedStack", 1)]
    calls.clear()
    loops.single_loop(config).run(2)
    loops.stacked_loop(config, 3).run(1)
    loops.step_seconds({"name": "transformer", "n_heads": 2, "head_dim": 4}, 8, 2, 16, "cpu", repeats=1)
    assert calls == [("EmergenceModule", 0), ("EmergenceModule", 1), ("SeedStack", 0),
                     ("EmergenceModule", 0), ("EmergenceModule", 1), ("EmergenceModule", 2)]
    calls.clear()
    bare, _, _ = speed.suite_vs_bare(tiny_config(callbacks={}), steps=1, repeats=1, warmup=1)
    assert calls.count(("EmergenceModule", 0)) == 2  # the suite run's first step and the bare loop's


def test_suite_clock_interleaves_bare_and_suite_blocks_in_one_run(tiny_config):
    """R suite blocks between R + 1 bare blocks, each of the given steps, after the warm-up."""
    raw = tiny_config(callbacks={})
    bare, bare_s, suite_s = speed.suite_vs_bare(raw, steps=2, repeats=3, warmup=1)
    assert len(bare_s) == 4 and len(suite_s) == 3
    assert all(t > 0 for t in bare_s + suite_s)
    assert bare.index == 3 + 4 * 2  # its warm-up, then four blocks of two steps
    assert speed.SuiteClock.session is None


def test_the_timed_settings_are_the_ones_described():
    """The per-step settings: `quick` at 128 and at 16 sequences, and the reproduction's
    configuration (S=16, s=3, width 128, MLP 512, 8 heads × 16, batch 256, ~203k parameters)."""
    from emergence_bench.engine.run import build_model, build_task

    configs = {name: resolve(speed.preset_run(*spec)) for name, spec in speed.SEED_RUNS.items()}
    assert configs["quick"].task.params["batch_size"] == 128 and configs["quick-b16"].task.params["batch_size"] == 16
    peer = configs["peer-linear-map"]
    task, mixer = peer.task.params, peer.mixer.params
    assert (task["state_size"], task["sparsity"], task["batch_size"]) == (16, 3, 256)
    assert (peer.model.d_model, peer.model.mlp_ratio, mixer["n_heads"], mixer["head_dim"]) == (128, 4, 8, 16)
    with torch.device("meta"):
        params = sum(p.numel() for p in build_model(peer, build_task(peer)).parameters())
    assert 195_000 < params < 210_000
    assert set(speed.SUITE_RUNS) == {"quick", "paper-linear-map"}


# --- the mixer tables at the ranking's size --------------------------------------------------
def test_the_mixer_clocks_time_the_rankings_own_runs():
    from emergence_bench.execution.sweep_spec import load_sweep
    from emergence_bench.perf import mixers

    ranking = load_sweep(mixers.RANKING)
    raw = mixers.length_config("gated_deltanet", 256)
    assert raw["task"]["length"] == 256 and raw["model"] == ranking.base["model"]
    assert raw["mixer"] == {"name": "gated_deltanet", "n_heads": 2, "head_dim": 16}  # the ranking's spec
    cell = mixers.cell_configs("mamba", "cellular-automata", steps=30)
    assert [c["seed"] for c in cell] == list(range(mixers.SEEDS))
    assert {c["task"]["rules"] for c in cell} == {3}  # the middle rung
    assert {c["optim"]["lr"] for c in cell} == {ranking.tuned["mamba"]["cellular-automata"]["optim.lr"]}
    assert all(c["trainer"]["max_steps"] == 30 and c["callbacks"]["emergence"]["stop"] is False for c in cell)


def test_a_mixer_without_a_tuned_value_is_clocked_at_the_base_lr():
    from emergence_bench.mixers.attention import CausalSelfAttention
    from emergence_bench.perf import mixers
    from emergence_bench.registry import register_mixer

    register_mixer("test_clock_plugin")(type("ClockPlugin", (CausalSelfAttention,), {}))
    cell = mixers.cell_configs("test_clock_plugin", "mqar", steps=5)  # a plugin has no tuned lr: no error
    assert {c["optim"]["lr"] for c in cell} == {1e-3} and {c["mixer"]["name"] for c in cell} == {"test_clock_plugin"}


def test_the_transformer_reads_one_in_the_mixer_tables():
    from emergence_bench.perf import mixers

    steps = [{"mixer": "transformer", "length": 16, "seeds": 8, "step_ms": 40.0,
              "vs_transformer": timing.summary([1.0, 1.0]), "kernel_vs_reference": None},
             {"mixer": "lru", "length": 16, "seeds": 8, "step_ms": 60.0,
              "vs_transformer": timing.summary([1.4, 1.6]), "kernel_vs_reference": None}]
    table = mixers.render_steps(steps)
    assert "| transformer | 16 | 8 | 40.0 | 1 (reference) | - |" in table
    assert "| lru | 16 | 8 | 60.0 | 1.50 (1.40–1.60) | - |" in table
    cells = mixers.render_cells([{"family": "mqar", "mixer": "transformer", "seconds": 10.0, "vs_transformer": 1.0},
                                 {"family": "mqar", "mixer": "lru", "seconds": 15.0, "vs_transformer": 1.5}])
    assert "| transformer | 1 (10.0 s) |" in cells and "| lru | 1.50 (15.0 s) |" in cells


def test_the_forms_table_times_each_form_of_the_rankings_run_against_ladder_v2s(monkeypatch):
    """Each row is the ranking's run at that length with the form's key set, and ladder v2's form
    (the first value) is the one every other is divided by."""
    from emergence_bench.perf import forms

    built = []

    def loop(config, K):
        built.append((config.mixer.name, dict(config.mixer.params), config.task.params["length"], K))
        return type("Loop", (), {"run": lambda self, steps: None})()

    monkeypatch.setattr(forms, "stacked_loop", loop)
    rows = forms.form_ratios(lengths=(20, 64), repeats=2, steps=1)
    for mixer, (key, values) in forms.FORMS.items():
        for length in (20, 64):
            timed = [params[key] for name, params, at, K in built if name == mixer and at == length]
            assert timed == values and all(K == 8 for *_, K in built)
    assert {(r["mixer"], r["value"], r["length"]) for r in rows} == \
        {(m, v, n) for m, (_, values) in forms.FORMS.items() for v in values for n in (20, 64)}
    table = forms.render_forms(rows)
    assert "| gated_deltanet | chunk_size=32 | 20 |" in table and "1 (ladder v2's)" in table
