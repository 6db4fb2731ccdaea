"""What a serving run measured, and estimates with confidence intervals over replications.

A run's figures are taken over its *window*: from the arrival of the first request after
the warm-up to the arrival of the last request (the queue's start-up and its final
drain are left out). Latency percentiles are over the requests arriving in the window;
utilisation is each replica's busy time inside the window over its length; throughput
the requests finished inside it per hour; the mean queue length is the time-average
number waiting (the sum of waiting time inside the window over its length).

Independent replications (different random arrivals) give independent estimates; a
figure is reported as their mean with a Student-t confidence interval
(:func:`estimate`), the method of independent replications (Law, *Simulation Modeling
and Analysis*, 5th ed., sec. 9.4.1).

    >>> e = estimate([10.0, 12.0, 11.0, 13.0])
    >>> round(e.mean, 2), round(e.half_width, 3)
    (11.5, 2.054)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import stats as scipy_stats  # type: ignore[import-untyped]

from aoizora.errors import ServingError
from aoizora.serving.simulator import RunResult

__all__ = ["Estimate", "RunStats", "estimate", "run_stats"]


@dataclass(frozen=True)
class RunStats:
    """One run's figures over its window (module docstring)."""

    p50_s: float
    p95_s: float
    p99_s: float
    mean_latency_s: float
    mean_wait_s: float
    wait_probability: float
    throughput_per_h: float
    utilisation: float
    mean_queue_length: float
    requests: int
    latencies_s: tuple[float, ...] = field(default=(), repr=False, compare=False)


def _overlap(a: float, b: float, lo: float, hi: float) -> float:
    return max(0.0, min(b, hi) - max(a, lo))


def run_stats(run: RunResult, *, warmup: int = 0) -> RunStats:
    """The figures of ``run`` over its window, after ``warmup`` requests."""
    served = run.served[warmup:]
    if len(served) < 2:
        raise ServingError(
            f"{len(run.served)} requests with a warm-up of {warmup} leave {len(served)} to "
            "measure; simulate more requests"
        )
    lo, hi = served[0].request.arrival_s, served[-1].request.arrival_s
    span = hi - lo
    if span <= 0:
        raise ServingError("the measured requests all arrive at once; a window needs time")
    latency = np.array([s.latency_s for s in served])
    wait = np.array([s.wait_s for s in served])
    # A batch occupies its replica once, however many requests it holds.
    busy = {(s.replica, s.start_s): (s.start_s, s.finish_s) for s in run.served}
    busy_s = sum(_overlap(a, b, lo, hi) for a, b in busy.values())
    queued_s = sum(_overlap(s.request.arrival_s, s.start_s, lo, hi) for s in run.served)
    finished = sum(1 for s in run.served if lo < s.finish_s <= hi)
    p50, p95, p99 = np.percentile(latency, [50, 95, 99])
    return RunStats(
        p50_s=float(p50),
        p95_s=float(p95),
        p99_s=float(p99),
        mean_latency_s=float(latency.mean()),
        mean_wait_s=float(wait.mean()),
        wait_probability=float(np.mean(wait > 1e-9)),
        throughput_per_h=finished / span * 3600.0,
        utilisation=busy_s / (run.replicas * span),
        mean_queue_length=queued_s / span,
        requests=len(served),
        latencies_s=tuple(latency.tolist()),
    )


@dataclass(frozen=True)
class Estimate:
    """The mean of independent replications and the half-width of its confidence interval
    (``None`` from a single run, e.g. a trace replayed once)."""

    mean: float
    half_width: float | None
    level: float = 0.95

    @property
    def interval(self) -> tuple[float, float] | None:
        if self.half_width is None:
            return None
        return (self.mean - self.half_width, self.mean + self.half_width)

    def contains(self, value: float) -> bool:
        lo_hi = self.interval
        return lo_hi is not None and lo_hi[0] <= value <= lo_hi[1]


def estimate(values: Sequence[float], level: float = 0.95) -> Estimate:
    """Mean and Student-t half-width ``t_{(1+level)/2, n-1} s / sqrt(n)`` of ``values``."""
    n = len(values)
    if n == 0:
        raise ServingError("no replications to estimate from")
    mean = float(np.mean(values))
    if n == 1:
        return Estimate(mean, None, level)
    sd = float(np.std(values, ddof=1))
    t = float(scipy_stats.t.ppf((1 + level) / 2, n - 1))
    return Estimate(mean, t * sd / math.sqrt(n), level)
