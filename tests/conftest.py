"""Shared helpers (tiny configs that train in seconds, the CLI as a user runs it, oracle comparisons),
offered to the tests as fixtures of their own names; test-only mixers; the GPU markers.

A test takes a helper by naming it as an argument (``def test_x(tmp_path, tiny_config): ...``):
nothing imports this file, which pytest loads by itself and discourages importing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from emergence_bench.mixers.base import TokenMixer
from emergence_bench.registry import register_mixer

CLI = str(Path(sys.executable).parent / "emergence-bench")


def tiny_config(**sections) -> dict:
    """A linear-map config that trains in about a second; a section given with a ``name`` replaces
    the default one, any other section is merged into it."""
    config = {
        "seed": 0,
        "task": {"name": "linear_map", "state_size": 4, "sparsity": 2, "batch_size": 32},
        "mixer": {"name": "transformer", "n_heads": 2, "head_dim": 4},
        "model": {"d_model": 16, "n_layers": 1, "mlp_ratio": 2},
        "trainer": {"max_steps": 20, "eval_every": 10, "eval_batches": 1, "accelerator": "cpu"},
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict) and "name" not in value:
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    return config


def assert_causal(forward, x: torch.Tensor, t: int, atol: float = 1e-6) -> None:
    """Perturbing position t of ``x`` [B, L, D] leaves every output of ``forward`` before t
    unchanged and changes some output at or after t."""
    y = x.clone()
    y[:, t] += 1.0
    a, b = forward(x), forward(y)
    assert torch.allclose(a[:, :t], b[:, :t], atol=atol), "an output before t depends on input t"
    assert not torch.allclose(a[:, t:], b[:, t:]), "input t changes nothing"


def cli(*args, env=None, cwd=None, timeout=300) -> subprocess.CompletedProcess:
    """Run `emergence-bench ARGS` as a user types it."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, env=full_env,
                          cwd=cwd, timeout=timeout)


def fake_distribution(root: Path, source: str, entry_points: str) -> Path:
    """An installed distribution `fake-mixers` (a dist-info folder under ``root``, to put on
    PYTHONPATH) whose module ``fake_mixers`` is ``source``, with the given entry points."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "fake_mixers.py").write_text(source)
    info = root / "fake_mixers-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-mixers\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(entry_points)
    return root


@register_mixer("test_nan_after")
class NanAfter(TokenMixer):
    """A linear token-wise mixer whose output turns NaN after ``steps`` training forwards."""

    def __init__(self, d_model: int, max_len: int, layer_idx: int, steps: int = 5):
        super().__init__(d_model, max_len, layer_idx)
        self.proj = nn.Linear(d_model, d_model)
        self.steps, self.calls = steps, 0

    def forward(self, x, ctx):
        self.calls += self.training
        out = self.proj(x)
        return out * float("nan") if self.calls > self.steps else out


@register_mixer("test_broken")
class Broken(TokenMixer):
    """Raises in forward: a run that fails."""

    def forward(self, x, ctx):
        raise RuntimeError("this mixer is broken on purpose")


@pytest.hookimpl(tryfirst=True)  # before `-m` selects on the gpu marker this adds
def pytest_collection_modifyitems(config, items):
    """The GPU markers, in one place: ``gpu`` skips without CUDA; ``requires_kernel(module)`` is a gpu
    test that also skips when the kernel package ``module`` does not import."""
    from emergence_bench.mixers.backend import importable

    for item in items:
        kernel = item.get_closest_marker("requires_kernel")
        if kernel is not None:
            item.add_marker(pytest.mark.gpu)
        if item.get_closest_marker("gpu") is None:
            continue
        if not torch.cuda.is_available():
            item.add_marker(pytest.mark.skip(reason="needs a CUDA device"))
        elif kernel is not None and not importable(kernel.args[0]):
            item.add_marker(pytest.mark.skip(reason=f"needs the kernel package {kernel.args[0]}"))


@pytest.fixture(autouse=True)
def _threads():
    torch.set_num_threads(1)


def output_and_grads(fn, inputs, upstream):
    """fn(*inputs) -> out; returns (out, the gradients of <out, upstream> w.r.t. each input): what an
    oracle comparison holds two implementations to."""
    out = fn(*inputs)
    return out.detach(), torch.autograd.grad((out * upstream).sum(), inputs)


def assert_outputs_and_grads_close(ours, theirs, names, atol, rtol):
    """Two ``output_and_grads`` results agree: the outputs, then each input's gradient (named)."""
    (out1, grads1), (out2, grads2) = ours, theirs
    torch.testing.assert_close(out1, out2, atol=atol, rtol=rtol)
    for name, a, b in zip(names, grads1, grads2):
        torch.testing.assert_close(a, b, atol=atol, rtol=rtol, msg=lambda m, n=name: f"grad {n}: {m}")


def assert_close_scaled(actual, expected, tol, what=""):
    """max |actual - expected| ≤ tol · max |expected| (a scale-free check for sums of many terms)."""
    err = (actual.double() - expected.double()).abs().max().item()
    scale = max(expected.double().abs().max().item(), 1e-30)
    assert err <= tol * scale, f"{what}: max error {err:.3g} > {tol:g} × {scale:.3g}"


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm().clamp_min(1e-12)).item()


def assert_kernel_matches_reference(mixer, x: torch.Tensor, upstream: torch.Tensor, monkeypatch,
                                    tolerance: float) -> None:
    """``mixer``'s two backends (chosen with EMERGENCE_BENCH_BACKEND) agree within ``tolerance``
    (relative) on the output for x [B, L, D], its input gradient and every parameter's gradient of
    <output, upstream>."""
    from emergence_bench.mixers.backend import ENV
    from emergence_bench.mixers.base import MixerContext

    def forward_and_grads(backend):
        monkeypatch.setenv(ENV, backend)
        mixer.zero_grad()
        x_leaf = x.clone().requires_grad_()
        out = mixer(x_leaf, MixerContext())
        assert mixer.backend == backend
        (out * upstream).sum().backward()
        return out.detach(), x_leaf.grad, {name: p.grad.clone() for name, p in mixer.named_parameters()}

    out_k, dx_k, grads_k = forward_and_grads("kernel")
    out_r, dx_r, grads_r = forward_and_grads("reference")
    assert relative_error(out_k, out_r) < tolerance
    assert relative_error(dx_k, dx_r) < tolerance
    for name in grads_r:
        assert relative_error(grads_k[name], grads_r[name]) < tolerance, name


# ---- the helpers above, as fixtures ----------------------------------------------------------------


def _offer(helper):
    """``helper`` as a session-scoped fixture of its own name, whose value is the helper itself."""
    def fixture():
        return helper
    fixture.__doc__ = helper.__doc__
    return pytest.fixture(scope="session", name=helper.__name__)(fixture)


tiny_config_fixture = _offer(tiny_config)
assert_causal_fixture = _offer(assert_causal)
cli_fixture = _offer(cli)
fake_distribution_fixture = _offer(fake_distribution)
output_and_grads_fixture = _offer(output_and_grads)
assert_outputs_and_grads_close_fixture = _offer(assert_outputs_and_grads_close)
assert_close_scaled_fixture = _offer(assert_close_scaled)
relative_error_fixture = _offer(relative_error)
assert_kernel_matches_reference_fixture = _offer(assert_kernel_matches_reference)


@pytest.fixture(scope="session")
def cli_executable() -> str:
    """The path of this environment's `emergence-bench` command."""
    return CLI
