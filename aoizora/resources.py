"""The machine's resources while planning, said in one line when they give out.

A pod-scale plan (v5p:8x8x8, tpu7x:8x8x16) lowers programs of thousands of devices in
every worker of the fan-out pool (:mod:`aoizora.fanout`). When the machine runs out of
memory the kernel's OOM killer ends a worker with SIGKILL, or an allocation fails with
``MemoryError``; either way the command ends in one line -- what ran
(:func:`aoizora.interrupts.phase`: the phase and its slice), how the worker ended, what
to change -- and exit code 3 (:class:`~aoizora.errors.ResourceError`), never a traceback.

    >>> from aoizora.interrupts import phase
    >>> with phase("Stage 1 on v5p:8x8x8"):
    ...     print(str(worker_death([-9, -15])).split("; ")[0])
    a worker process died during Stage 1 on v5p:8x8x8: killed by SIGKILL (what the \
kernel's OOM killer sends when the machine is out of memory)
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from aoizora.errors import MemoryBoundExceeded, WorkerDied, WorkloadError
from aoizora.interrupts import current_phase, end_now, kill_registered, phase_of, resume_note

__all__ = [
    "DEFAULT_MEMORY_FRACTION",
    "WHAT_TO_CHANGE",
    "Exceeded",
    "MemoryBound",
    "memory_bound",
    "memory_guard",
    "meminfo_bytes",
    "out_of_memory_line",
    "over_bound_error",
    "take_exceeded",
    "tree_rss_bytes",
    "worker_death",
]

# What a user can change when the machine's memory gives out during a plan.
WHAT_TO_CHANGE = "fewer --workers hold fewer programs at once, --ray spreads them over machines"


def _how(exitcodes: Sequence[int | None]) -> str:
    """How the pool's first dead worker ended, from the workers' exit codes (negative: the
    signal; the pool then ends the others with SIGTERM, so SIGTERM counts last)."""
    codes = [c for c in exitcodes if c not in (None, 0)]
    codes.sort(key=lambda c: c == -signal.SIGTERM)
    if not codes:
        return "it ended without its result"
    code = codes[0]
    assert code is not None
    if code > 0:
        return f"exit status {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    if -code == signal.SIGKILL:
        return f"killed by {name} ({_OOM_KILLER})"
    return f"killed by {name}"


_OOM_KILLER = "what the kernel's OOM killer sends when the machine is out of memory"


def worker_death(
    exitcodes: Sequence[int | None] = (), *, memory_error: bool = False, how: str | None = None
) -> WorkerDied:
    """The error of a worker that died during the current phase: from the ``exitcodes``
    of the pool's workers, a ``memory_error`` (a ``MemoryError`` raised in one) or ``how``
    it ended in words (a Ray worker's crash)."""
    if how is None:
        how = "it ran out of memory (MemoryError)" if memory_error else _how(exitcodes)
    return WorkerDied(
        f"a worker process died during {current_phase()}: {how}; {WHAT_TO_CHANGE}; {resume_note()}"
    )


def out_of_memory_line(error: MemoryError) -> str:
    """The CLI's line for a ``MemoryError`` in its own process."""
    return (
        f"out of memory during {phase_of(error)} (MemoryError in the planner's own "
        f"process); {WHAT_TO_CHANGE}; {resume_note()}"
    )


# The default memory bound: this fraction of the memory the machine has available when
# the command starts (``MemAvailable``: free memory and what the kernel can reclaim).
DEFAULT_MEMORY_FRACTION = 0.8
CHECK_INTERVAL_S = 0.5  # how often the watchdog sums the process tree's memory
GRACE_S = 5.0  # how long killed workers may take to free the tree before the exit
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@dataclass(frozen=True)
class MemoryBound:
    """The most resident memory the command's processes may hold together, and where
    that number comes from (the flag, or the default's share of the machine)."""

    limit_bytes: int
    source: str


@dataclass(frozen=True)
class Exceeded:
    """What the watchdog saw when the bound was crossed."""

    phase: str
    used_bytes: int
    bound: MemoryBound


def meminfo_bytes(field: str) -> int | None:
    """A field of ``/proc/meminfo`` in bytes (``"MemAvailable"``), or None off Linux."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name == field:
                    return int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def memory_bound(max_memory_gb: float | None) -> MemoryBound | None:
    """``--max-memory-gb``'s bound (0: none); by default :data:`DEFAULT_MEMORY_FRACTION`
    of the memory available now (None where the machine does not say: not Linux)."""
    if max_memory_gb is not None:
        if not max_memory_gb >= 0:  # NaN too
            raise WorkloadError(
                f"--max-memory-gb {max_memory_gb}: must be a number of GB >= 0, e.g. "
                "--max-memory-gb 8 (0: no bound)"
            )
        if max_memory_gb == 0:
            return None
        return MemoryBound(int(max_memory_gb * 1e9), f"--max-memory-gb {max_memory_gb:g}")
    available = meminfo_bytes("MemAvailable")
    if available is None:
        return None
    share = int(DEFAULT_MEMORY_FRACTION * available)
    return MemoryBound(
        share,
        f"the default: {DEFAULT_MEMORY_FRACTION:.0%} of the {available / 1e9:.1f} GB this "
        "machine had available at the start",
    )


def tree_rss_bytes(root: int) -> int:
    """The resident memory of ``root`` and every process below it (``/proc``), summed."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return 0
    for entry in entries:
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            parents[int(entry)], rss[int(entry)] = int(fields[1]), int(fields[21]) * _PAGE
        except (OSError, IndexError, ValueError):
            continue
    total, frontier = rss.get(root, 0), {root}
    while frontier:
        kids = {pid for pid, parent in parents.items() if parent in frontier}
        total += sum(rss[k] for k in kids)
        frontier = kids
    return total


def over_bound_error(exceeded: Exceeded) -> MemoryBoundExceeded:
    """The one line of a run that crossed its memory bound."""
    b = exceeded.bound
    total = meminfo_bytes("MemTotal")
    machine = "" if total is None else f" (this machine has {total / 1e9:.0f} GB)"
    return MemoryBoundExceeded(
        f"the memory bound was reached during {exceeded.phase}: its processes held "
        f"{exceeded.used_bytes / 1e9:.1f} GB of the {b.limit_bytes / 1e9:.1f} GB bound "
        f"({b.source}); --max-memory-gb GB raises it{machine}, {WHAT_TO_CHANGE}; "
        f"{resume_note()}"
    )


class _Watchdog:
    """Sums the process tree's memory every :data:`CHECK_INTERVAL_S`; over the bound, it
    kills the registered workers (their pool then breaks, and :func:`take_exceeded` says
    why) or, when that frees nothing, ends the command itself in one line."""

    def __init__(self, bound: MemoryBound, prog: str) -> None:
        self.bound, self.prog = bound, prog
        self.stop = threading.Event()
        self.exceeded: Exceeded | None = None
        self.peak_bytes = 0
        self.thread = threading.Thread(target=self._run, name="aoizora-memory", daemon=True)

    def _run(self) -> None:
        me = os.getpid()
        while not self.stop.wait(CHECK_INTERVAL_S):
            used = tree_rss_bytes(me)
            self.peak_bytes = max(self.peak_bytes, used)
            if used <= self.bound.limit_bytes:
                continue
            if self.exceeded is None:  # first over: kill the workers, the planner says so
                self.exceeded = Exceeded(current_phase(), used, self.bound)
                if kill_registered() and not self.stop.wait(GRACE_S):
                    if tree_rss_bytes(me) <= self.bound.limit_bytes:
                        continue
            if not self.stop.is_set():  # over again, or this process itself: end it here
                exceeded = self.exceeded or Exceeded(current_phase(), used, self.bound)
                line = f"{self.prog}: error: {over_bound_error(exceeded)}"
                end_now(line, MemoryBoundExceeded.exit_code)


_guard: _Watchdog | None = None


def take_exceeded() -> MemoryBoundExceeded | None:
    """The error of a bound the watchdog saw crossed (once: the next plan starts afresh)."""
    if _guard is None or _guard.exceeded is None:
        return None
    error, _guard.exceeded = over_bound_error(_guard.exceeded), None
    return error


@contextlib.contextmanager
def memory_guard(bound: MemoryBound | None, *, prog: str) -> Iterator[None]:
    """Hold the command's processes to ``bound`` while the block runs (Linux; nothing
    when ``bound`` is None): the watchdog above."""
    global _guard
    if bound is None or not os.path.isdir("/proc"):
        yield
        return
    _guard = _Watchdog(bound, prog)
    _guard.thread.start()
    try:
        yield
    finally:
        _guard.stop.set()
        _guard.thread.join()
        _guard = None
