"""EmergenceModule: which rows the loss covers, the full-sequence loss, and what the model reads."""

import math

import pytest
import torch
import torch.nn.functional as F

from emergence_bench.config import OptimConfig
from emergence_bench.engine.model import SequenceModel
from emergence_bench.engine.module import EmergenceModule
from emergence_bench.engine.run import run
from emergence_bench.engine.seed_parallel import run_seed_parallel
from emergence_bench.tasks.linear_map import LinearMap


def module_for(task, train_on="scored"):
    torch.manual_seed(0)
    model = SequenceModel(task.vocab_size, task.seq_len, {"name": "transformer", "n_heads": 2, "head_dim": 4},
                          d_model=16)
    return EmergenceModule(model, task, OptimConfig(), 10, train_on=train_on)


@pytest.mark.parametrize("train_on", ["scored", "all"])
def test_the_training_loss_covers_the_rows_asked_for_and_the_full_sequence_loss_every_row(train_on):
    task = LinearMap(6, 2, batch_size=16)
    module = module_for(task, train_on)
    tokens = task.batch("train", 0)
    loss = module.training_step(tokens, 0)
    logits = module.model(tokens[:, :-1])  # [B, L, V]
    every_row = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
    mask = task.loss_mask
    scored = F.cross_entropy(logits[:, mask].flatten(0, 1), tokens[:, 1:][:, mask].flatten())
    assert float(loss) == pytest.approx(float(every_row if train_on == "all" else scored), rel=1e-5)
    assert module.recent_full_sequence_losses[-1] == pytest.approx(float(every_row), rel=1e-5)
    assert module.last_train_loss == pytest.approx(float(scored), rel=1e-5)  # plateaus read the scored loss
    # Eval: the full-sequence loss averages every row of every eval batch.
    module.on_validation_epoch_start()
    module.validation_step(tokens, 0)
    module.log_dict = lambda *args, **kwargs: None  # no trainer attached
    module.on_validation_epoch_end()
    assert module.last_eval.full_sequence_loss == pytest.approx(float(every_row), rel=1e-5)
    assert module.last_eval.loss == pytest.approx(float(scored), rel=1e-5)


def test_a_bad_train_on_is_rejected():
    with pytest.raises(ValueError, match="train_on"):
        module_for(LinearMap(4, 1), "x1")


def test_blank_outputs_reach_the_model_and_seed_parallel_matches_a_run_alone(tmp_path, tiny_config):
    config = tiny_config(task={"blank_outputs": True}, trainer={"train_on": "all", "max_steps": 10})
    alone = run(config, tmp_path / "alone")
    assert alone["status"] == "ok" and alone["task_facts"]["shortcut_cells"] == [False] * 4
    assert alone["task_facts"]["chance_loss"] == pytest.approx(math.log(2))
    together = run_seed_parallel([config, {**config, "seed": 1}], tmp_path / "together")[0]
    assert "group" in together["seed_parallel"]  # batched, not the fallback
    for key in ("final_train_loss", "final_eval_loss", "final_train_full_sequence_loss",
                "final_eval_full_sequence_loss"):
        assert together["metrics"][key] == pytest.approx(alone["metrics"][key], rel=1e-4, abs=1e-5), key
    # What the model reads, in both engines: x0, then blanks where x1 stands.
    from emergence_bench.engine.seed_stack import SeedStack
    task = LinearMap(4, 2, blank_outputs=True)
    tokens = task.batch("eval", 0)
    assert torch.all(task.model_inputs(tokens)[:, 4:] == 2) and torch.equal(task.model_inputs(tokens)[:, :4],
                                                                            tokens[:, :4])
    module = module_for(task)
    with torch.no_grad():
        expected = module.model(task.model_inputs(tokens))
        assert not torch.allclose(expected, module.model(tokens[:, :-1]))  # the blanks change the output
        assert torch.equal(module.all_rows(tokens)[0], expected)
        stack = SeedStack([module.model], task, OptimConfig(), 10)
        assert torch.allclose(stack.logits(tokens, {})[0], expected, atol=1e-6)


def test_the_fused_adamw_equals_torchs_reference_adamw_on_strided_gradients():
    from emergence_bench.engine.optim import adamw

    torch.manual_seed(0)
    start, grads = torch.randn(8, 16), [torch.randn(16, 8).t() for _ in range(3)]  # strided, as vmap gives
    assert not grads[0].is_contiguous()
    fused, plain = torch.nn.Parameter(start.clone()), torch.nn.Parameter(start.clone())
    ours = adamw([fused], [True], OptimConfig(weight_decay=0.1), 10)["optimizer"]
    reference = torch.optim.AdamW([plain], lr=ours.defaults["lr"], weight_decay=0.1, betas=ours.defaults["betas"],
                                  foreach=False)
    assert ours.defaults["fused"]
    for g in grads:
        fused.grad, plain.grad = g.clone(), g.clone()
        ours.step(lambda: None)
        reference.step()
    torch.testing.assert_close(fused, plain, rtol=1e-6, atol=1e-7)


def test_the_loss_buffer_is_read_every_n_steps_and_at_the_last():
    from emergence_bench.engine.training import LossBuffer

    buffer = LossBuffer(every=3, max_steps=7)
    assert [s for s in range(7) if buffer.due(s)] == [2, 5, 6]
    for s in range(3):
        buffer.append(s, torch.tensor([float(s), 10.0 + s]))
    assert buffer.read() == ([0, 1, 2], [0.0, 1.0, 2.0], [10.0, 11.0, 12.0])
    assert buffer.read() == ([], [], [])
    buffer.append(5, torch.tensor([[1.0, 2.0], [3.0, 4.0]]))  # K = 2 seeds: [2, K]
    assert buffer.read() == ([5], [[1.0, 2.0]], [[3.0, 4.0]])


def test_a_non_finite_loss_is_found_at_its_step():
    from emergence_bench.engine.training import finite_prefix

    assert finite_prefix([1.0, 2.0], [3.0, 4.0], [7, 8]) == (2, None)
    finite, error = finite_prefix([1.0, 2.0, math.nan], [3.0, math.inf, 1.0], [7, 8, 9])
    assert finite == 1 and "inf at step 8" in str(error)
