"""The mixers' maths, apart from their layers (as fla keeps ``fla/ops`` apart from ``fla/layers``).

Each op is written once, with its tensor shapes in its docstring, its reference (pure-PyTorch)
form, the step-by-step recurrence its oracle tests hold it to, and its GPU kernel wrapper:

    linear_scan       h_t = a_t h_{t-1} + b_t and its transpose, chunk-parallel (Mamba's scan inside)
    selective_scan    Mamba's selective scan, its hand-fused backward and vmap rules, mamba-ssm's kernel
    lru_scan          the LRU's diagonal complex recurrence, as an associative scan
    gated_delta_rule  Gated DeltaNet's core, chunked (WY/UT form), recurrent, fla's kernel
    rwkv7             RWKV-7's generalised delta rule, chunked, recurrent, fla's kernel
    mlstm             the mLSTM cell, parallel (stabilised quadratic), recurrent, mlstm-kernels' kernel

and the pieces they share:

    segment_sum       the [.., T, T] log-decay matrix Σ_{j<m≤i} x_m (gated_delta_rule, mlstm)
    chunks            [B, T, H, *] <-> [B, H, N, C, *], zero-padded (gated_delta_rule, rwkv7)
    triangular        the unit-lower-triangular solve of the WY form (gated_delta_rule, rwkv7)
"""
