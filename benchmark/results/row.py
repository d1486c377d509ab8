"""The shape of a result row (``result.json``, docs/result-schema.md) as the readers see it, and the
one accessor for its sections that a run may lack.

A row always has the keys of ``RowBase``. The sections come from the recorder and the callbacks, so a
run that failed before training has none of them, a run without an attention probe has no
``attention_probe``, and a row written before provenance was recorded has no ``provenance``.
``section(row, name)`` gives a section, or ``{}`` where the row has none: readers ask it, never
``row.get(name) or {}``. Each section's keys are all present when the section is, so a section is
typed ``total=False`` only so that ``{}`` stands for an absent one.

Every measurement is declared in its own module (``emergence_bench.measurements``) with its
section and the section's TypedDict, not here: ``section(row, measurement)`` (or ``measurement.read``)
reads it. The sections here are the run's own: provenance, timing, metrics, task facts, curves.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import (
    TYPE_CHECKING,
    Any,
    Literal,
    TypedDict,
    TypeVar,
    Union,
    cast,
    get_origin,
    get_type_hints,
    is_typeddict,
    overload,
)

if TYPE_CHECKING:  # (it imports this module)
    from emergence_bench.results.measurement import Measurement

Status = Literal["ok", "diverged", "failed"]


class Timing(TypedDict, total=False):
    steps: int
    train_seconds: float
    eval_seconds: float
    steps_per_second: float  # training only


class Metrics(TypedDict, total=False):
    final_train_loss: float | None  # None: not finite (the row's non_finite names it)
    final_eval_loss: float | None
    final_eval_accuracy: float | None
    final_eval_p_correct: float | None
    final_train_full_sequence_loss: float | None
    final_eval_full_sequence_loss: float | None
    final_eval_full_sequence_accuracy: float | None  # absent from rows written before it was recorded


class TaskFacts(TypedDict, total=False):
    chance_loss: float
    floor_loss: float
    shortcut_loss: float | None  # None: no shortcut baseline known
    max_accuracy: float
    shortcut_cells: list[bool]  # linear map: per output cell, predictable from earlier outputs


class Curves(TypedDict, total=False):
    train_loss: list[list[float]]  # [step, mean loss over the last log_every steps]
    eval: list[list[float]]  # [step, loss, accuracy]
    eval_cells: list[list[Any]]  # [step, [eval loss per output cell]]


class GitState(TypedDict, total=False):
    commit: str | None
    dirty: bool | None
    note: str  # why commit is None


class Provenance(TypedDict, total=False):
    git: GitState
    command: str
    machine: dict[str, Any]  # host, platform, processor, cpus
    threads: dict[str, Any]  # setting, used, cores, OMP_NUM_THREADS
    allocator: str


class RowBase(TypedDict):
    """What every row has, a failed one too (``emergence_bench.engine.run_folder.new_row``)."""

    schema_version: int
    run_id: str
    status: Status
    error: str | None  # the message and traceback of a diverged or failed run
    seed: int
    config: dict[str, Any]  # the fully resolved RunConfig.to_dict()
    backend: str | None
    device: str | None
    threads: int
    versions: dict[str, str | None]
    started_at: str


class ResultRow(RowBase, total=False):
    """One run's result row. Read its sections through ``section``."""

    provenance: Provenance
    parameters: int
    state_size: int | None
    timing: Timing
    metrics: Metrics
    task_facts: TaskFacts
    curves: Curves
    # The measurements' sections: each declared, with its TypedDict, in its module of
    # ``emergence_bench.measurements``; read one with its Measurement: ``PLATEAU.read(row)``.
    plateau: dict[str, Any]
    emergence: dict[str, Any]
    attention_probe: dict[str, Any]
    forecast_stop: dict[str, Any]
    attention_bias: dict[str, Any]
    curriculum: list[dict[str, Any]]
    seed_parallel: dict[str, Any]  # {k, group} or {k: 1, fallback}, with probe under batching auto
    resumed: dict[str, Any]  # {from_steps}: a run that went on from resume points (engine/resume_point.py)
    non_finite: list[str]  # the dotted keys whose NaN or inf was written as null


# The keys of a row whose value is a mapping wherever the suite writes one (its sections, and the config
# and versions every row has): a row holding null (or a list, a number) there was not written by the
# suite as it is, and a reader would take the missing section for "not measured".
MAPPINGS = tuple(key for key, hint in get_type_hints(ResultRow).items()
                 if is_typeddict(hint) or get_origin(hint) is dict)

SectionName = Literal["provenance", "timing", "metrics", "task_facts", "curves", "attention_bias", "seed_parallel"]
Row = Union[ResultRow, Mapping[str, Any]]  # a row as read, or as a run builds it (a plain dict)
S = TypeVar("S", bound=Mapping[str, Any])  # a declared measurement's section


@overload
def section(row: Row, name: Literal["provenance"]) -> Provenance: ...
@overload
def section(row: Row, name: Literal["timing"]) -> Timing: ...
@overload
def section(row: Row, name: Literal["metrics"]) -> Metrics: ...
@overload
def section(row: Row, name: Literal["task_facts"]) -> TaskFacts: ...
@overload
def section(row: Row, name: Literal["curves"]) -> Curves: ...
@overload
def section(row: Row, name: Measurement[S]) -> S: ...
@overload
def section(row: Row, name: SectionName) -> Mapping[str, Any]: ...
def section(row: Row, name: SectionName | Measurement[Any]) -> Mapping[str, Any]:
    """The section ``name`` (or that of the declared measurement ``name``) of ``row``, or ``{}`` where
    the row has none (a run that failed before training, a callback not configured, a row older than
    the section)."""
    key = name if isinstance(name, str) else name.section
    return cast(Mapping[str, Any], row.get(key) or {})


# Two facts of measured sections that the layers below the callbacks need (the results store, the
# columns, the forecast): read here by key, as the emergence and forecast-stop callbacks write them.
def plateau_section(row: Row) -> Mapping[str, Any]:
    """The row's plateau section (the held plateau and the first drop), ``{}`` where it has none."""
    return cast(Mapping[str, Any], row.get("plateau") or {})


def emergence_step(row: Row) -> int | None:
    """The step the run emerged at; None when it never did, or never trained."""
    return cast(Mapping[str, Any], row.get("emergence") or {}).get("step")


def forecast_stopped(row: Row) -> bool:
    """Whether a forecast ended the run (``sweep --forecast-stop``): its outcome is unknown, not a failure."""
    return bool(cast(Mapping[str, Any], row.get("forecast_stop") or {}).get("stopped"))


def step_budget(row: Row) -> int:
    """The steps the run trained (its timing), else the steps its config allowed."""
    return section(row, "timing").get("steps") or row["config"]["trainer"]["max_steps"]
