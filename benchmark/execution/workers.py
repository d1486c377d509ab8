"""Local worker processes that a sweep can stop all at once and lose one at a time.

Each worker is a spawned process that takes jobs (a function and its arguments) over its own pipe
and sends back each result, or the exception the job raised. The driver knows which job every
worker holds, so a worker that dies mid-job (SIGKILL, the out-of-memory killer) loses that job only:
it comes back as ``WorkerLost`` and a fresh worker takes the next job. ``stop`` kills every worker
(SIGKILL: what a run was doing leaves no row, so a resumed sweep reruns it) and waits for each.
No worker outlives the driver: each asks the kernel to kill it when the driver dies, however it
dies (Linux's PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
from multiprocessing.connection import Connection, wait
from multiprocessing.context import SpawnContext
from typing import Callable, Iterator

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class WorkerLost(RuntimeError):
    """A worker process ended while it held a job (killed by a signal, or it exited)."""


class Interrupted(RuntimeError):
    """A worker's job was interrupted by a signal sent to the worker (its run left unfinished)."""


def _die_with(parent: int) -> None:
    """Have the kernel SIGKILL this process when ``parent`` dies (Linux; elsewhere, nothing)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before the request was in place
        os._exit(1)


def _serve(conn: Connection, parent: int, initializer: Callable, initargs: tuple) -> None:
    """A worker's life: take a job, send back its result (or exception), until the pipe closes."""
    _die_with(parent)
    initializer(*initargs)
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            return
        if job is None:
            return
        function, args = job
        try:
            result = function(*args)
        except KeyboardInterrupt as error:  # Lightning turns a SIGTERM sent to this worker into one
            conn.send(Interrupted(f"interrupted by a signal: {error}"))
            return
        except Exception as error:
            result = error
        try:
            conn.send(result)
        except Exception as error:  # an exception that cannot be pickled: send what it said
            conn.send(RuntimeError(f"{type(result).__name__}: {result} ({error})"))


class Worker:
    def __init__(self, context: SpawnContext, initializer: Callable, initargs: tuple) -> None:
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child, os.getpid(), initializer, initargs))
        self.process.start()
        child.close()  # the worker's end: once the worker is gone, reading ours gives EOF

    def describe_end(self) -> str:
        """How the worker ended: 'was killed by SIGKILL', 'exited with code 1'."""
        self.process.join(timeout=5)
        code = self.process.exitcode
        if code is not None and code < 0:
            return f"was killed by {signal.Signals(-code).name}"
        return f"exited with code {code}" if code is not None else "stopped answering"

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        self.conn.close()


class Workers:
    """``count`` worker processes (spawned; ``initializer(*initargs)`` runs first in each)."""

    def __init__(self, count: int, initializer: Callable, initargs: tuple = ()) -> None:
        self.context = multiprocessing.get_context("spawn")
        self.make = lambda: Worker(self.context, initializer, initargs)
        self.count = count
        self.idle: list[Worker] = []
        self.held: dict[Worker, int] = {}  # worker → index of the job it holds
        try:
            for _ in range(count):
                self.idle.append(self.make())
        except BaseException:  # a signal while they start: none is left behind
            self.stop()
            raise

    def results(self, jobs: list[tuple[Callable, tuple]]) -> Iterator[tuple[int, object]]:
        """Run ``jobs`` [(function, args)], in order; yield (job index, its result) as each ends. The
        result is the exception the job raised, WorkerLost when its worker died, or Interrupted.
        ``jobs`` may grow while this runs: what the caller appends before the next yield is run too."""
        taken = 0  # jobs[:taken] are sent (or done)
        while taken < len(jobs) or self.held:
            while taken < len(jobs) and (self.idle or len(self.held) < self.count):
                worker = self.idle.pop() if self.idle else self.make()  # a lost worker's place is filled when needed
                try:
                    worker.conn.send(jobs[taken])
                except OSError:  # it died while idle: a fresh one takes the job
                    worker.kill()
                    self.idle.append(self.make())
                    continue
                self.held[worker] = taken
                taken += 1
            ready = wait([worker.conn for worker in self.held])
            for worker in [w for w in list(self.held) if w.conn in ready]:
                index = self.held.pop(worker)
                try:
                    result = worker.conn.recv()
                except (EOFError, OSError):
                    result = WorkerLost(f"worker process {worker.process.pid} {worker.describe_end()} mid-run")
                if isinstance(result, (WorkerLost, Interrupted)):
                    worker.kill()
                else:
                    self.idle.append(worker)
                yield index, result

    def running(self) -> int:
        """How many jobs the workers hold now."""
        return len(self.held)

    def stop(self) -> None:
        """Kill every worker now and wait for each (a job it held leaves no result)."""
        for worker in list(self.held) + self.idle:
            worker.kill()
        self.held, self.idle = {}, []
