"""Run a sweep's runs as Ray tasks: workers need no shared filesystem.

Each run is one Ray task (``num_cpus`` / ``num_gpus`` per run; fractional GPUs let many tiny runs
share one device). The worker trains in a scratch folder and sends back the result row with the run's
small files (config, TensorBoard logs, attention maps; not checkpoints); the driver writes them, the
result last, so resume works exactly as with the local executor. A task whose worker dies is retried
by Ray (``max_retries``); a run that fails is recorded by the worker like any other result. When the
sweep is stopped (a signal: see emergence_bench.execution.stop_signals) every task still running
is cancelled (its worker killed) and Ray shut down: a local Ray instance's processes end with the sweep.

Threads follow the local executor's policy with a task's ``num_cpus`` as its share of the cores:
``trainer.threads: auto`` gives 1 thread to a small model and ``int(num_cpus)`` to a large one; an
explicit count above ``num_cpus`` is refused before anything is submitted (ask Ray for the CPUs the
threads use, so Ray never packs more threads on a node than it has cores).
"""

from __future__ import annotations

import shutil
import signal
import tempfile
import threading
from pathlib import Path
from typing import Callable

from emergence_bench.config import ConfigError
from emergence_bench.machine.threads import available_cpus, set_cpu_share
from emergence_bench.results.atomic import ResultsUnwritable, write_atomic
from emergence_bench.results.row import ResultRow
from emergence_bench.results.store import CHECKPOINT_DIR, RESULT_FILE, lost_summary, progress_summary, write_json

MAX_FILE_BYTES = 64 * 2**20  # larger files stay on the worker


def _train(config: dict, num_cpus: float) -> tuple[ResultRow, dict[str, bytes]]:
    """On the worker: run ``config`` in a scratch folder; return (result row, {relative path: bytes})."""
    from emergence_bench.engine.run import run

    set_cpu_share(min(task_share(num_cpus), available_cpus()))  # run() chooses its threads within it
    with tempfile.TemporaryDirectory() as scratch:
        record = run(config, scratch)
        run_dir = Path(scratch) / record["run_id"]
        files = {}
        for path in run_dir.rglob("*"):
            relative = path.relative_to(run_dir)
            if path.is_file() and relative.parts[0] != CHECKPOINT_DIR and path.name != RESULT_FILE \
                    and path.stat().st_size <= MAX_FILE_BYTES:
                files[str(relative)] = path.read_bytes()
    return record, files


def task_share(num_cpus: float) -> int:
    """The cores a Ray task with ``num_cpus`` may use: its whole CPUs, at least 1."""
    return max(1, int(num_cpus))


def check_threads_fit(configs: list, num_cpus: float) -> None:
    """Every run's explicit ``trainer.threads`` fits the CPUs Ray reserves for its task."""
    for config in configs:
        threads = config.trainer.threads
        if threads != "auto" and threads > task_share(num_cpus):
            raise ConfigError(f"trainer.threads={threads} but each Ray task reserves --num-cpus {num_cpus:g}: "
                              f"give --num-cpus {threads}, or --threads {task_share(num_cpus)} (or auto)")


def store(run_dir: Path, record: dict, files: dict[str, bytes]) -> None:
    """Write a run's files atomically, then its result (whose presence marks the run finished)."""
    if run_dir.exists():  # leftovers of an interrupted attempt
        shutil.rmtree(run_dir)
    for relative, data in files.items():
        write_atomic(run_dir / relative, lambda f: f.write(data))
    write_json(run_dir / RESULT_FILE, record)


def run_on_ray(pending: list, report: Callable[[dict], None], address: str | None = None,
               num_cpus: float = 1, num_gpus: float = 0, max_retries: int = 3) -> None:
    """Run ``pending`` [(output folder, RunConfig)] on the Ray cluster at ``address`` (None: start a
    local one); ``report`` is called with each run's ``progress_summary`` as it comes back."""
    check_threads_fit([config for _, config in pending], num_cpus)
    import ray

    main = threading.current_thread() is threading.main_thread()
    sigterm = signal.getsignal(signal.SIGTERM) if main else None
    ray.init(address=address, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    if main and sigterm is not None:  # ray.init puts its own in place (an exit that skips the cleanup below)
        signal.signal(signal.SIGTERM, sigterm)
    task = ray.remote(_train).options(num_cpus=num_cpus, num_gpus=num_gpus, max_retries=max_retries)
    waiting = {task.remote(config.to_dict(), num_cpus): (run_out / config.run_id(), config.run_id())
               for run_out, config in pending}
    try:
        while waiting:
            (ref,), _ = ray.wait(list(waiting), num_returns=1)
            run_dir, run_id = waiting.pop(ref)
            try:
                record, files = ray.get(ref)
                store(run_dir, record, files)
                report(progress_summary(record))
            except ResultsUnwritable:  # a full disk: every later run would fail alike
                raise
            except Exception as error:  # retries exhausted, or the row could not be stored
                report(lost_summary(run_id, error))
    finally:
        for ref in waiting:  # interrupted: stop what is still running
            ray.cancel(ref, force=True)
        ray.shutdown()
