"""`emergence-bench check-mixer NAME`: is a token mixer fit for the suite?

Each check is one small function ``check(subject) -> CheckResult`` over the mixer under check (a
``Subject``: its name, the config keys given, the sizes to build it at), in this order:

    builds         its config resolves and it builds, on the meta device too (as every run checks first)
    shape          x [B, L, D] -> one finite tensor [B, L, D], also for an L shorter than max_len
    causal         perturbing token t changes no output before t (else: the first position that saw the future)
    gradients      a loss through two stacked layers reaches every parameter and the input
    deterministic  one seed, one set of weights and outputs; eval-mode forwards repeat exactly
    state_dict     weights through torch.save / torch.load(weights_only) into another seed's build: same output
    attention      the attention it exposes is causal and obeys bias and patch; or which callbacks are n/a
    seed_parallel  whether --seed-parallel batches its seeds, or why they run one by one
    learns         a short run of the suite learns a 1-sparse linear map (eval loss below LEARN_THRESHOLD)
    noise          trained on noise (predict the next random token), its accuracy stays at chance: above
                   it, the mixer sees the future in training (a leak the perturbation test can miss)
    speed          its training step over the Transformer's at two sequence lengths

``check_mixer`` runs them all and ``render`` prints the table; a check's status is ``pass`` or
``FAIL`` (the command exits non-zero), or a fact that is no failure: ``warn`` (the suite works around
it, slower or with less), ``info``, ``skip``. tests/test_mixer_contract.py calls these same functions
for every registered mixer, so the command and the tests cannot drift apart. (Over 400 lines: the
checks are read together, as the table lists them, and each is short.)
"""

from __future__ import annotations

import functools
import io
import tempfile
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

import torch
from torch import nn

from emergence_bench import registry
from emergence_bench.config import Component, resolve
from emergence_bench.mixers.base import TORCH, MixerContext
from emergence_bench.registry import Registry

PASS, FAIL, WARN, INFO, SKIP = "pass", "FAIL", "warn", "info", "skip"
ATOL = 1e-5  # float noise allowed where outputs are compared for "unchanged"

# `learns`: a run of the suite on the linear map with one source per output cell (S=4, T=2: 4 scored
# tokens), from chance ln 2 = 0.693 per token. Measured at 100 steps (1 to 2 s on one core): every
# built-in mixer reaches ≤ 0.001; a token-wise linear layer, which mixes nothing, stays at 0.695. The
# threshold, half of chance, asks that it learn the map, not how fast.
LEARN_TASK = {"name": "linear_map", "state_size": 4, "sparsity": 1, "batch_size": 64}
LEARN_STEPS = 100
LEARN_THRESHOLD = 0.35
# `noise`: random tokens of NOISE_VOCAB symbols; predicting the next one from the past is chance (1/8).
# NOISE_STEPS of AdamW at 3e-3, then accuracy on fresh batches (2 × 32 × (L − 1) = 704 predictions at
# L=12: a standard deviation of 0.012 at chance). A mixer that sees token t+1 copies it within these
# steps (accuracy near 1); the limit, chance + 0.08 (about 6.5 standard deviations), leaves no doubt
# either way.
NOISE_VOCAB, NOISE_STEPS, NOISE_BATCH, NOISE_MARGIN = 8, 150, 32, 0.08
SPEED_LENGTHS, SPEED_BATCH, SPEED_D_MODEL, SPEED_REPEATS = (64, 256), 8, 64, 5


@dataclass
class CheckResult:
    check: str
    status: str  # PASS | FAIL | WARN | INFO | SKIP
    detail: str

    @property
    def failed(self) -> bool:
        return self.status == FAIL


