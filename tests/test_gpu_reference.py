"""On a GPU, every built-in mixer's pure-PyTorch path computes what it computes on the CPU.

For the kernel-backed mixers this is the reference backend, which the seed-parallel runs and every
machine without the upstream package use. For mamba it is the only check a GPU lease can make: its
kernel needs mamba-ssm's CUDA extension, which no lease has time to build (docs/gpu.md).
"""

import copy

import pytest
import torch

from emergence_bench import registry
from emergence_bench.engine.model import SequenceModel
from emergence_bench.mixers.backend import ENV

# float32 on both sides, TF32 off: only the order of floating-point sums differs. (float32 against
# float64, both on the CPU, differ by up to 2e-5 in these models' gradients: mlstm's.)
TOLERANCE = 1e-3
VOCAB, LENGTH, BATCH = 8, 64, 4


def builtin_mixers() -> list[str]:
    package = f"{registry.mixers.builtins}."
    return [name for name in registry.mixers.names() if registry.mixers.get(name).__module__.startswith(package)]


def loss_and_grads(model: SequenceModel, tokens: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """tokens [B, L] -> (logits [B, L, V] on the CPU, each parameter's gradient of a fixed loss, on the CPU)."""
    logits = model(tokens)
    weights = torch.linspace(-1, 1, logits.shape[-1], device=logits.device)  # every logit matters
    loss = (logits.log_softmax(-1) * weights).sum()
    grads = torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)
    return logits.detach().cpu(), [g.cpu() if g is not None else None for g in grads]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", builtin_mixers())
def test_reference_on_gpu_matches_cpu(name, monkeypatch, relative_error):
    monkeypatch.setenv(ENV, "reference")
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    torch.manual_seed(0)
    cpu = SequenceModel(VOCAB, LENGTH, {"name": name}, d_model=64, n_layers=2)
    gpu = copy.deepcopy(cpu).cuda()
    tokens = torch.randint(0, VOCAB, (BATCH, LENGTH))

    logits_cpu, grads_cpu = loss_and_grads(cpu, tokens)
    logits_gpu, grads_gpu = loss_and_grads(gpu, tokens.cuda())

    assert relative_error(logits_gpu, logits_cpu) < TOLERANCE, "logits"
    for (param, _), g_gpu, g_cpu in zip(cpu.named_parameters(), grads_gpu, grads_cpu):
        assert (g_gpu is None) == (g_cpu is None), param
        if g_cpu is not None:
            error = relative_error(g_gpu, g_cpu)
            assert error < TOLERANCE, f"d{param}: relative error {error:.2e}"
