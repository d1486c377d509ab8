"""state_size(length): the numbers one mixer layer keeps per sequence to continue generating.

Each built-in mixer's count is checked three ways: exact values from its hyperparameters, written
out here; how it scales with length (attention grows linearly, recurrent mixers stay constant); and,
for the recurrent mixers, against the state their step-by-step reference recurrence really carries
when it stands in for the mixer's core op in a forward pass, plus the buffers of the conv layers
(or token shift) the mixer really holds.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from emergence_bench.engine.model import SequenceModel
from emergence_bench.mixers import gated_deltanet, lru, mamba, mlstm, rwkv
from emergence_bench.mixers.base import MixerContext
from emergence_bench.mixers.ops import gated_delta_rule, lru_scan, rwkv7, selective_scan
from emergence_bench.mixers.ops import mlstm as mlstm_ops
from emergence_bench.registry import mixers as mixer_registry

D_MODEL, MAX_LEN = 32, 64
LENGTHS = (5, 300)

# name -> (hyperparameters, state size from them as a function of length)
EXPECTED = {
    # KV cache: key and value, H · head_dim each, per token.
    "transformer": ({"n_heads": 3, "head_dim": 5}, lambda L: 2 * 3 * 5 * L),
    # E = expand · D = 64 channels: h [E, d_state] + conv buffer [E, d_conv - 1].
    "mamba": ({"d_state": 8, "d_conv": 3, "expand": 2}, lambda L: 64 * 8 + 64 * 2),
    # H = 2 heads, K = 4, V = 4 · 1.5 = 6: S [H, V, K] + q, k, v conv buffers [(2HK + HV), conv - 1].
    "gated_deltanet": ({"n_heads": 2, "head_dim": 4, "expand_v": 1.5, "conv_size": 3},
                       lambda L: 2 * 6 * 4 + (2 * 2 * 4 + 2 * 6) * 2),
    # H = 32 / 8 = 4 heads of N = 8: S [H, N, N] + the previous token's input [D].
    "rwkv7": ({"head_dim": 8, "decay_lora": 4, "a_lora": 4, "v_lora": 4, "gate_lora": 4},
              lambda L: 4 * 8 * 8 + 32),
    # E = 2 · 32 = 64, H = 4 heads of K = 16: C [K, K], n [K], m per head + conv buffer [E, 3].
    "mlstm": ({"n_heads": 4, "proj_factor": 2, "conv_size": 4, "qkv_blocksize": 4},
              lambda L: 4 * (16 * 16 + 16 + 1) + 64 * 3),
    # 12 complex entries, 2 reals each.
    "lru": ({"d_state": 12}, lambda L: 2 * 12),
    # The values it mixes, H · head_dim per token; the mlp form mixes the inputs themselves, D per token.
    "mlp_mixer": ({"n_heads": 2, "head_dim": 3}, lambda L: 2 * 3 * L),
}
MLP_FORM = ({"token_mixing": "mlp", "expansion": 3}, lambda L: D_MODEL * L)
RECURRENT = ("mamba", "gated_deltanet", "rwkv7", "mlstm", "lru")


def build(name: str, layer_idx: int = 0, **hparams) -> nn.Module:
    return mixer_registry.get(name)(d_model=D_MODEL, max_len=MAX_LEN, layer_idx=layer_idx, **hparams)


def test_every_builtin_mixer_is_covered():
    builtin = {name for name in mixer_registry.names() if not name.startswith("test_")}
    assert builtin == set(EXPECTED)


@pytest.mark.parametrize("name", [*EXPECTED, "mlp_mixer/mlp"])
def test_exact_values_from_the_hyperparameters(name):
    hparams, expected = MLP_FORM if name == "mlp_mixer/mlp" else EXPECTED[name]
    mixer = build(name.split("/")[0], **hparams)
    for length in LENGTHS:
        size = mixer.state_size(length)
        assert isinstance(size, int) and size == expected(length), (name, length)


def test_attention_grows_linearly_and_recurrent_mixers_stay_constant():
    attention = build("transformer", **EXPECTED["transformer"][0])
    sizes = [attention.state_size(length) for length in (0, 1, 2, 100)]
    assert sizes[0] == 0 and sizes[2] - sizes[1] == sizes[1] > 0 and sizes[3] == 100 * sizes[1]
    for name in RECURRENT:
        mixer = build(name, **EXPECTED[name][0])
        assert mixer.state_size(1) == mixer.state_size(10_000) > 0, name


def _conv_buffer(mixer: nn.Module) -> int:
    """The past inputs the mixer's causal depthwise convs must keep: width - 1 per channel."""
    return sum(conv.in_channels * (conv.kernel_size[0] - 1)
               for conv in mixer.modules() if isinstance(conv, nn.Conv1d))


