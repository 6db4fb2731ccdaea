"""Fan-out: run independent tasks serially, in a local process pool, or on Ray.

The planner hands its two long, independent kinds of work here: compiles (one
libtpu AOT compile per candidate) and exact replays of a batch of placements.
Every backend returns results in task order, so the plan does not depend on
which one ran (the tests compare the plan files byte for byte).

- ``workers=1``: in this process, one task after another;
- ``workers=N`` (default: the machine's cores): a pool of ``N`` fresh
  processes (``spawn``: this process may hold libtpu's threads, which a
  ``fork`` would copy mid-flight);
- ``ray=ADDRESS``: tasks on a Ray cluster (``ray.init(address=ADDRESS)``;
  ``"local"`` starts one on this machine). Ray is the optional extra
  ``aoizora[ray]``.

Tasks and their arguments travel pickled by value with cloudpickle, so a
workload built by a closure (every :class:`~aoizora.workloads.base.Workload`
is) reaches a worker intact.

>>> with fan_out(workers=1) as pool:
...     pool.map(abs, [-1, 2, -3])
[1, 2, 3]
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Any, TypeVar

import cloudpickle

from aoizora.errors import AoizoraError
from aoizora.interrupts import deferred, on_hard_exit, reassert_handlers, worker_start
from aoizora.resources import take_exceeded, worker_death
from sim.engine import note_core_fallback

__all__ = ["FanOut", "default_workers", "fan_out"]

T = TypeVar("T")
R = TypeVar("R")

_DEATH_WAIT_S = 2.0  # how long a broken pool's worker is waited for, for its exit code
_POLL_S = 0.01


def _exitcode(proc: Any, *, deadline_s: float) -> int | None:
    """A pool worker's exit code, waited for until ``deadline_s`` (``time.monotonic``).

    The broken pool's manager thread joins the same workers: when its ``waitpid`` reaps
    one first, ours gets ECHILD and reads ``None`` until that thread stores the code (it
    must take the GIL back first), so a dead worker is polled again, not taken as alive.
    """
    with contextlib.suppress(Exception):
        proc.join(max(0.0, deadline_s - time.monotonic()))
    code: int | None = getattr(proc, "exitcode", None)
    while code is None and time.monotonic() < deadline_s:
        time.sleep(_POLL_S)
        code = getattr(proc, "exitcode", None)
    return code


def default_workers() -> int:
    """The machine's cores (the CPUs this process may run on)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not every platform has affinity
        return max(1, os.cpu_count() or 1)


def _nothing() -> None:
    pass


def _run_pickled(payload: bytes) -> bytes:
    fn, item = cloudpickle.loads(payload)
    return cloudpickle.dumps(fn(item))


