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

import signal
from collections.abc import Sequence

from aoizora.errors import WorkerDied
from aoizora.interrupts import current_phase, phase_of, resume_note

__all__ = ["WHAT_TO_CHANGE", "out_of_memory_line", "worker_death"]

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
