"""The built-in callbacks as the registry knows them before importing one (a callback's module
imports Lightning): where each class is, its config keys (a function with its constructor's
signature, less the task, which the suite passes), and whether it changes training (the
leaderboard's intervention). The config's callbacks, `emergence-bench list` and the leaderboard
read them here, without Lightning. tests/test_catalog.py checks every entry against its class: a
new built-in callback adds its own."""

from __future__ import annotations

from collections.abc import Sequence

from emergence_bench.registry import Declared

INTERVENTION = {"is_intervention": True}


def attention_bias(strength: float = 5.0, layers: str | int | Sequence[int] = "auto",
                   heads: str | int | Sequence[int] = "all", pattern: str | Sequence[str] = "auto",
                   until_step: int | None = None, anneal: bool = False, in_eval: bool = True) -> None: ...


def attention_distillation(teacher: str, teacher_layer: int | None = None, strength: float = 5.0,
                           layers: str | int | Sequence[int] = "all", heads: str | int | Sequence[int] = "all",
                           until_step: int | None = None, anneal: bool = False, in_eval: bool = True) -> None: ...


def attention_probe(found_mass: float = 0.5, image_every: int = 10, probe_size: int = 64) -> None: ...


def emergence(threshold: float = 0.95, relative: bool = True, stop: bool = False) -> None: ...


def forecast_stop(model: str, risk: float = 0.05) -> None: ...


def influence_probe(found_mass: float = 0.5, probe_size: int = 16, epsilon: float = 1e-2, every: int = 1) -> None: ...


def plateau(frac: float = 0.1, threshold: float | None = None, smoothing: float = 0.9, window: int = 50,
            tolerance: float = 0.02) -> None: ...


CATALOG = {
    "attention_bias": Declared("emergence_bench.callbacks.attention_bias.AttentionBias", attention_bias, INTERVENTION),
    "attention_distillation": Declared("emergence_bench.callbacks.attention_distillation.AttentionDistillation",
                                       attention_distillation, INTERVENTION),
    "attention_probe": Declared("emergence_bench.callbacks.attention_probe.AttentionProbe", attention_probe),
    "emergence": Declared("emergence_bench.callbacks.emergence.Emergence", emergence),
    "forecast_stop": Declared("emergence_bench.callbacks.forecast_stop.ForecastStop", forecast_stop),
    "influence_probe": Declared("emergence_bench.callbacks.influence_probe.InfluenceProbe", influence_probe),
    "plateau": Declared("emergence_bench.callbacks.plateau.Plateau", plateau),
}