class FanOut:
    """``map(fn, items)`` over the chosen backend, results in order."""

    def __init__(self, *, workers: int, ray_address: str | None) -> None:
        self.workers = workers
        self.ray_address = ray_address
        self._pool: ProcessPoolExecutor | None = None
        self._unregister: Callable[[], None] = _nothing
        self._ray: Any = None
        self._remote: Any = None
        self._ray_processes: list[tuple[int, str]] = []  # what a local Ray started
        self._seen: dict[int, Any] = {}  # every pool worker seen at a submit (_exitcodes)
        self._reaper: subprocess.Popen[bytes] | None = None
        if ray_address is not None:
            self._ray, started = _start_ray(ray_address)
            self._remote = self._ray.remote(_run_pickled)
            if started and ray_address == "local":
                self._ray_processes = _descendants(os.getpid())
                self._unregister = on_hard_exit(self.kill)
                self._reaper = _start_reaper(self._ray_processes)
        elif workers > 1:
            # Workers replay placements: say here, once, if they will run sim's
            # pure-Python core (rather than once in every worker).
            note_core_fallback()
            context = multiprocessing.get_context("spawn")
            # Workers ignore Ctrl-C (the parent decides) and die with this process,
            # however it ends (aoizora.interrupts.worker_start).
            self._pool = ProcessPoolExecutor(
                max_workers=workers, mp_context=context, initializer=worker_start,
                initargs=(os.getpid(),),
            )  # fmt: skip
            self._unregister = on_hard_exit(self.kill)

    @property
    def label(self) -> str:
        if self._ray is not None:
            return f"ray ({self.ray_address})"
        return "serial" if self._pool is None else f"{self.workers} processes"

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        return list(self.imap(fn, items))

    def imap(self, fn: Callable[[T], R], items: Sequence[T]) -> Iterator[R]:
        """:meth:`map`, yielding each result as soon as it and those before it are done
        (so a caller can report progress); same results, same order."""
        if not items:
            return
        if self._ray is not None:
            refs = [self._remote.remote(cloudpickle.dumps((fn, item))) for item in items]
            for ref in refs:
                yield cloudpickle.loads(self._ray_result(ref))
        elif self._pool is None or len(items) == 1:
            for item in items:
                yield fn(item)
        else:
            # submit, not Executor.map: map cancels its pending futures when the caller
            # stops early, and an interrupted pool then marks those same futures broken
            # (InvalidStateError in its manager thread, CPython 3.11).
            payloads = [cloudpickle.dumps((fn, item)) for item in items]
            with deferred():  # a submit may start a worker: never leave one half-started
                futures = [self._pool.submit(_run_pickled, p) for p in payloads]
            self._seen.update((id(p), p) for p in self._pool_processes())  # _exitcodes
            del payloads  # the pool holds its own copies until each task is sent
            for future in futures:
                yield cloudpickle.loads(self._result(future))

    def _result(self, future: Future[bytes]) -> bytes:
        """A pool task's result; a worker that died (a signal, an exit, a MemoryError)
        is :class:`~aoizora.errors.WorkerDied` in one line, not a traceback."""
        try:
            return future.result()
        except BrokenProcessPool:
            over = take_exceeded()  # the memory bound's watchdog killed the workers
            raise (over or worker_death(self._exitcodes())) from None
        except MemoryError:
            raise worker_death(memory_error=True) from None

    def _pool_processes(self) -> list[Any]:
        return list((getattr(self._pool, "_processes", None) or {}).values())

    def _exitcodes(self) -> list[int | None]:
        """The exit codes of every worker the pool started (None: still running), each
        waited for briefly: the pool is broken and ends them itself. Workers seen at
        submit count too: the broken pool may have dropped the one that died first from
        its table, leaving only those it ended with SIGTERM."""
        processes = list(({**self._seen} | {id(p): p for p in self._pool_processes()}).values())
        deadline_s = time.monotonic() + _DEATH_WAIT_S
        return [_exitcode(proc, deadline_s=deadline_s) for proc in processes]

    def _ray_result(self, ref: Any) -> bytes:
        """:meth:`_result` on Ray: a crashed worker or node, or a task out of memory."""
        exceptions = self._ray.exceptions
        died = tuple(
            getattr(exceptions, n)
            for n in ("WorkerCrashedError", "NodeDiedError", "OutOfMemoryError")
            if hasattr(exceptions, n)
        )
        try:
            return bytes(self._ray.get(ref))
        except MemoryError:  # a task's MemoryError comes back as one (RayTaskError)
            raise worker_death(memory_error=True) from None
        except died as exc:
            first = str(exc).strip().splitlines()[:1]
            raise worker_death(how=f"{type(exc).__name__}: {' '.join(first)[:200]}") from None

    def kill(self) -> None:
        """Kill the pool's workers now (their running tasks are lost, never half-written:
        every cache entry is written atomically), or the local Ray cluster this pool
        started, every process of it."""
        for pid, start in self._ray_processes:
            _kill_if_same(pid, start)
        if self._pool is None:
            return
        # concurrent.futures has no public way to stop a running task before 3.14's
        # terminate_workers(); its process table is the documented-in-source _processes.
        for proc in list((getattr(self._pool, "_processes", None) or {}).values()):
            with contextlib.suppress(Exception):
                proc.kill()

    def close(self, *, kill: bool = False) -> None:
        """Shut the pool down: wait for running tasks, or with ``kill`` end them first.
        A local Ray cluster this pool started is shut down, and what Ray leaves of it
        (its agents exit only when they next poll the raylet) is killed."""
        if self._ray_processes:
            self._ray.shutdown()
            self.kill()
            self._ray_processes = []
            self._unregister()
            if self._reaper is not None:  # nothing left for it to do
                self._reaper.kill()
                self._reaper.wait()
        if self._pool is not None:
            if kill:
                self.kill()
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
            self._unregister()


