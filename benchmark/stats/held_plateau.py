"""The plateau the paper means: the loss *held* at one level, up to its last sharp drop.

The Plateau callback's end step is the first step the smoothed loss falls below a threshold just
under chance (or the shortcut): the *first loss drop*. On the ranking's ladders that step comes tens
of steps into a run, long before emergence: a model first learns what needs no sparse pattern (the
answer is a value, a closer, a bit), and its loss falls from chance to that shortcut's level, where
it is then held until the pattern is found. This module measures that hold, on the train-loss curve
a run records (``curves.train_loss``: the mean loss of every ``curve_every`` steps), so every row
written since the recorder kept curves has it and no run id changes (``emergence_bench.results.row_curves``
reads it off a row: ``plateau_time``, ``held_plateaus``).

On a curve of steps t [n] and losses y [n], with the task's chance and floor losses (G = chance −
floor, the scale of every band):

1. Smoothing: a running median of three points (a single noisy point neither ends a hold nor starts
   one), then the running minimum m (progress is not undone by noise upwards).
2. A *hold* starting at point a is the stretch [t_a, t_b] in which m stays within ``BAND``·G of m_a
   (b the last such point); its level is m_a.
3. The holds that a *real drop* follows are those whose level lies at least ``LEVEL_SHARE``·G above
   the floor and from which the curve fell at least ``DROP_SHARE`` of the way to the floor by its
   end (m_a − m_end ≥ DROP_SHARE·(m_a − floor)). The plateau is the longest of them (the later one on
   ties); its end t_b is where the last sharp drop starts, and ``drop_width`` the steps from t_b
   until m has fallen 80% of that drop.
4. Where no hold is followed by a real drop, the run is still on its plateau when its curve ends:
   the plateau is its longest hold above ``LEVEL_SHARE``·G, ``end`` is None (censored).

A plateau is **worth the name** (``worth``) when it was held for at least ``HOLD_SHARE`` of the time
up to its end (most of the run before the drop was spent on it, not in a slow slide) and, if it
ended, it lasted at least ``SHARPNESS`` times as long as the drop that ended it. A smooth decay (a
power law, an exponential) fails one or the other; a long hold at the shortcut level then a sharp
drop passes; an early drop from chance followed by a long hold passes, its end being the late drop
(``tests/test_held_plateau.py``). The level is what the curve held, reported beside the task's
declared shortcut: a task may hold at a shortcut it does not declare (MQAR at ln(pairs), a uniform
guess among the context's values).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

BAND = 0.05  # of chance − floor: the loss is held while its running minimum stays within this band
LEVEL_SHARE = 0.2  # of chance − floor: a plateau's level lies at least this far above the floor
DROP_SHARE = 0.5  # a plateau ends in a drop at least this share of the way from its level to the floor
HOLD_SHARE = 0.5  # worth the name: held for at least this share of the time up to its end ...
SHARPNESS = 2.0  # ... and at least this many times as long as the drop that ended it
MIN_POINTS = 3  # a hold spans at least this many curve points (else it is noise, not a plateau)


@dataclass(frozen=True)
class HeldPlateau:
    """One curve's plateau: its first and last held steps (``end`` None: still held when the curve
    ended), the loss level held, the drop after it and the steps that drop took (80% of it), and
    whether it is a plateau worth the name."""

    start: int
    end: int | None
    level: float
    drop: float
    drop_width: int | None
    worth: bool

    @property
    def length(self) -> int | None:
        return None if self.end is None else self.end - self.start

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _median3(values: list[float]) -> list[float]:
    if len(values) < 3:
        return list(values)
    inner = [sorted(values[i - 1:i + 2])[1] for i in range(1, len(values) - 1)]
    return [values[0], *inner, values[-1]]


def held_plateau(steps: Sequence[float], values: Sequence[float], chance: float,
                 floor: float = 0.0) -> HeldPlateau | None:
    """The plateau of the loss curve ``values`` [n] at ``steps`` [n] (increasing), for a task whose
    chance and floor losses are given (module docstring); None when the curve has fewer than
    ``MIN_POINTS`` finite points or never sat ``LEVEL_SHARE`` of the gap above the floor."""
    points = [(int(t), float(y)) for t, y in zip(steps, values) if y is not None and math.isfinite(y)]
    gap = chance - floor
    if len(points) < MIN_POINTS or gap <= 0:
        return None
    times = [t for t, _ in points]
    low, running = [], math.inf
    for y in _median3([y for _, y in points]):
        running = min(running, y)
        low.append(running)
    last, band, n = low[-1], BAND * gap, len(points)
    holds = []  # (a, b): the hold starting at a ends at b
    b = 0
    for a in range(n):
        b = max(b, a)
        while b + 1 < n and low[b + 1] >= low[a] - band:
            b += 1
        if b - a + 1 >= MIN_POINTS and low[a] - floor >= LEVEL_SHARE * gap:
            holds.append((a, b))
    if not holds:
        return None
    dropped = [(a, b) for a, b in holds if low[a] - last >= DROP_SHARE * (low[a] - floor) and low[a] - last > band]
    if not dropped:
        a, b = max(holds, key=lambda h: (times[h[1]] - times[h[0]], h[0]))
        held = times[-1] - times[a]
        return HeldPlateau(start=times[a], end=None, level=low[a], drop=low[a] - last, drop_width=None,
                           worth=held >= HOLD_SHARE * times[-1])
    a, b = max(dropped, key=lambda h: (times[h[1]] - times[h[0]], h[0]))
    drop = low[a] - last
    target = low[a] - 0.8 * drop + 1e-12 * max(1.0, abs(drop))
    done = next(t for t, m in zip(times, low) if m <= target)
    length, width = times[b] - times[a], done - times[b]
    worth = length >= HOLD_SHARE * times[b] and length >= SHARPNESS * width
    return HeldPlateau(start=times[a], end=times[b], level=low[a], drop=drop, drop_width=width, worth=worth)


def plateau_fields(steps: Sequence[float], values: Sequence[float], chance: float, floor: float) -> dict[str, Any]:
    """A result row's plateau fields for the train-loss curve ``values`` [n] at ``steps`` [n]:
    ``end_step`` the held plateau's end (None: still held at the budget, then ``censored``; the
    curve's first step where no plateau was held, since the loss fell at once), its ``start_step``,
    ``level``, ``drop``, ``drop_width`` and ``worth`` (None where none was held); empty where the
    curve has no finite point (a censored end's time is the run's step budget)."""
    first = next((int(t) for t, y in zip(steps, values) if y is not None and math.isfinite(y)), None)
    if first is None:
        return {}  # no curve: nothing measured
    found = held_plateau(steps, values, chance, floor)
    if found is None:
        return {"end_step": first, "censored": False, "start_step": None, "level": None, "drop": None,
                "drop_width": None, "worth": False}
    return {"end_step": found.end, "censored": found.end is None, "start_step": found.start, "level": found.level,
            "drop": found.drop, "drop_width": found.drop_width, "worth": found.worth}
