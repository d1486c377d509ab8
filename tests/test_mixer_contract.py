"""The TokenMixer contract, checked for every registered mixer (built-ins and installed plugins).

The checks are `emergence-bench check-mixer`'s own (``emergence_bench.commands.mixer_checks``), so
what a plugin author runs and what these tests assert cannot drift apart.
"""

import pytest

from emergence_bench import registry
from emergence_bench.commands import mixer_checks
from emergence_bench.engine.run import run

D, L = 16, 12
NAMES = [name for name in registry.mixers.names() if not name.startswith("test_")]
# Each mixer at the small settings registered beside it (a plugin without them: its defaults), and
# each of its other forms on its own ("name:form" -> its name and settings).
SMALL = {}
for name in NAMES:
    cls = registry.mixers.get(name)
    SMALL[name] = dict(getattr(cls, "small", {}))
    SMALL.update({f"{name}:{form}": dict(settings) for form, settings in getattr(cls, "forms", {}).items()})
MIXERS = list(SMALL)


def subject(form: str) -> mixer_checks.Subject:
    return mixer_checks.Subject(form.split(":")[0], SMALL.get(form, {}), d_model=D, length=L)


# Every check but `learns` and `noise` (their own tests below: the slow ones) and `speed` (speed
# claims live in `emergence-bench speed`, never in a timed unit test).
CONTRACT = [c for c in mixer_checks.CHECKS.values() if c.check_name not in ("learns", "noise", "speed")]


@pytest.mark.parametrize("check", CONTRACT, ids=lambda c: c.check_name)
@pytest.mark.parametrize("name", MIXERS)
def test_mixer_meets_the_contract(name, check):
    # builds, shape, causal, gradients, deterministic, state_dict, attention (when it exposes any:
    # causal, rows sum to 1, bias and patch act), seed_parallel (a fallback is a warning, not a failure)
    result = check(subject(name))
    assert not result.failed, f"{result.check}: {result.detail}"


@pytest.mark.parametrize("name", NAMES)
def test_the_registered_settings_build_at_their_widths(name):
    """``small`` (and every form) at d_model 16 and ``width_matched`` at 64: each a set of the
    mixer's own config keys that builds, so tests, check-mixer and speed can rely on them."""
    cls = registry.mixers.get(name)
    for settings in (getattr(cls, "small", {}), *getattr(cls, "forms", {}).values()):
        mixer_checks.Subject(name, dict(settings), d_model=D, length=L).build()
    mixer_checks.Subject(name, dict(getattr(cls, "width_matched", {})), d_model=64, length=L).build()


@pytest.mark.parametrize("name", MIXERS)
def test_a_short_run_learns_a_one_sparse_map(name):
    result = mixer_checks.check_learns(subject(name))
    assert result.status == mixer_checks.PASS, result.detail


@pytest.mark.parametrize("name", NAMES)
def test_trained_on_noise_a_mixer_stays_at_chance(name):
    """No leak from the future in training: the next random token is not predictable from the past."""
    result = mixer_checks.check_noise(subject(name))
    assert result.status == mixer_checks.PASS, result.detail


@pytest.mark.parametrize("name", [m for m in MIXERS if not getattr(registry.mixers.get(m.split(":")[0]),
                                                                  "exposes_attention", False)])
def test_a_mixer_without_attention_is_measured_by_the_influence_probe(name, tmp_path, tiny_config):
    mixer = {"name": name.split(":")[0], **SMALL.get(name, {})}
    record = run(tiny_config(mixer=mixer, callbacks={"influence_probe": {"probe_size": 4}}), tmp_path)
    assert record["status"] == "ok", record["error"]
    assert record["attention_probe"]["applicable"] is False  # no attention scores: n/a, not silence
    influence = record["influence_probe"]["final_mass"]
    assert len(influence) == 1 and 0 <= influence[0] <= 1
