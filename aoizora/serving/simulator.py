"""A request-level serving simulation on a SimPy clock: arrivals, a dispatcher, replicas.

Requests wait in one first-come-first-served queue; a dispatcher hands the oldest to the
first replica that is free (replicas that freed up earlier are served first), which is
the multi-server queue of queueing theory (M/G/c for Poisson arrivals). With
``batch_size`` > 1 a replica taking a request also takes up to ``batch_size - 1`` more
waiting requests *of the same kind*, when ``batch_of`` says that kind is batched; it
never waits for a batch to fill. ``service`` gives the seconds a replica spends on a
batch (one clip: the whole clip's latency). Everything is ordered by the clock and by
request and replica number, so a run is a function of its inputs.

    >>> from aoizora.serving.requests import Request, RequestKind, Clip
    >>> kind = RequestKind("m", Clip(64, 64, 5), 10)
    >>> reqs = tuple(Request(i, t, kind) for i, t in enumerate((0.0, 1.0, 1.5)))
    >>> run = simulate(reqs, replicas=1, service=lambda batch: 2.0 * len(batch))
    >>> [(s.start_s, s.finish_s) for s in run.served]
    [(0.0, 2.0), (2.0, 4.0), (4.0, 6.0)]
    >>> run = simulate(reqs, replicas=1, service=lambda b: 2.0 + len(b), batch_size=2)
    >>> [(s.start_s, s.finish_s, s.batch) for s in run.served]
    [(0.0, 3.0, 1), (3.0, 7.0, 2), (3.0, 7.0, 2)]
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any

import simpy

from aoizora.errors import ServingError
from aoizora.serving.requests import Request, RequestKind

__all__ = ["RunResult", "Served", "simulate"]

ServiceFn = Callable[[Sequence[Request]], float]


@dataclass(frozen=True)
class Served:
    """One request's fate: when its service started and ended, on which replica, in a
    batch of how many."""

    request: Request
    start_s: float
    finish_s: float
    replica: int
    batch: int

    @property
    def wait_s(self) -> float:
        return self.start_s - self.request.arrival_s

    @property
    def latency_s(self) -> float:
        return self.finish_s - self.request.arrival_s


@dataclass(frozen=True)
class RunResult:
    """Every request served (in request order) by ``replicas`` replicas."""

    served: tuple[Served, ...]
    replicas: int


def _check(requests: Sequence[Request], replicas: int, batch_size: int) -> None:
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise ServingError(f"replicas {replicas!r}: must be a positive whole number, e.g. 2")
    if batch_size < 1:
        raise ServingError(f"batch size {batch_size!r}: must be 1 or more, e.g. 2")
    if not requests:
        raise ServingError("no requests to serve; give a rate and a count, or a trace")
    times = [r.arrival_s for r in requests]
    if any(b < a for a, b in zip(times, times[1:], strict=False)):
        raise ServingError("requests must be given in arrival order")


def simulate(
    requests: Sequence[Request],
    *,
    replicas: int,
    service: ServiceFn,
    batch_size: int = 1,
    batch_of: Callable[[RequestKind], bool] | None = None,
) -> RunResult:
    """Serve ``requests`` (in arrival order) with ``replicas`` replicas until all are done."""
    _check(requests, replicas, batch_size)
    env = simpy.Environment(initial_time=0.0)
    queue: simpy.Store = simpy.Store(env)
    done: dict[int, Served] = {}
    batches = batch_of or (lambda _: True)

    def source() -> Generator[Any, Any, None]:
        for r in requests:
            if r.arrival_s > env.now:
                yield env.timeout(r.arrival_s - env.now)
            queue.put(r)

    def replica(index: int) -> Generator[Any, Any, None]:
        while True:
            first: Request = yield queue.get()
            batch = [first]
            if batch_size > 1 and batches(first.kind):
                for other in [r for r in queue.items if r.kind == first.kind]:
                    if len(batch) == batch_size:
                        break
                    queue.items.remove(other)
                    batch.append(other)
            start = env.now
            seconds = service(batch)
            if not seconds > 0:
                raise ServingError(
                    f"service time {seconds!r} s for {first.kind.label}: must be > 0"
                )
            yield env.timeout(seconds)
            for r in batch:
                done[r.id] = Served(r, start, env.now, index, len(batch))

    env.process(source())
    for i in range(replicas):
        env.process(replica(i))
    env.run()  # ends when every request is served: idle replicas wait on no scheduled event
    return RunResult(served=tuple(done[r.id] for r in requests), replicas=replicas)
