"""`emergence-bench check-mixer`: a correct plugin mixer passes, and a broken one fails naming the check."""

import numpy as np
import torch
from torch import nn

from emergence_bench import cli
from emergence_bench.commands import mixer_checks
from emergence_bench.mixers.base import TokenMixer
from emergence_bench.registry import register_mixer

CHEAP = ("learns", "noise", "speed")  # the slow checks, run once (on the correct mixer) in this file


@register_mixer("test_check_prefix_mix")
class PrefixMix(TokenMixer):
    """out = W_o (M ⊙ causal) W_v x: one learned [max_len, max_len] mixing matrix, causally masked.

    Shapes: x [B, L, D] -> v [B, L, width] -> mixed [B, L, width] -> out [B, L, D].
    """

    def __init__(self, d_model, max_len, layer_idx, width: int = 16):
        super().__init__(d_model, max_len, layer_idx)
        self.value, self.out = nn.Linear(d_model, width), nn.Linear(width, d_model)
        causal = torch.ones(max_len, max_len).tril()
        self.register_buffer("causal", causal, persistent=False)
        self.mix = nn.Parameter(causal / causal.sum(-1, keepdim=True))  # each row: the mean of its prefix

    def forward(self, x, ctx):
        L = x.shape[1]
        return self.out((self.mix[:L, :L] * self.causal[:L, :L]) @ self.value(x))


@register_mixer("test_check_peek")
class Peek(PrefixMix):
    """PrefixMix plus, from position ``start`` on, the next token: position t sees t + 1."""

    def __init__(self, d_model, max_len, layer_idx, width: int = 16, start: int = 0):
        super().__init__(d_model, max_len, layer_idx, width)
        self.start = start

    def forward(self, x, ctx):
        ahead = torch.zeros_like(x)
        ahead[:, self.start:-1] = x[:, self.start + 1:]
        return super().forward(x, ctx) + ahead


@register_mixer("test_check_unused")
class Unused(PrefixMix):
    """PrefixMix with a projection that forward never uses."""

    def __init__(self, d_model, max_len, layer_idx, width: int = 16):
        super().__init__(d_model, max_len, layer_idx, width)
        self.unused = nn.Linear(d_model, d_model)


@register_mixer("test_check_noisy")
class Noisy(PrefixMix):
    """PrefixMix plus fresh noise on every forward, in eval mode too."""

    def forward(self, x, ctx):
        out = super().forward(x, ctx)
        return out + 0.01 * torch.randn_like(out)


@register_mixer("test_check_unseeded")
class Unseeded(PrefixMix):
    """PrefixMix whose mixing matrix is drawn from numpy's unseeded generator."""

    def __init__(self, d_model, max_len, layer_idx, width: int = 16):
        super().__init__(d_model, max_len, layer_idx, width)
        with torch.no_grad():
            self.mix += torch.from_numpy(np.random.default_rng().normal(0, 0.01, (max_len, max_len))).float()


def by_check(results) -> dict:
    return {r.check: r for r in results}


def test_a_correct_mixer_passes_every_check():
    results = by_check(mixer_checks.check_mixer("test_check_prefix_mix", {"width": 8}))
    assert list(results) == mixer_checks.check_names()
    assert [name for name, r in results.items() if r.status != mixer_checks.PASS] == ["attention", "speed"]
    assert "PrefixMix(width=8)" in results["builds"].detail
    assert "exposes no attention scores" in results["attention"].detail
    assert "attention_probe" in results["attention"].detail and "attention_bias" in results["attention"].detail
    assert results["learns"].detail.startswith("eval loss ")
    assert "× at L=64" in results["speed"].detail and "× at L=256" in results["speed"].detail


def test_a_mixer_that_looks_ahead_fails_causal_naming_the_first_position_that_saw_the_future():
    results = by_check(mixer_checks.check_mixer("test_check_peek", {"start": 3}, skip=CHEAP))
    assert [name for name, r in results.items() if r.failed] == ["causal"]
    assert "output 3 changes when token 4 is perturbed (position 3 sees 1 position ahead)" in results["causal"].detail


def test_a_mixer_that_sees_the_next_token_beats_chance_on_noise_and_fails():
    result = mixer_checks.check_noise(mixer_checks.Subject("test_check_peek", {"start": 0}))
    assert result.failed and "above chance 0.125: it sees the future in training" in result.detail


def test_a_parameter_without_gradient_fails_gradients_naming_it():
    results = by_check(mixer_checks.check_mixer("test_check_unused", skip=CHEAP))
    assert [name for name, r in results.items() if r.failed] == ["gradients"]
    assert "no gradient reaches layer 0 unused.weight, layer 0 unused.bias, layer 1 unused.weight" \
        in results["gradients"].detail


