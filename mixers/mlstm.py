"""mLSTM (Beck et al., 2024, "xLSTM: Extended Long Short-Term Memory"): an LSTM whose memory is a
matrix, written with an exponential input gate and read with a query.

Per head, with query q_t and key k_t [K], value v_t [V], input-gate pre-activation ĩ_t and forget gate
f_t = σ(f̃_t) (``forget_gate: sigmoid``) or exp(f̃_t) (``exp``), the memory C_t [V, K], normaliser
n_t [K] and output h_t [V] are::

    C_t = f_t C_{t-1} + i_t v_t k_tᵀ            i_t = exp(ĩ_t)
    n_t = f_t n_{t-1} + i_t k_t
    h_t = C_t q̂_t / max(|n_tᵀ q̂_t|, 1)          q̂_t = q_t / √K

and the block's output gate multiplies h_t afterwards. exp(ĩ) overflows for ĩ > 88 in float32, so every
form carries the max-stabiliser m_t = max(log f_t + m_{t-1}, ĩ_t) and stores C and n scaled by
exp(-m_t); the 1 of the normaliser then reads exp(-m_t). h_t does not depend on m (it cancels), except
through ``eps``, a guard added to the stabilised denominator (as xLSTM and mlstm-kernels add it).

The core op (``mixers/ops/mlstm.py``) has two backends over the same tensors: mlstm-kernels'
chunkwise Triton kernel on CUDA, sigmoid forget gate only, and the pure-PyTorch reference: the
stabilised quadratic form (as xLSTM trains) up to ``quadratic_up_to`` steps, the stabilised
chunkwise form (chunks of ``CHUNK``) above: the same numbers up to summation order, at a cost linear
in the length. mlstm-kernels ships under the NXAI Community License (not an OSI licence), so it is
only ever an optional extra: the ``dev`` oracle and the ``kernels`` GPU path.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from emergence_bench.mixers.backend import ENV, KERNEL, REFERENCE, choose, requested
from emergence_bench.mixers.base import MixerContext, TokenMixer
from emergence_bench.mixers.init import WeightInit
from emergence_bench.mixers.ops.mlstm import KERNEL_MODULE, mlstm_chunkwise, mlstm_kernel, mlstm_parallel
from emergence_bench.registry import register_mixer

# The reference runs its quadratic form up to ``quadratic_up_to`` steps and chunks of CHUNK above: a
# float order, not a model choice. The ranking's whole training step (8 seeds batched, 1 thread) is
# 1.19x, 1.09x and 1.03x slower chunked at 20, 32 and 64 steps, while the core op alone is 8x
# faster chunked at 128 and 13x at 256 (docs/speed.md): so quadratic up to 64.
QUADRATIC_UP_TO, CHUNK = 64, 16

FORGET_GATES = ("sigmoid", "exp")
NORM_EPS = 1e-5  # the per-head LayerNorm on the cell output


def _headwise(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """A block-diagonal linear map: x [..., E] with weight [E/b, b, b] (blocks [out, in]) -> [..., E]."""
    blocks = x.unflatten(-1, (weight.shape[0], weight.shape[2]))  # [..., E/b, b]
    return torch.einsum("...ni,noi->...no", blocks, weight).flatten(-2)


@register_mixer("mlstm")
class MLSTM(TokenMixer):
    """The mLSTM block of xLSTM (the paper's pre-up-projection mLSTM block) as a token mixer.

    x [B, L, D] -up_proj-> x_m, z [B, L, E] (E = inner_dim = proj_factor·D)
    x_m -causal depthwise conv (width conv_size) + SiLU-> x_c [B, L, E]
    q, k = headwise(x_c), v = headwise(x_m) [B, L, E], block-diagonal with blocks of qkv_blocksize
    ĩ, f̃ = linear(q ‖ k ‖ v) [B, L, H]
    h = mLSTM(q, k, v, ĩ, f̃) [B, L, H, E/H] -per-head LayerNorm-> + skip ⊙ x_c -> ⊙ SiLU(z) (the
    output gate) [B, L, E] -down_proj-> [B, L, D]

    ``n_heads`` H heads of size E/H for q, k and v alike. Left out of the paper's block: the
    pre-LayerNorm and the residual (SequenceModel's block has both) and dropout; the inner width is
    not rounded up to a multiple of 64 as the official code does. The gates keep xLSTM's init (zero
    weights, forget biases spread over [3, 6] across heads, input biases N(0, 0.1)), whatever
    ``model.init`` names; the projections follow it (``init_weights``).
    """

    exposes_attention = False
    n_heads: int
    backends = (REFERENCE, KERNEL)
    small = {"n_heads": 2, "qkv_blocksize": 4}
    width_matched = {}  # its defaults: 4 heads over an inner width of 2 · d_model
    forms = {"exp": {**small, "forget_gate": "exp"}}

    def __init__(self, d_model: int, max_len: int, layer_idx: int, n_heads: int = 4, proj_factor: float = 2,
                 conv_size: int = 4, qkv_blocksize: int = 4, forget_gate: str = "sigmoid",
                 quadratic_up_to: int = QUADRATIC_UP_TO) -> None:
        super().__init__(d_model, max_len, layer_idx)
        if not (isinstance(n_heads, int) and n_heads >= 1):
            raise ValueError(f"n_heads must be an integer ≥ 1, got {n_heads!r}")
        inner = proj_factor * d_model if isinstance(proj_factor, (int, float)) else 0
        if not (inner >= n_heads and inner == int(inner) and int(inner) % n_heads == 0):
            raise ValueError(f"proj_factor must be > 0 with proj_factor·d_model a whole multiple of n_heads, "
                             f"got proj_factor={proj_factor!r} (d_model={d_model}, n_heads={n_heads})")
        E = int(inner)
        if not (isinstance(qkv_blocksize, int) and qkv_blocksize >= 1 and E % qkv_blocksize == 0):
            raise ValueError(f"qkv_blocksize must be an integer ≥ 1 that divides the inner width {E}, "
                             f"got {qkv_blocksize!r}")
        if not (isinstance(conv_size, int) and conv_size >= 1):
            raise ValueError(f"conv_size must be an integer ≥ 1, got {conv_size!r}")
        if forget_gate not in FORGET_GATES:
            raise ValueError(f"forget_gate must be one of {', '.join(FORGET_GATES)}, got {forget_gate!r}")
        if not (isinstance(quadratic_up_to, int) and quadratic_up_to >= 0):
            raise ValueError(f"quadratic_up_to must be an integer ≥ 0 (0: always chunkwise), got {quadratic_up_to!r}")
        self.n_heads, self.proj_factor, self.inner_dim, self.head_dim = n_heads, proj_factor, E, E // n_heads
        self.conv_size, self.qkv_blocksize, self.forget_gate = conv_size, qkv_blocksize, forget_gate
        self.quadratic_up_to = quadratic_up_to  # the longest sequence the quadratic form runs (a float order)

        self.up_proj = nn.Linear(d_model, 2 * E, bias=False)
        self.conv1d = nn.Conv1d(E, E, conv_size, groups=E, bias=True)  # left-padded in forward: causal
        blocks = (E // qkv_blocksize, qkv_blocksize, qkv_blocksize)
        self.q_weight, self.k_weight, self.v_weight = (nn.Parameter(torch.empty(blocks)) for _ in range(3))
        self.igate = nn.Linear(3 * E, n_heads)
        self.fgate = nn.Linear(3 * E, n_heads)
        self.out_norm_weight = nn.Parameter(torch.ones(E))
        self.skip = nn.Parameter(torch.ones(E))  # the learnable skip from the conv branch
        self.down_proj = nn.Linear(E, d_model, bias=False)
        self.last_backend = REFERENCE
        self.init_weights(WeightInit())
        self.reset_gate_parameters()

    def state_size(self, length: int) -> int:
        """Per head the memory C [K, K], normaliser n [K] and stabiliser m, and the conv's last
        conv_size - 1 inputs [E, conv_size - 1]; no length."""
        H, K = self.n_heads, self.head_dim
        return H * (K * K + K + 1) + self.inner_dim * (self.conv_size - 1)

    def init_weights(self, init: WeightInit) -> None:
        """The up/down projections and the block-diagonal q, k, v (fan-in: one block) follow the
        model's named init; the conv keeps PyTorch's, the gates xLSTM's (``reset_gate_parameters``)."""
        init.linear_(self.up_proj)
        init.linear_(self.down_proj)
        for weight in (self.q_weight, self.k_weight, self.v_weight):
            init.matrix_(weight, self.qkv_blocksize)

    @torch.no_grad()
    def reset_gate_parameters(self) -> None:
        """xLSTM's gate init: input-independent at first (zero weights). Forget biases evenly from 3
        to 6 across heads, so σ(f̃) ∈ [0.95, 0.998]: memories of about 20 to 400 steps; under the exp
        gate the same forget values (f̃ = log σ(·)). Input biases N(0, 0.1)."""
        nn.init.zeros_(self.igate.weight)
        nn.init.zeros_(self.fgate.weight)
        nn.init.normal_(self.igate.bias, std=0.1)
        bias = torch.linspace(3.0, 6.0, self.n_heads)
        self.fgate.bias.copy_(bias if self.forget_gate == "sigmoid" else F.logsigmoid(bias))

    @property
    def backend(self) -> str:
        """The backend the last forward ran on ("reference" before any forward)."""
        return self.last_backend

    def _choose_backend(self, x: torch.Tensor) -> str:
        if self.forget_gate == "sigmoid":
            return choose(x, KERNEL_MODULE)
        if requested() == KERNEL:  # the kernel applies logsigmoid to f̃ itself: f > 1 is out of its reach
            raise RuntimeError(f"{ENV}=kernel but mlstm-kernels has no exp forget gate (forget_gate=exp)")
        return REFERENCE

    def forward(self, x: torch.Tensor, ctx: MixerContext) -> torch.Tensor:
        B, L, _ = x.shape
        H, K = self.n_heads, self.head_dim
        x_m, z = self.up_proj(x).chunk(2, dim=-1)  # [B, L, E] each
        x_c = F.silu(self.conv1d(F.pad(x_m.transpose(1, 2), (self.conv_size - 1, 0))).transpose(1, 2))
        q, k, v = _headwise(x_c, self.q_weight), _headwise(x_c, self.k_weight), _headwise(x_m, self.v_weight)
        qkv = torch.cat([q, k, v], dim=-1)  # [B, L, 3E]: what the gates see
        i_pre, f_pre = self.igate(qkv), self.fgate(qkv)  # [B, L, H]
        q, k, v = (t.view(B, L, H, K) for t in (q, k, v))

        self.last_backend = self._choose_backend(x)
        if self.last_backend == KERNEL:
            h = mlstm_kernel(q, k, v, i_pre, f_pre)
        else:
            log_f = F.logsigmoid(f_pre) if self.forget_gate == "sigmoid" else f_pre
            if L <= self.quadratic_up_to:
                h = mlstm_parallel(q, k, v, i_pre, log_f)  # [B, L, H, K]
            else:
                h = mlstm_chunkwise(q, k, v, i_pre, log_f, chunk_size=CHUNK)

        # Per-head LayerNorm (xLSTM's MultiHeadLayerNorm, weight only), the skip, the output gate.
        h = F.layer_norm(h, (K,), eps=NORM_EPS).reshape(B, L, H * K) * self.out_norm_weight
        h = (h + self.skip * x_c) * F.silu(z)
        return self.down_proj(h)