@dataclass
class Subject:
    """The mixer under check: its registered ``name`` and the config keys given (``overrides``,
    e.g. {"n_heads": 2}), built at width ``d_model`` for sequences of ``length`` (= max_len)."""

    name: str
    overrides: dict = field(default_factory=dict)
    d_model: int = 16
    length: int = 12

    @functools.cached_property
    def resolved(self) -> Component:
        """The resolved mixer config, every default filled (raises on a bad key)."""
        return resolve({"mixer": {"name": self.name, **self.overrides}}).mixer

    @property
    def spec(self) -> dict:
        """The resolved mixer config as a mapping, {name, **hparams}."""
        return self.resolved.to_dict()

    @property
    def hparams(self) -> dict:
        return self.resolved.params

    def build(self, layer_idx: int = 0, seed: int = 0) -> nn.Module:
        """One layer, its parameters drawn under ``seed``."""
        cls = registry.mixers.get(self.name)
        torch.manual_seed(seed)
        return cls(d_model=self.d_model, max_len=self.length, layer_idx=layer_idx, **self.hparams)

    def inputs(self, length: int | None = None, seed: int = 0) -> torch.Tensor:
        """x [2, length, d_model], from its own generator (the global RNG is left alone)."""
        generator = torch.Generator().manual_seed(seed)
        return torch.randn(2, length or self.length, self.d_model, generator=generator)

    def run_config(self) -> dict:
        """The config of the `learns` run (and of the `builds` and `seed_parallel` checks)."""
        return {"seed": 0, "task": dict(LEARN_TASK), "mixer": {"name": self.name, **self.overrides},
                "model": {"d_model": self.d_model, "n_layers": 1, "mlp_ratio": 2}, "optim": {"lr": 3e-3},
                "trainer": {"max_steps": LEARN_STEPS, "eval_every": LEARN_STEPS, "eval_batches": 2,
                            "log_every": 10, "accelerator": "cpu"}}


def forward(mixer: nn.Module, x: torch.Tensor, ctx: MixerContext | None = None, seed: int = 0) -> torch.Tensor:
    """``mixer(x, ctx)`` with the global RNG reseeded first, so a mixer that draws random numbers
    in training (dropout) draws the same ones each time."""
    torch.manual_seed(seed)
    return mixer(x, ctx if ctx is not None else MixerContext())


@dataclass(frozen=True)
class Check:
    """A registered check: ``check(subject) -> CheckResult``, named ``check_name`` in the table."""

    check_name: str
    run: Callable[[Subject], CheckResult]

    def __call__(self, subject: Subject) -> CheckResult:
        return self.run(subject)


CHECKS: Registry[Check] = Registry("check", Check)  # in the table's order


def register_check(name: str,
                   compares_outputs: bool = False) -> Callable[[Callable[[Subject], tuple[str, str]]], Check]:
    """Registers ``fn(subject) -> (status, detail)`` in CHECKS as ``check(subject) -> CheckResult``:
    an exception is a failure naming it, and the global RNG is left as it was. A check that
    ``compares_outputs`` fails as "NaN or inf" where the mixer's output is not finite: NaN ≠ NaN,
    so its own comparison would fail (or pass) for that reason alone and name another cause."""
    def decorator(fn: Callable[[Subject], tuple[str, str]]) -> Check:
        @functools.wraps(fn)
        def check(subject: Subject) -> CheckResult:
            try:
                with torch.random.fork_rng(devices=[]):
                    not_finite = compares_outputs and _not_finite(subject)
                    status, detail = (FAIL, not_finite) if not_finite else fn(subject)
            except Exception as error:
                status, detail = FAIL, f"raised {describe(error)}"
            return CheckResult(name, status, detail)

        return CHECKS.add(name, Check(name, check))

    return decorator


def _not_finite(s: Subject) -> str | None:
    """Why outputs cannot be compared: a forward returns NaN or inf (the check says so); None when
    they are finite (or not one tensor, which ``shape`` names)."""
    out = forward(s.build(), s.inputs())
    if isinstance(out, torch.Tensor) and out.is_floating_point() and not torch.isfinite(out).all():
        share = (~torch.isfinite(out)).float().mean().item()
        return f"forward returns NaN or inf ({share:.0%} of the outputs; see shape), so this cannot be tested"
    return None


def describe(error: BaseException) -> str:
    message = str(error).strip().splitlines()
    return f"{type(error).__name__}: {message[0]}" if message else type(error).__name__


