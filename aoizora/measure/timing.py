"""Timing a call on devices: warm-up, repeats, and a clock read only once the work is done.

JAX dispatches asynchronously: a jitted call returns as soon as the work is queued,
so a clock read after the call alone times the dispatch. :func:`time_calls` reads
the clock after :func:`jax.block_until_ready` has returned for every output of the
repeat (the JAX docs' benchmarking advice, docs/facts.md, Timing JAX on devices).
A repeat may issue several calls back to back (``calls_per_sample``) and block once:
the device runs them one after the other while the host queues the next, so short
collectives are timed without the host's dispatch latency between them; the sample
is the repeat's time divided by its calls.

Nothing is left running on the devices when the loop is left early: on any exception
(Ctrl-C included) the calls already dispatched are waited for before it propagates.

    >>> import itertools
    >>> ticks = itertools.count(0.0, 0.5)
    >>> t = time_calls(lambda: 0, warmup=1, repeats=3, clock=lambda: next(ticks))
    >>> t.samples_s, t.mean_s, t.std_s
    ((0.5, 0.5, 0.5), 0.5, 0.0)
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax

from aoizora.errors import MeasureError

__all__ = ["Clock", "Timing", "settle", "time_calls"]

# Seconds from an arbitrary origin; time.perf_counter by default (monotonic, the finest).
Clock = Callable[[], float]


@dataclass(frozen=True)
class Timing:
    """Per-call seconds of every timed repeat and their statistics.

    ``std_s`` is the sample standard deviation over the repeats (``None`` with one
    repeat: no spread can be stated).
    """

    samples_s: tuple[float, ...]
    warmup: int
    calls_per_sample: int = 1
    # The most device memory one call held on the busiest device, where the runtime says
    # (aoizora.measure.memory.held_bytes); None on backends that do not (CPU).
    peak_hbm_bytes: int | None = None

    @property
    def mean_s(self) -> float:
        return statistics.fmean(self.samples_s)

    @property
    def std_s(self) -> float | None:
        return statistics.stdev(self.samples_s) if len(self.samples_s) > 1 else None

    @property
    def median_s(self) -> float:
        return statistics.median(self.samples_s)

    @property
    def min_s(self) -> float:
        return min(self.samples_s)

    @property
    def max_s(self) -> float:
        return max(self.samples_s)

    def summary(self) -> str:
        """One line for a row's notes: how it was timed and the spread of its repeats."""
        calls = f", {self.calls_per_sample} calls per repeat" if self.calls_per_sample > 1 else ""
        std = "n/a" if self.std_s is None else f"{self.std_s:.6g}"
        return (
            f"{len(self.samples_s)} repeats after {self.warmup} warm-up{calls}, each timed to "
            f"jax.block_until_ready: mean {self.mean_s:.6g} s, std {std} s, min "
            f"{self.min_s:.6g} s, median {self.median_s:.6g} s, max {self.max_s:.6g} s"
        )


def settle(outputs: Any) -> None:
    """Wait until every array in ``outputs`` (any pytree) is computed."""
    jax.block_until_ready(outputs)


def _drain(pending: list[Any]) -> None:
    """Wait for calls already dispatched before an exception leaves the loop."""
    try:
        settle(pending)
    except Exception:  # the call itself failed: nothing of it is left running
        pass


def time_calls(
    call: Callable[[], Any],
    *,
    warmup: int,
    repeats: int,
    calls_per_sample: int = 1,
    clock: Clock = time.perf_counter,
) -> Timing:
    """Time ``call()`` (a dispatch of device work): ``warmup`` untimed calls, then
    ``repeats`` samples of ``calls_per_sample`` calls each, timed until their outputs are
    ready. Raises :class:`MeasureError` for counts below what a timing needs."""
    if warmup < 0 or repeats < 1 or calls_per_sample < 1:
        raise MeasureError(
            f"warmup={warmup}, repeats={repeats}, calls per repeat={calls_per_sample}: a "
            "timing needs warmup >= 0 and at least one repeat of one call, e.g. --warmup 2 "
            "--repeats 10"
        )
    pending: list[Any] = []
    try:
        for _ in range(warmup):
            pending = [call()]
            settle(pending)
        samples = []
        for _ in range(repeats):
            pending = []
            start = clock()
            for _ in range(calls_per_sample):
                pending.append(call())
            settle(pending)
            samples.append((clock() - start) / calls_per_sample)
        pending = []
    except BaseException:
        _drain(pending)
        raise
    if not all(math.isfinite(s) and s >= 0 for s in samples):
        raise MeasureError(f"the clock went backwards or failed: samples {samples}")
    return Timing(samples_s=tuple(samples), warmup=warmup, calls_per_sample=calls_per_sample)
