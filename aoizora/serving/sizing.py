"""The sizing question: which slice, how many replicas, at what cost per clip, meeting a p99.

For every slice (its plans give each request kind's service: :mod:`.service`) and
replica count, :func:`size_deployment` simulates the deployment (:mod:`.simulator`) over
independent replications and reports the latency percentiles with confidence
intervals, throughput, utilisation, queue length and the cost per clip (the replicas'
hourly price over the clips they finish an hour). An option meets the objective when
the upper end of its p99's confidence interval is within it (a trace, replayed once,
by its p99). A replica count whose utilisation ``rate x service / replicas`` is 1 or
more is not simulated: its queue grows without bound, and the option says how many
replicas the rate needs. Without ``--replicas`` the counts run from the fewest stable
ones up to the first that meets the objective.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aoizora.errors import ServingError
from aoizora.serving.prices import PriceTable
from aoizora.serving.requests import Request, RequestKind, poisson_arrivals
from aoizora.serving.service import SliceService
from aoizora.serving.simulator import simulate
from aoizora.serving.stats import Estimate, RunStats, estimate, run_stats
from aoizora.serving.theory import replicas_needed, utilisation

__all__ = ["Load", "Option", "SizingReport", "SizingSettings", "size_deployment"]

# Without --replicas: at most this many counts past the fewest stable one per slice.
MAX_EXTRA_REPLICAS = 16


@dataclass(frozen=True)
class Load:
    """What arrives: Poisson at ``rate_per_s`` of one ``kind``, or the requests of a trace."""

    rate_per_s: float
    kind: RequestKind | None = None
    trace: tuple[Request, ...] = ()

    def replication(self, seed: int, rep: int, count: int) -> tuple[Request, ...]:
        if self.trace:
            return self.trace
        assert self.kind is not None  # a Poisson load always has its kind
        rng = np.random.default_rng([seed, rep])
        return poisson_arrivals(rate_per_s=self.rate_per_s, count=count, kind=self.kind, rng=rng)


@dataclass(frozen=True)
class SizingSettings:
    """How hard to look: objective, replica counts, replications, requests, seed, batching."""

    slo_p99_s: float
    replicas: tuple[int, int] | None = None
    replications: int = 10
    requests: int = 2000
    warmup: int = 200
    seed: int = 0
    batch: bool = False


@dataclass(frozen=True)
class Option:
    """One slice with one replica count (``stats`` None: not simulated, utilisation >= 1)."""

    slice_spec: str
    num_chips: int
    replicas: int
    clip_s: float
    utilisation: float
    usd_per_hour: float
    stats: dict[str, Estimate] | None
    meets_slo: bool
    note: str = ""
    runs: tuple[RunStats, ...] = field(default=(), compare=False, repr=False)

    def mean(self, name: str) -> float | None:
        return None if self.stats is None else self.stats[name].mean

    @property
    def cost_per_clip(self) -> float | None:
        """The replicas' price per hour over the clips they finish per hour."""
        per_h = self.mean("throughput_per_h")
        return None if not per_h else self.usd_per_hour / per_h

    def to_json(self) -> dict[str, Any]:
        p99 = None if self.stats is None else self.stats["p99_s"].interval
        return {
            "slice": self.slice_spec,
            "replicas": self.replicas,
            "p50_s": self.mean("p50_s"),
            "p95_s": self.mean("p95_s"),
            "p99_s": self.mean("p99_s"),
            "throughput_per_h": self.mean("throughput_per_h"),
            "utilisation": self.utilisation,
            "cost_per_clip": self.cost_per_clip,
            "meets_slo": self.meets_slo,
            "chips": self.num_chips * self.replicas,
            "usd_per_hour": self.usd_per_hour,
            "clip_s": self.clip_s,
            "p99_ci_s": None if p99 is None else list(p99),
            "mean_queue_length": self.mean("mean_queue_length"),
            "wait_probability": self.mean("wait_probability"),
            "stable": self.stats is not None,
            "note": self.note,
        }


@dataclass(frozen=True)
class SizingReport:
    """Every option, the cheapest meeting the objective, and what the reader should know."""

    options: tuple[Option, ...]
    cheapest: Option | None
    rate_per_s: float
    notes: tuple[str, ...]


_FIGURES = ("p50_s", "p95_s", "p99_s", "throughput_per_h", "utilisation", "mean_queue_length",
            "wait_probability", "mean_wait_s")  # fmt: skip