def _shape(t: object) -> str:
    return "[" + ", ".join(str(n) for n in t.shape) + "]" if isinstance(t, torch.Tensor) else type(t).__name__


# ----------------------------------------------------------------------------------------------
# The checks, in the order the table shows them.


@register_check("builds")
def check_builds(s: Subject) -> tuple[str, str]:
    from emergence_bench.engine.run import plan

    plan(s.run_config())  # resolves every key, builds the model on the meta device: what `run` does first
    mixer = s.build()
    if not isinstance(mixer, nn.Module):
        return FAIL, f"{type(mixer).__name__} is not a torch.nn.Module"
    exposes = getattr(mixer, "exposes_attention", False)
    backends = getattr(mixer, "backends", (TORCH,))
    if not isinstance(exposes, bool):
        return FAIL, f"exposes_attention must be True or False, got {exposes!r}"
    if not isinstance(backends, (tuple, list)) or not backends or not all(isinstance(b, str) for b in backends):
        return FAIL, f"backends must be a non-empty tuple of names, got {backends!r}"
    if getattr(mixer, "backend", backends[0]) not in backends:
        return FAIL, f"its backend {mixer.backend!r} is not one of its backends {tuple(backends)}"
    heads = getattr(mixer, "n_heads", None)
    if exposes and (not isinstance(heads, int) or heads < 1):
        return FAIL, f"a mixer that exposes attention needs n_heads (an int ≥ 1) on the instance, got {heads!r}"
    shown = ", ".join(f"{k}={v!r}" for k, v in s.hparams.items())
    parameters = sum(p.numel() for p in mixer.parameters())
    return PASS, f"{type(mixer).__name__}({shown}): {parameters:,} parameters at d_model {s.d_model}"


