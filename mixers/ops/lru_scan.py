"""The LRU's diagonal complex linear recurrence h_t = λ ⊙ h_{t-1} + b_t, λ constant in time.

λ does not depend on the input, so h_t = Σ_{s≤t} λ^{t-s} b_s, and ``lru_scan`` computes it as an
associative scan in ⌈log2 T⌉ steps (Hillis & Steele: after the step with offset d every h_t holds
its last 2d terms, h_t += λ^d h_{t-d}). ``lru_recurrent`` is the plain step loop (in torch's complex
numbers) the tests hold it to. The scan carries complex numbers as (real, imaginary) pairs of real
tensors: ordinary real autograd and vmappable ops in any dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def lru_scan(b_re: torch.Tensor, b_im: torch.Tensor, nu_log: torch.Tensor,
             theta_log: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """h_t = λ h_{t-1} + b_t from h_{-1} = 0, with λ = exp(-exp(nu_log) + i·exp(theta_log)).

    b_re, b_im [B, T, N] (the input term's real and imaginary parts), nu_log, theta_log [N]
    -> (h_re, h_im) [B, T, N], in at least float32. ⌈log2 T⌉ steps, each O(B·T·N).
    """
    dtype = torch.promote_types(b_re.dtype, torch.float32)
    h_re, h_im = b_re.to(dtype), b_im.to(dtype)
    rate, angle = nu_log.to(dtype).exp(), theta_log.to(dtype).exp()  # λ = exp(-rate) · e^{i·angle}  [N]
    T, d = h_re.shape[-2], 1
    while d < T:
        modulus = torch.exp(-d * rate)  # λ^d = |λ|^d e^{i·d·angle}, straight from the parameters  [N]
        c, s = modulus * torch.cos(d * angle), modulus * torch.sin(d * angle)
        # h_{t-d}, zero for t < d (shifted down the time axis, no in-place writes)
        prev_re, prev_im = (F.pad(h, (0, 0, d, 0)).narrow(-2, 0, T) for h in (h_re, h_im))
        h_re, h_im = h_re + c * prev_re - s * prev_im, h_im + s * prev_re + c * prev_im
        d *= 2
    return h_re, h_im


def lru_recurrent(b_re: torch.Tensor, b_im: torch.Tensor, nu_log: torch.Tensor,
                  theta_log: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The same recurrence one step at a time, in complex arithmetic (for tests). Shapes as
    ``lru_scan``; computes in complex128 for float64 inputs, else complex64."""
    real = torch.float64 if b_re.dtype == torch.float64 else torch.float32
    b = torch.complex(b_re.to(real), b_im.to(real))  # [B, T, N]
    lam = torch.exp(torch.complex(-nu_log.to(real).exp(), theta_log.to(real).exp()))  # [N]
    h = torch.zeros_like(b[:, 0])
    states = []
    for t in range(b.shape[1]):
        h = lam * h + b[:, t]
        states.append(h)
    h = torch.stack(states, dim=1)
    return h.real, h.imag