def _simulate_option(service: SliceService, load: Load, replicas: int, st: SizingSettings,
                     ) -> tuple[dict[str, Estimate], tuple[RunStats, ...]]:  # fmt: skip
    runs = []
    for rep in range(1 if load.trace else st.replications):
        requests = load.replication(st.seed, rep, st.requests + st.warmup)
        run = simulate(requests, replicas=replicas, service=service.seconds,
                       batch_size=2 if st.batch else 1, batch_of=service.batches)  # fmt: skip
        runs.append(run_stats(run, warmup=0 if load.trace else st.warmup))
    return {f: estimate([getattr(r, f) for r in runs]) for f in _FIGURES}, tuple(runs)


def _meets(stats: dict[str, Estimate], slo_s: float) -> bool:
    p99 = stats["p99_s"]
    return (p99.mean if p99.interval is None else p99.interval[1]) <= slo_s


def _counts(need: int, st: SizingSettings) -> range:
    if st.replicas is not None:
        return range(st.replicas[0], st.replicas[1] + 1)
    return range(need, need + MAX_EXTRA_REPLICAS + 1)


def _slice_options(service: SliceService, load: Load, st: SizingSettings, usd_per_hour: float,
                   say: Callable[[str], None]) -> tuple[list[Option], list[str]]:  # fmt: skip
    sample = load.trace or load.replication(st.seed, 0, 64)
    mean_s = service.mean_service_s(sample)
    # The least load a request can bring: half a batch of two where batching pays.
    per_clip = sum(
        service.of(r.kind).batch_s(r.kind.steps, 2) / 2
        if st.batch and service.batches(r.kind)
        else service.of(r.kind).clip_s(r.kind.steps)
        for r in sample
    ) / len(sample)
    need = replicas_needed(rate_per_s=load.rate_per_s, service_s=per_clip)
    options: list[Option] = []
    notes: list[str] = []
    if mean_s > st.slo_p99_s:
        notes.append(f"{service.slice_spec}: one clip alone takes {mean_s:.1f} s, over the p99 "
                     f"objective of {st.slo_p99_s:g} s: no replica count can meet it")  # fmt: skip
    for r in _counts(need, st):
        rho = utilisation(rate_per_s=load.rate_per_s, service_s=mean_s, servers=r)
        price = usd_per_hour * r
        if r < need:
            note = f"utilisation {rho:.2f} >= 1: needs at least {need} replicas"
            options.append(
                Option(
                    service.slice_spec, service.num_chips, r, mean_s, rho, price, None, False, note
                )
            )
            continue
        say(f"[serve] {service.slice_spec} x {r} replicas: simulating "
            f"{1 if load.trace else st.replications} replication(s)")  # fmt: skip
        stats, runs = _simulate_option(service, load, r, st)
        ok = _meets(stats, st.slo_p99_s)
        options.append(Option(service.slice_spec, service.num_chips, r, mean_s,
                              stats["utilisation"].mean, price, stats, ok, runs=runs))  # fmt: skip
        if st.replicas is None and (ok or mean_s > st.slo_p99_s):
            break  # the first count meeting the objective, or none can
    return options, notes


def size_deployment(
    services: Sequence[SliceService],
    load: Load,
    settings: SizingSettings,
    prices: PriceTable,
    *,
    progress: Callable[[str], None] | None = None,
) -> SizingReport:
    """Every option of every slice (in the given order) and the cheapest meeting the p99."""
    if not settings.slo_p99_s > 0:
        raise ServingError(f"--slo-p99 {settings.slo_p99_s}: must be positive seconds, e.g. 600")
    say = progress or (lambda _: None)
    options: list[Option] = []
    notes: list[str] = []
    for service in services:
        price = prices.slice_usd_per_hour(service.generation, service.num_chips)
        got, why = _slice_options(service, load, settings, price, say)
        options += got
        notes += why
    ok = [o for o in options if o.meets_slo and o.cost_per_clip is not None]
    cheapest = min(ok, key=lambda o: (o.cost_per_clip, o.num_chips * o.replicas, o.slice_spec),
                   default=None)  # fmt: skip
    if cheapest is None:
        notes.append(f"no option meets the p99 objective of {settings.slo_p99_s:g} s; try more "
                     "replicas (--replicas), bigger slices or a longer objective")  # fmt: skip
    return SizingReport(tuple(options), cheapest, load.rate_per_s, tuple(notes))