@register_check("shape")
def check_shape(s: Subject) -> tuple[str, str]:
    mixer, shapes = s.build(), []
    for length in (s.length, max(1, s.length // 2)):  # shorter: a curriculum's shorter task, a probe
        x = s.inputs(length)
        out = forward(mixer, x)
        if not isinstance(out, torch.Tensor):
            return FAIL, f"forward returned a {type(out).__name__}, not one tensor [B, L, D]"
        if out.shape != x.shape:
            return FAIL, f"forward(x {_shape(x)}) returned {_shape(out)}, expected {_shape(x)}"
        if not torch.isfinite(out).all():
            return FAIL, f"forward(x {_shape(x)}) returned NaN or inf"
        shapes.append(_shape(x))
    return PASS, f"{shapes[0]} -> {shapes[0]}, and {shapes[1]} -> {shapes[1]} (shorter than max_len)"


@register_check("causal", compares_outputs=True)
def check_causal(s: Subject) -> tuple[str, str]:
    mixer, x = s.build(), s.inputs()
    base = forward(mixer, x)
    if not torch.equal(base, forward(mixer, x)):
        return FAIL, ("two forwards of one input under one seed differ, so causality cannot be tested "
                      "(see deterministic)")
    first, moved = None, False  # first: (position, token) where a position saw a later token
    for t in range(s.length):
        y = x.clone()
        y[:, t] += 1.0
        out = forward(mixer, y)
        moved = moved or not torch.allclose(out[:, t:], base[:, t:], atol=ATOL)
        seen = [p for p in range(t) if not torch.allclose(out[:, p], base[:, p], atol=ATOL)]
        if seen and (first is None or seen[0] < first[0]):
            first = (seen[0], t)
    if first:
        p, t = first
        return FAIL, (f"not causal: output {p} changes when token {t} is perturbed "
                      f"(position {p} sees {t - p} position{'s' if t - p > 1 else ''} ahead)")
    if not moved:
        return FAIL, "perturbing a token changes no output at all: the mixer ignores its input"
    return PASS, f"perturbing token t changes no output before t (each t in 0..{s.length - 1})"


@register_check("gradients", compares_outputs=True)
def check_gradients(s: Subject) -> tuple[str, str]:
    # Two layers sharing one ctx, so values a mixer passes from layer 0 to later layers are exercised.
    layers = [s.build(0), s.build(1, seed=1)]
    with torch.no_grad():  # a zero-initialised projection would hide what is upstream of it: move it off 0
        for p in (p for layer in layers for p in layer.parameters() if not p.any()):
            p.add_(torch.randn_like(p), alpha=0.02)
    x = s.inputs().requires_grad_()
    ctx = MixerContext()
    torch.manual_seed(0)
    (layers[1](layers[0](x, ctx), ctx) ** 2).sum().backward()
    named = [(f"layer {i} {name}", p) for i, layer in enumerate(layers) for name, p in layer.named_parameters()]
    broken = [name for name, p in named if p.grad is not None and not torch.isfinite(p.grad).all()]
    if broken:
        return FAIL, f"the gradient of {', '.join(broken[:3])} holds NaN or inf"
    missing = [name for name, p in named if p.grad is None or not p.grad.any()]
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        return FAIL, f"no gradient reaches {', '.join(missing[:3])}{more}"
    if x.grad is None or not x.grad.any():
        return FAIL, "no gradient reaches the input x (is it detached?)"
    count = sum(1 for _ in layers[0].parameters())
    return PASS, f"a loss through two stacked layers reaches all {count} parameters of each, and the input"


@register_check("deterministic", compares_outputs=True)
def check_deterministic(s: Subject) -> tuple[str, str]:
    a, b = s.build(seed=0), s.build(seed=0)
    state_a, state_b = a.state_dict(), b.state_dict()
    differs = [k for k in state_a if k not in state_b or not torch.equal(state_a[k], state_b[k])]
    if differs:
        return FAIL, (f"two builds under seed 0 differ in {differs[0]}: its init draws from a source "
                      "torch.manual_seed does not fix (numpy, random, a fresh torch.Generator)")
    x = s.inputs()
    if not torch.equal(forward(a, x), forward(b, x)):
        return FAIL, "two builds under seed 0 give different outputs for one input"
    if not torch.equal(forward(a, x), forward(a, x)):
        return FAIL, ("two forwards of one input under one seed differ: forward draws from a source "
                      "torch.manual_seed does not fix")
    a.eval()
    with torch.no_grad():
        if not torch.equal(a(x, MixerContext()), a(x, MixerContext())):
            return FAIL, "in eval mode two forwards of one input differ: forward draws random numbers outside training"
    return PASS, "two builds under one seed give equal weights and outputs; eval forwards repeat exactly"


@register_check("state_dict", compares_outputs=True)
def check_state_dict(s: Subject) -> tuple[str, str]:
    trained, fresh = s.build(seed=0), s.build(seed=1)
    saved = io.BytesIO()
    torch.save(trained.state_dict(), saved)
    saved.seek(0)
    try:  # how `analyze` loads a checkpoint
        state = torch.load(saved, weights_only=True)
    except Exception as error:
        return FAIL, f"its state_dict does not load with torch.load(weights_only=True): {describe(error)}"
    fresh.load_state_dict(state)
    x = s.inputs()
    if not torch.equal(forward(fresh, x), forward(trained, x)):
        return FAIL, ("another seed's build with this state_dict loaded gives other outputs: some state lives "
                      "outside the state_dict (a plain tensor attribute, a non-persistent buffer drawn at random)")
    return PASS, f"{len(state)} tensors saved and loaded into another seed's build: the same output"


@register_check("attention", compares_outputs=True)
def check_attention(s: Subject) -> tuple[str, str]:
    mixer = s.build()
    if not getattr(mixer, "exposes_attention", False):
        return INFO, ("exposes no attention scores: attention_probe, attention_bias and attention_distillation "
                      "report n/a for it, and `analyze patch` cannot run")
    H = getattr(mixer, "n_heads", None)
    if not isinstance(H, int):
        return FAIL, f"exposes_attention is True but n_heads is {H!r}, not the number of heads (mixers/base.py)"
    L, layer = s.length, 0  # built as layer 0
    x = s.inputs()
    ctx = MixerContext(capture=True)
    captured = forward(mixer, x, ctx)
    if layer not in ctx.attention:
        return FAIL, ("exposes_attention is True but a forward with ctx.capture recorded nothing "
                      f"(ctx.record({layer}, probs))")
    probs = ctx.attention[layer]
    if probs.shape != (2, H, L, L):
        return FAIL, f"recorded probabilities {_shape(probs)}, expected [B, n_heads, L, L] = [2, {H}, {L}, {L}]"
    if not torch.allclose(probs.sum(-1), torch.ones(2, H, L), atol=1e-4):
        return FAIL, "recorded probabilities whose rows do not sum to 1 (record after the softmax)"
    if probs.triu(1).abs().max() > 0:
        return FAIL, "a query attends to a later key in the recorded probabilities"
    if not torch.allclose(captured, forward(mixer, x), atol=ATOL):
        return FAIL, "recording the attention changes the output (the explicit path and the fast one differ)"
    bias = torch.zeros(1, H, L, L)
    bias[..., 0] = 30.0
    ctx = MixerContext(bias={layer: bias}, capture=True)
    forward(mixer, x, ctx)
    if not ctx.attention[layer][..., 0].min() > 0.99:
        return FAIL, "a bias of +30 on key 0 leaves its probability below 0.99: ctx.bias_for does not reach the logits"
    eye = torch.eye(L).expand(2, H, L, L)
    ctx = MixerContext(patch={layer: lambda p: eye}, capture=True)
    patched = forward(mixer, x, ctx)
    if not torch.equal(ctx.attention[layer], eye):
        return FAIL, "the recorded probabilities are not the patched ones (ctx.record after ctx.patch_for)"
    if torch.allclose(patched, captured, atol=ATOL):
        return FAIL, "patching the probabilities (ctx.patch_for) does not change the output"
    return PASS, (f"{H} heads [B, {H}, L, L], causal, rows sum to 1, bias and patch act: "
                  "the attention probe, bias and head patching apply")


@register_check("seed_parallel")
def check_seed_parallel(s: Subject) -> tuple[str, str]:
    from emergence_bench.engine.batching_probe import seed_parallel_supported
    from emergence_bench.engine.run import plan

    supported, reason = seed_parallel_supported(plan(s.run_config()))
    if supported:
        return PASS, f"--seed-parallel batches its seeds ({reason}, equal to each seed alone)"
    return WARN, f"--seed-parallel runs its seeds one by one: {reason}"


@register_check("learns")
def check_learns(s: Subject) -> tuple[str, str]:
    from emergence_bench.engine.run import run

    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        record = run(s.run_config(), out)
    seconds = time.perf_counter() - start
    if record["status"] != "ok":
        return FAIL, f"the training run {record['status']}: {(record['error'] or '').splitlines()[0]}"
    backends = getattr(registry.mixers.get(s.name), "backends", (TORCH,))
    if any(b not in backends for b in (record["backend"] or TORCH).split("+")):
        return FAIL, f"the run reports backend {record['backend']!r}, not one of its backends {tuple(backends)}"
    loss = record["metrics"]["final_eval_loss"]
    task = f"1-sparse linear map S={LEARN_TASK['state_size']}, chance 0.693"
    if loss is None:
        return FAIL, f"the training run has no final eval loss ({task})"
    if not loss < LEARN_THRESHOLD:
        return FAIL, f"eval loss {loss:.3f} after {LEARN_STEPS} steps, not below {LEARN_THRESHOLD} ({task})"
    return PASS, f"eval loss {loss:.3f} < {LEARN_THRESHOLD} after {LEARN_STEPS} steps ({task}; {seconds:.1f} s)"


@register_check("noise", compares_outputs=True)
def check_noise(s: Subject) -> tuple[str, str]:
    generator = torch.Generator().manual_seed(0)

    def batch() -> torch.Tensor:  # [NOISE_BATCH, length] random tokens
        return torch.randint(NOISE_VOCAB, (NOISE_BATCH, s.length), generator=generator)

    torch.manual_seed(0)
    embed, mixer, head = nn.Embedding(NOISE_VOCAB, s.d_model), s.build(), nn.Linear(s.d_model, NOISE_VOCAB)
    model = nn.ModuleList([embed, mixer, head])

    def logits(tokens: torch.Tensor) -> torch.Tensor:  # [B, L - 1, V]: position t predicts token t + 1
        return head(mixer(embed(tokens), MixerContext()))[:, :-1]

    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(NOISE_STEPS):
        tokens = batch()
        loss = nn.functional.cross_entropy(logits(tokens).reshape(-1, NOISE_VOCAB), tokens[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        tokens = torch.cat([batch(), batch()])
        accuracy = (logits(tokens).argmax(-1) == tokens[:, 1:]).float().mean().item()
    chance = 1 / NOISE_VOCAB
    if accuracy > chance + NOISE_MARGIN:
        return FAIL, (f"predicts the next random token with accuracy {accuracy:.2f} after {NOISE_STEPS} steps, "
                      f"above chance {chance:.3f}: it sees the future in training")
    return PASS, (f"next random token: accuracy {accuracy:.3f} after {NOISE_STEPS} steps, at chance {chance:.3f} "
                  f"(limit {chance + NOISE_MARGIN:.2f}): no leak from the future")


@register_check("speed")
def check_speed(s: Subject) -> tuple[str, str]:
    from emergence_bench.mixers.base import width_matched_spec
    from emergence_bench.perf.loops import step_seconds

    reference = width_matched_spec("transformer")
    parts = []
    for length in SPEED_LENGTHS:
        base = step_seconds(reference, length, SPEED_BATCH, SPEED_D_MODEL, "cpu", SPEED_REPEATS)
        own = step_seconds(s.spec, length, SPEED_BATCH, SPEED_D_MODEL, "cpu", SPEED_REPEATS)
        parts.append(f"{own / base:.2f}× at L={length} ({own * 1e3:.1f} vs {base * 1e3:.1f} ms)")
    return INFO, (f"training step over the Transformer's: {', '.join(parts)}; d_model {SPEED_D_MODEL}, "
                  f"batch {SPEED_BATCH}, cpu, {torch.get_num_threads()} thread(s), median of {SPEED_REPEATS}")


# ----------------------------------------------------------------------------------------------


def check_mixer(name: str, overrides: dict | None = None, skip: Collection[str] = (), d_model: int = 16,
                length: int = 12) -> list[CheckResult]:
    """Every check of CHECKS on mixer ``name`` with config keys ``overrides``; ``skip`` names checks
    not to run. When it does not build, the others are skipped."""
    subject = Subject(name, dict(overrides or {}), d_model, length)
    results: list[CheckResult] = []
    for check in CHECKS.values():
        if check.check_name in skip:
            results.append(CheckResult(check.check_name, SKIP, "skipped (--skip)"))
        elif results and results[0].failed:
            results.append(CheckResult(check.check_name, SKIP, "needs a mixer that builds"))
        else:
            results.append(check(subject))
    return results


def check_names() -> list[str]:
    return [check.check_name for check in CHECKS.values()]


def render(name: str, results: list[CheckResult]) -> str:
    """The table: one line per check (name, status, detail), then the verdict."""
    try:
        cls = registry.mixers.get(name)
        where = f" ({cls.__module__}.{cls.__qualname__})"
    except registry.UnknownNameError:
        where = ""
    width = max(len(r.check) for r in results)
    lines = [f"check-mixer {name}{where}",
             f"  {'check':<{width}}  result  detail"]
    lines += [f"  {r.check:<{width}}  {r.status:<6}  {r.detail}" for r in results]
    failed = [r.check for r in results if r.failed]
    if failed:
        lines.append(f"{len(failed)} of {len(results)} checks failed: {', '.join(failed)}")
    else:
        lines.append(f"{name} passes every check (warn, info and skip lines are facts, not failures)")
    return "\n".join(lines)