def _descendants(root: int) -> list[tuple[int, str]]:
    """Every process below ``root`` with its start time (``/proc``; none elsewhere), so a
    later kill cannot hit a new process that reused a pid."""
    parents: dict[int, int] = {}
    starts: dict[int, str] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat is not None:
                parents[int(entry)], starts[int(entry)] = stat
    found: list[tuple[int, str]] = []
    frontier = [root]
    while frontier:
        kids = [pid for pid, parent in parents.items() if parent in frontier]
        found.extend((pid, starts[pid]) for pid in kids)
        frontier = kids
    return sorted(found)


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, start time) of ``pid`` from ``/proc/PID/stat``, or None."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), fields[19]


# Kills the processes listed on its stdin once stdin ends, i.e. once the process that
# started it has ended however it ended (SIGKILL too): Ray's agents otherwise outlive a
# killed driver until they next poll their raylet (about a minute).
_REAPER = """
import os, signal, sys
pids = [line.split() for line in sys.stdin.read().splitlines() if line.strip()]
for pid, start in pids:
    try:
        with open(f"/proc/{pid}/stat") as f:
            same = f.read().rsplit(")", 1)[1].split()[19] == start
        if same:
            os.kill(int(pid), signal.SIGKILL)
    except (OSError, IndexError, ValueError):
        pass
"""


def _start_reaper(processes: list[tuple[int, str]]) -> subprocess.Popen[bytes] | None:
    """A small process that kills ``processes`` when this one ends (Linux: ``/proc``)."""
    if not processes or not os.path.isdir("/proc"):
        return None
    reaper = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", _REAPER], stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    assert reaper.stdin is not None
    reaper.stdin.write("".join(f"{pid} {start}\n" for pid, start in processes).encode())
    reaper.stdin.flush()  # kept open: it reads to the end, which is this process's end
    return reaper


def _kill_if_same(pid: int, start: str) -> None:
    got = _stat(pid)
    if got is not None and got[1] == start:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _start_ray(address: str) -> tuple[Any, bool]:
    """Ray, connected or started; and whether this call started it."""
    try:
        import ray  # the optional extra aoizora[ray]
    except ImportError:
        raise AoizoraError(
            "--ray needs Ray, which is not installed; install the extra with "
            "pip install 'aoizora[ray]' (ray==2.60.0), or drop --ray to use a local process pool"
        ) from None
    if ray.is_initialized():
        return ray, False
    if address == "local":
        ray.init(num_cpus=default_workers(), include_dashboard=False, log_to_driver=False)
    else:
        ray.init(address=address, log_to_driver=False)
    reassert_handlers()  # ray.init replaces the SIGTERM handler with a noisy one
    return ray, True


@contextmanager
def fan_out(*, workers: int | None = None, ray: str | None = None) -> Iterator[FanOut]:
    """A :class:`FanOut` for a ``with`` block; the pool closes with it.

    ``workers=None`` is :func:`default_workers`; ``ray`` is a Ray address or
    ``"local"``. Bad values raise :class:`AoizoraError` with the rule.
    """
    n = default_workers() if workers is None else workers
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise AoizoraError(f"workers={workers!r} must be a positive integer, e.g. --workers 2")
    pool = FanOut(workers=n, ray_address=ray)
    try:
        yield pool
    except BaseException:
        # An error or an interrupt (aoizora.interrupts.Interrupted, KeyboardInterrupt):
        # no running task is waited for.
        pool.close(kill=True)
        raise
    pool.close()