# The reference recurrences (mixers/ops), each returning (output, the tensors of its final state).
def _mamba_reference(*args):
    y, h = selective_scan.selective_scan_recurrent(*args, return_state=True)
    return y, [h]


def _gated_deltanet_reference(*args, scale, chunk_size=None):  # chunk_size: the chunked form's, unused here
    o, S = gated_delta_rule.gated_delta_rule_recurrent(*args, scale=scale, return_state=True)
    return o, [S]


def _rwkv_reference(*args):
    out, S = rwkv7.rwkv7_recurrent(*args)
    return out, [S]


def _mlstm_reference(*args):
    h, state = mlstm_ops.mlstm_recurrent(*args, return_state=True)
    return h, list(state)


def _lru_reference(*args):
    h_re, h_im = lru_scan.lru_recurrent(*args)
    return (h_re, h_im), [h_re[:, -1], h_im[:, -1]]  # the state after the last step: Re and Im of h


# name -> (the mixer's module, the name of its core op there, the reference run in its place)
REFERENCES = {
    "mamba": (mamba, "selective_scan", _mamba_reference),
    "gated_deltanet": (gated_deltanet, "gated_delta_rule_chunked", _gated_deltanet_reference),
    "rwkv7": (rwkv, "rwkv7_chunked", _rwkv_reference),
    "mlstm": (mlstm, "mlstm_parallel", _mlstm_reference),
    "lru": (lru, "lru_scan", _lru_reference),
}


@pytest.mark.parametrize("name", RECURRENT)
def test_recurrent_count_is_the_state_the_reference_recurrence_carries(name, monkeypatch):
    module, op, reference = REFERENCES[name]
    carried = []

    def stand_in(*args, **kwargs):
        out, state = reference(*args, **kwargs)
        carried.append(state)
        return out

    monkeypatch.setattr(module, op, stand_in)
    mixer = build(name, **EXPECTED[name][0])
    batch, length = 3, 7
    mixer(torch.randn(batch, length, D_MODEL), MixerContext())
    assert len(carried) == 1, "the reference did not stand in for the mixer's core op"
    state = sum(t.numel() for t in carried[0]) // batch
    shift = D_MODEL if name == "rwkv7" else 0  # RWKV-7's token shift keeps the previous input [D]
    assert mixer.state_size(length) == state + _conv_buffer(mixer) + shift


def test_the_model_sums_its_layers_and_says_none_when_a_layer_does_not_state_it():
    hparams = EXPECTED["rwkv7"][0]
    model = SequenceModel(vocab_size=8, max_len=MAX_LEN, mixer={"name": "rwkv7", **hparams}, d_model=D_MODEL,
                          n_layers=3)
    assert model.state_size(40) == 3 * EXPECTED["rwkv7"][1](40)
    attention = SequenceModel(vocab_size=8, max_len=MAX_LEN, mixer={"name": "transformer", "n_heads": 2,
                                                                   "head_dim": 4}, n_layers=2)
    assert attention.state_size(10) == 2 * 2 * 2 * 4 * 10
    # test_nan_after (tests/conftest.py) keeps the base class's default: not stated.
    unstated = SequenceModel(vocab_size=8, max_len=MAX_LEN, mixer={"name": "test_nan_after"}, n_layers=2)
    assert unstated.state_size(10) is None
    attention.blocks[1].mixer = nn.Linear(4, 4)  # a plugin that follows the contract without the base class
    assert attention.state_size(10) is None
    with pytest.raises(ValueError, match="length"):
        attention.state_size(-1)


def test_every_result_records_the_state_of_the_whole_sequence(tmp_path):
    from emergence_bench.engine.run import run
    config = {"task": {"name": "linear_map", "state_size": 4, "sparsity": 2, "batch_size": 8},
              "mixer": {"name": "transformer", "n_heads": 2, "head_dim": 4}, "model": {"d_model": 8, "n_layers": 2},
              "trainer": {"max_steps": 2, "eval_every": 2, "eval_batches": 1, "accelerator": "cpu"}}
    record = run(config, tmp_path)
    # The linear map S=4, T=2 feeds 7 tokens (the last is only predicted): K and V of 2 heads × 4, 2 layers.
    assert record["state_size"] == 2 * (2 * 2 * 4 * 7)