def test_a_nondeterministic_mixer_fails_deterministic():
    results = by_check(mixer_checks.check_mixer("test_check_noisy", skip=CHEAP))
    assert [name for name, r in results.items() if r.failed] == ["deterministic"]
    assert "in eval mode two forwards of one input differ" in results["deterministic"].detail
    assert results["seed_parallel"].status == mixer_checks.WARN  # vmap refuses the randomness: seeds one by one
    unseeded = mixer_checks.check_deterministic(mixer_checks.Subject("test_check_unseeded"))
    assert unseeded.failed and "two builds under seed 0 differ in mix" in unseeded.detail


def test_a_mixer_that_does_not_build_fails_builds_and_skips_the_rest():
    results = mixer_checks.check_mixer("test_check_prefix_mix", {"widht": 8})
    assert results[0].check == "builds" and results[0].failed and "'mixer.widht'" in results[0].detail
    assert all(r.status == mixer_checks.SKIP for r in results[1:])


def test_the_attention_a_mixer_exposes_is_checked():
    result = mixer_checks.check_attention(mixer_checks.Subject("transformer", {"n_heads": 2, "head_dim": 4}))
    assert result.status == mixer_checks.PASS and "2 heads" in result.detail


PLUGIN = '''
import torch
from torch import nn


class PrefixMix(nn.Module):
    """A plugin that is not a TokenMixer subclass: only the contract."""

    def __init__(self, d_model, max_len, layer_idx, width=8):
        super().__init__()
        self.value, self.out = nn.Linear(d_model, width), nn.Linear(width, d_model)
        causal = torch.ones(max_len, max_len).tril()
        self.register_buffer("causal", causal, persistent=False)
        self.mix = nn.Parameter(causal / causal.sum(-1, keepdim=True))

    def forward(self, x, ctx):
        L = x.shape[1]
        return self.out((self.mix[:L, :L] * self.causal[:L, :L]) @ self.value(x))
'''


def test_the_command_on_an_installed_plugin_prints_the_table_and_exits_zero(tmp_path, cli, fake_distribution):
    site = fake_distribution(tmp_path / "site", PLUGIN,
                             "[emergence_bench.mixers]\nprefix_mix = fake_mixers:PrefixMix\n")
    result = cli("check-mixer", "prefix_mix", "--mixer.width", "4", "--skip", "speed",
                 env={"PYTHONPATH": str(site), "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "check-mixer prefix_mix (fake_mixers.PrefixMix)"
    assert lines[1].split() == ["check", "result", "detail"]
    rows = {line.split()[0]: line.split()[1] for line in lines[2:-1]}
    assert rows == {"builds": "pass", "shape": "pass", "causal": "pass", "gradients": "pass",
                    "deterministic": "pass", "state_dict": "pass", "attention": "info",
                    "seed_parallel": "pass", "learns": "pass", "noise": "pass", "speed": "skip"}
    assert "PrefixMix(width=4)" in result.stdout
    assert lines[-1].startswith("prefix_mix passes every check")


def test_the_command_exits_one_naming_the_failed_check_and_two_on_bad_input(capsys):
    assert cli.main(["check-mixer", "test_check_peek", "--mixer.start", "3", "--skip", "learns,noise,speed"]) == 1
    out = capsys.readouterr().out
    assert "  causal         FAIL    not causal: output 3 changes when token 4 is perturbed" in out
    assert out.splitlines()[-1] == "1 of 11 checks failed: causal"
    assert cli.main(["check-mixer", "transfomer"]) == 2
    assert "Did you mean 'transformer'" in capsys.readouterr().err
    assert cli.main(["check-mixer", "transformer", "--task.state_size", "4"]) == 2
    assert "--mixer.KEY VALUE" in capsys.readouterr().err
    assert cli.main(["check-mixer", "transformer", "--skip", "speedy"]) == 2
    assert "no check named speedy" in capsys.readouterr().err


@register_mixer("test_check_nan")
class NotANumber(PrefixMix):
    """PrefixMix whose output is NaN everywhere (a division by zero in a plugin, say)."""

    def forward(self, x, ctx):
        return super().forward(x, ctx) * float("nan")


def test_a_mixer_whose_output_is_nan_is_told_so_by_every_check_that_compares_outputs():
    results = by_check(mixer_checks.check_mixer("test_check_nan", skip=("learns", "speed")))
    assert results["shape"].failed and "NaN or inf" in results["shape"].detail
    for name in ("causal", "gradients", "deterministic", "state_dict", "noise"):
        assert results[name].failed and results[name].detail.startswith("forward returns NaN or inf (100% of"), name
    assert "state outside" not in results["state_dict"].detail


def test_a_misspelt_mixer_key_is_bad_input_not_a_failed_check(capsys):
    assert cli.main(["check-mixer", "test_check_prefix_mix", "--mixer.widht", "16"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "mixer.widht" in err and "width" in err


def test_the_help_lists_every_check_by_name():
    from emergence_bench.commands.check_mixer import CHECK_NAMES

    assert list(CHECK_NAMES) == mixer_checks.check_names()
