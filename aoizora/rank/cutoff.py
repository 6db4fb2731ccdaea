"""A replay that would run past the placement search's deadline stops there.

The search prices the other shardings' given orders (the baselines') at the rate its first
replay ran (:meth:`aoizora.rank.search._Search.record_forced`), and that rate can be
several times off: on tpu7x:8x8x8 a context-512 baseline's given order was priced at
about 30 s and took 146 s, almost all of it in the quotient run of two all-to-alls that
overlap (:mod:`aoizora.rank.lumped`), and the slice ended 133 s past its share of the
study. So such a replay runs under :func:`replays_until`, and the loops that take its
time call :func:`check`: past the deadline it raises :class:`ReplayCut`, the search
leaves that order unreplayed (its sharding out of the comparison, in one line) and
ends at its deadline.

A check is a clock read; the loops call it every few hundred iterations. A replay fanned
out to a worker gets the deadline with its task, as a wall-clock time
(:class:`aoizora.rank.evaluate.BatchEvaluator`), and answers NaN when cut: the search then
leaves that leaf open under its bound, so the bound and gap stay true (on tpu7x:8x8x16 a
batch of 8 placements of a 2,048-device program, handed to 2 workers, ran 6 minutes past
the deadline).

>>> with replays_until(time.perf_counter() + 60.0):
...     check()  # well before the deadline: nothing happens
>>> with replays_until(time.perf_counter() - 1.0):
...     try:
...         check()
...     except ReplayCut as exc:
...         print(exc)
a replay ran past the placement search's deadline
>>> check()  # outside replays_until: never cut
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from aoizora.errors import AoizoraError

__all__ = ["CHECK_EVERY", "ReplayCut", "check", "deadline", "replays_until"]

CHECK_EVERY = 256  # iterations of a replay's loop between two clock reads

_until: list[float] = []  # the innermost deadline (time.perf_counter()), if any


class ReplayCut(AoizoraError):
    """A replay stopped at the placement search's deadline (never reaches a user: the
    search catches it)."""


@contextlib.contextmanager
def replays_until(at: float) -> Iterator[None]:
    """Within the block, :func:`check` raises :class:`ReplayCut` once
    :func:`time.perf_counter` is past ``at``."""
    _until.append(at)
    try:
        yield
    finally:
        _until.pop()


def deadline() -> float | None:
    """The innermost deadline set by :func:`replays_until` (``None``: none)."""
    return _until[-1] if _until else None


def check() -> None:
    """Raise :class:`ReplayCut` when a deadline set by :func:`replays_until` is past."""
    if _until and time.perf_counter() > _until[-1]:
        raise ReplayCut("a replay ran past the placement search's deadline")
