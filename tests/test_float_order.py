"""Float order: ``trainer.batch_order`` (the same batches summed in another order) and the keys of
faster forms, kept out of the run id at the values earlier runs computed with."""

from __future__ import annotations

import math

import torch

from emergence_bench.config import hashed_config, resolve
from emergence_bench.engine.run import run
from emergence_bench.engine.training import LossBuffer, step


class Recording:
    """What ``step`` needs of a module; ``losses`` keeps the tokens it was given."""

    train_on = "scored"

    def __init__(self, batch_order: str) -> None:
        self.batch_order, self.seen = batch_order, []
        self.loss_buffer = LossBuffer(every=1000)

    def losses(self, tokens):
        self.seen.append(tokens)
        loss = tokens.float().mean(dim=(-1, -2))
        return loss, loss

    def read_losses(self, at_step):  # pragma: no cover - not due within these steps
        raise AssertionError("not due")


def test_a_reversed_batch_order_steps_on_the_same_sequences_in_reverse():
    for shape in ((5, 7), (3, 5, 7)):  # a run's batch [B, L+1], a stack's [K, B, L+1]
        tokens = torch.arange(math.prod(shape)).reshape(shape)
        drawn, reversed_ = Recording("drawn"), Recording("reversed")
        step(drawn, tokens, 0)
        step(reversed_, tokens, 0)
        assert torch.equal(drawn.seen[0], tokens)
        assert torch.equal(reversed_.seen[0], tokens.flip(-2))  # sequences reversed, each one intact


def test_a_reversed_batch_order_is_another_float_order_of_the_same_training(tmp_path, tiny_config):
    """The same sequences, summed in another order: the numbers move in their last bits and training
    carries them on, but stay within a float-rounding distance of each other this early."""
    drawn = run(tiny_config(), tmp_path / "drawn")
    again = run(tiny_config(), tmp_path / "again")
    reversed_ = run(tiny_config(trainer={"batch_order": "reversed"}), tmp_path / "reversed")
    loss = {name: r["metrics"]["final_eval_loss"] for name, r in
            (("drawn", drawn), ("again", again), ("reversed", reversed_))}
    assert loss["drawn"] == loss["again"]  # one order is deterministic
    assert loss["reversed"] != loss["drawn"]
    assert math.isclose(loss["reversed"], loss["drawn"], rel_tol=1e-3)
    assert reversed_["run_id"] != drawn["run_id"]


def test_added_keys_at_their_earlier_values_keep_earlier_run_ids():
    """Run ids computed before the keys existed (pinned): Gated DeltaNet at chunk_size 32 (ladder v2's
    float order) and mLSTM at its default keep theirs; today's Gated DeltaNet default, another
    float order, gets its own; trainer.batch_order "drawn" is no key at all to the id."""
    assert resolve({"mixer": {"name": "gated_deltanet", "chunk_size": 32}}).run_id() == \
        "linear_map-gated_deltanet-seed0-3542442e73"
    assert resolve({"mixer": {"name": "mlstm"}}).run_id() == "linear_map-mlstm-seed0-15589011e0"
    assert resolve({"mixer": {"name": "mlstm", "quadratic_up_to": 16}}).run_id() != \
        "linear_map-mlstm-seed0-15589011e0"
    assert resolve({"mixer": {"name": "gated_deltanet"}}).run_id() != "linear_map-gated_deltanet-seed0-3542442e73"
    config = resolve({"mixer": {"name": "gated_deltanet", "chunk_size": 32}}).to_dict()
    assert config["mixer"]["chunk_size"] == 32 and config["trainer"]["batch_order"] == "drawn"  # saved all the same
    hashed = hashed_config(config)
    assert "chunk_size" not in hashed["mixer"] and "batch_order" not in hashed["trainer"]


def test_a_seed_parallel_group_steps_in_the_order_its_config_names(tmp_path, tiny_config):
    """The batched group applies trainer.batch_order as a single run does: reversed, its numbers
    leave the drawn group's (the order was applied) and stay within rounding of each seed's own
    reversed run."""
    from emergence_bench.engine.seed_parallel import run_seed_parallel

    reversed_ = [tiny_config(seed=s, trainer={"batch_order": "reversed"}) for s in (0, 1)]
    grouped = run_seed_parallel(reversed_, tmp_path / "reversed")
    drawn = run_seed_parallel([tiny_config(seed=s) for s in (0, 1)], tmp_path / "drawn")
    alone = [run(c, tmp_path / f"alone{k}") for k, c in enumerate(reversed_)]
    for g, d, a in zip(grouped, drawn, alone):
        assert g["seed_parallel"]["k"] == 2
        assert g["metrics"]["final_eval_loss"] != d["metrics"]["final_eval_loss"]
        assert math.isclose(g["metrics"]["final_eval_loss"], a["metrics"]["final_eval_loss"], rel_tol=1e-4)
