import math
from types import SimpleNamespace

import lightning as L
import pytest

from emergence_bench.callbacks.emergence import Emergence
from emergence_bench.callbacks.plateau import Plateau
from emergence_bench.registry import register_callback

TASK = SimpleNamespace(chance_loss=math.log(2), floor_loss=0.0)


def scripted_plateau(**kwargs) -> Plateau:
    """200 steps at chance, a drop to 0.1 over 50 steps, 150 steps flat at 0.1."""
    plateau = Plateau(TASK, smoothing=0.0, window=20, **kwargs)
    for step in range(400):
        if step < 200:
            loss = math.log(2)
        elif step < 250:
            loss = math.log(2) - (math.log(2) - 0.1) * (step - 199) / 50
        else:
            loss = 0.1
        plateau.update(step, loss)
    return plateau


def test_plateau_first_drop_from_relative_threshold_and_the_held_plateau():
    report = scripted_plateau(frac=0.1).report()
    # threshold = ln2 - 0.1 ln2; the ramp crosses it when (step-199)/50·(ln2-0.1) > 0.1·ln2
    expected = next(s for s in range(200, 250)
                    if math.log(2) - (math.log(2) - 0.1) * (s - 199) / 50 < 0.9 * math.log(2))
    assert report["first_drop_step"] == expected and not report["first_drop_censored"]
    # The held plateau, on 10-step means: held at chance from the first mean (step 9) until the last
    # mean before the ramp (step 199), then a drop over the 50-step ramp; worth the name.
    assert (report["start_step"], report["end_step"], report["censored"]) == (9, 199, False)
    assert report["level"] == pytest.approx(math.log(2)) and report["worth"]
    assert report["threshold"] == 0.9 * math.log(2)
    assert report["budget"] == 400


def test_plateau_absolute_threshold_and_spans():
    report = scripted_plateau(threshold=0.3).report()
    expected = next(s for s in range(200, 250) if math.log(2) - (math.log(2) - 0.1) * (s - 199) / 50 < 0.3)
    assert report["first_drop_step"] == expected
    # Flat at chance (0..~200) and flat at the floor (~250..399): two spans around the drop.
    assert len(report["spans"]) == 2
    first, second = report["spans"]
    assert first[0] == 0 and 199 <= first[1] <= 205
    assert 240 <= second[0] <= 270 and second[1] == 399


def test_plateau_censored_when_never_crossed_and_smoothing_lags():
    plateau = Plateau(TASK)
    for step in range(100):
        plateau.update(step, math.log(2))
    assert plateau.report()["first_drop_step"] is None and plateau.report()["first_drop_censored"]
    assert plateau.report()["end_step"] is None and plateau.report()["censored"]  # still held at the end
    # Noise of ±0.1 around chance dips below the threshold on every other step; the EMA does not.
    noisy = [math.log(2) + (0.1 if step % 2 else -0.1) for step in range(100)]
    raw, smooth = Plateau(TASK, smoothing=0.0), Plateau(TASK, smoothing=0.9)
    for step, loss in enumerate(noisy):
        raw.update(step, loss)
        smooth.update(step, loss)
    assert raw.report()["first_drop_step"] == 0
    assert smooth.report()["first_drop_censored"]


def test_plateau_state_round_trip_continues_identically():
    full = scripted_plateau(frac=0.1)
    half = Plateau(TASK, smoothing=0.0, window=20, frac=0.1)
    for step, value in zip(full.steps[:220], full.smoothed[:220]):
        half.update(step, value)
    restored = Plateau(TASK, smoothing=0.0, window=20, frac=0.1)
    restored.load_state_dict(half.state_dict())
    for step, value in zip(full.steps[220:], full.smoothed[220:]):
        restored.update(step, value)
    assert restored.report() == full.report()


def test_emergence_overall_and_per_position():
    emergence = Emergence(TASK, threshold=0.9)
    curve = [(50, 0.5, [0.5, 0.5]), (100, 0.7, [0.95, 0.45]), (150, 0.92, [0.99, 0.85]), (200, 0.97, [1.0, 0.94])]
    for step, acc, cells in curve[:2]:
        emergence.update(step, acc, cells)
    restored = Emergence(TASK, threshold=0.9)
    restored.load_state_dict(emergence.state_dict())
    for step, acc, cells in curve[2:]:
        restored.update(step, acc, cells)
    report = restored.report()
    assert report["step"] == 150 and not report["censored"]
    assert report["per_position"] == [100, 200]
    assert report["history"][0] == [50, 0.5]


def test_emergence_censored():
    emergence = Emergence(TASK, threshold=0.95)
    emergence.update(50, 0.94, [0.96, 0.9])
    report = emergence.report()
    assert report["step"] is None and report["censored"] and report["per_position"] == [50, None]


def test_plateau_threshold_sits_below_a_shortcut_and_warns_when_a_fixed_one_does_not():
    # A task whose shortcut already reaches 0.5 (e.g. linear-map cells predictable from earlier outputs).
    task = SimpleNamespace(chance_loss=math.log(2), floor_loss=0.0, shortcut_loss=0.5)
    relative = Plateau(task, frac=0.1)
    assert relative.threshold == 0.9 * 0.5 and relative.measures_shortcut is False
    fixed = Plateau(task, threshold=0.6)
    assert fixed.measures_shortcut is True
    with pytest.warns(UserWarning, match="measures the shortcut"):
        fixed.setup(None, None, "fit")
    report = fixed.report()
    assert report["shortcut_loss"] == 0.5 and report["measures_shortcut"] is True
    assert Plateau(TASK).report()["measures_shortcut"] is None  # no shortcut known


def test_emergence_threshold_is_relative_to_the_reachable_accuracy():
    task = SimpleNamespace(max_accuracy=0.9)
    relative, absolute = Emergence(task, threshold=0.95), Emergence(task, threshold=0.95, relative=False)
    for callback in (relative, absolute):
        callback.update(100, 0.88, [0.88])
        callback.update(200, 0.96, [0.96])
    assert relative.threshold == pytest.approx(0.855) and relative.report()["step"] == 100
    assert absolute.threshold == 0.95 and absolute.report()["step"] == 200
    assert relative.report()["max_accuracy"] == 0.9 and relative.report()["relative"] is True


def test_emergence_can_end_the_run_where_it_emerged(tmp_path, tiny_config):
    from emergence_bench.engine.run import run
    from emergence_bench.engine.seed_parallel import run_seed_parallel
    config = tiny_config(task={"sparsity": 1, "batch_size": 64}, optim={"lr": 3e-3},
                         trainer={"max_steps": 400, "eval_every": 20}, callbacks={"emergence": {"stop": True}})
    alone = run(config, tmp_path / "alone")
    step = alone["emergence"]["step"]
    assert step is not None and alone["emergence"]["stopped"]
    assert alone["timing"]["steps"] == step < 400  # nothing trained past the eval where it emerged
    together = run_seed_parallel([config, {**config, "seed": 1}], tmp_path / "together")
    assert together[0]["timing"]["steps"] == step and together[0]["emergence"]["stopped"]
    assert all(r["status"] == "ok" for r in together)


@register_callback("test_loss_log")
class LossLog(L.Callback):
    """Keeps every (step, loss) that ``on_train_losses`` hands it."""

    def __init__(self, task):
        self.steps, self.losses = [], []

    def on_train_losses(self, trainer, pl_module, steps, losses):
        self.steps += steps
        self.losses += losses

    def report(self):
        return {"steps": self.steps, "losses": self.losses}


@pytest.mark.parametrize("stop", [None, 0.5])
def test_every_steps_loss_reaches_the_callbacks_once_in_order_though_read_every_log_every(stop, tmp_path, tiny_config):
    """Losses are read back every 7 steps here; a run stopped by emergence between reads (stop) still
    hands on its last ones, and both engines hand on the same."""
    from emergence_bench.engine.run import run
    from emergence_bench.engine.seed_parallel import run_seed_parallel

    callbacks = {"test_loss_log": {}}
    if stop is not None:
        callbacks["emergence"] = {"threshold": stop, "stop": True}
    config = tiny_config(callbacks=callbacks, trainer={"log_every": 7, "eval_every": 5})
    alone = run(config, tmp_path / "alone")
    steps = alone["timing"]["steps"]
    assert alone["test_loss_log"]["steps"] == list(range(steps))
    assert (steps < 20) == (stop is not None) and steps % 7 != 0  # it ended between two reads
    assert alone["metrics"]["final_train_loss"] == pytest.approx(sum(alone["test_loss_log"]["losses"][-50:])
                                                                 / min(steps, 50))
    together = run_seed_parallel([config, {**config, "seed": 1}], tmp_path / "together")[0]
    assert together["test_loss_log"]["steps"] == alone["test_loss_log"]["steps"]
    assert together["test_loss_log"]["losses"] == pytest.approx(alone["test_loss_log"]["losses"], rel=1e-4)
