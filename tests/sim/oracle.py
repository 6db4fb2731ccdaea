"""Independent, deliberately naive references for the engine's tests.

Plain Python floats and loops, one global bottleneck per progressive-filling
round and a hand-written event loop without SimPy: slow, obviously correct,
and sharing no code with :mod:`sim.engine` except :func:`sim.routing.route`.
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.engine import Flow
from sim.routing import route
from sim.topology import Slice

__all__ = ["check_max_min", "reference_finish_times", "reference_max_min"]


def reference_max_min(routes: Sequence[Sequence[int]], capacity: Sequence[float]) -> list[float]:
    """Textbook progressive filling: freeze the flows of the single tightest link."""
    rate = [0.0] * len(routes)
    frozen = [False] * len(routes)
    remaining = list(capacity)
    while not all(frozen):
        best = None
        for link in range(len(capacity)):
            users = [f for f, r in enumerate(routes) if not frozen[f] and link in r]
            if users:
                share = remaining[link] / len(users)
                if best is None or share < best[0]:
                    best = (share, link)
        assert best is not None
        level, link = best
        for f, r in enumerate(routes):
            if not frozen[f] and link in r:
                frozen[f] = True
                rate[f] = level
                for lk in r:
                    remaining[lk] -= level
    return rate


def check_max_min(
    routes: Sequence[Sequence[int]], capacity: Sequence[float], rate: Sequence[float]
) -> None:
    """The max-min definition: feasible, and every flow has a saturated link
    on which no other flow gets more."""
    load = [0.0] * len(capacity)
    for f, r in enumerate(routes):
        for lk in r:
            load[lk] += rate[f]
    for lk, cap in enumerate(capacity):
        assert load[lk] <= cap * (1 + 1e-9), (lk, load[lk], cap)
    for f, r in enumerate(routes):
        assert rate[f] > 0
        assert any(
            load[lk] >= capacity[lk] * (1 - 1e-9)
            and all(rate[g] <= rate[f] * (1 + 1e-9) for g, q in enumerate(routes) if lk in q)
            for lk in r
        ), f


def reference_finish_times(slice_: Slice, flows: Sequence[Flow]) -> dict[str, float]:
    """Fluid replay of independent flows (start times, no ``after``)."""
    bw = slice_.link_bandwidth_bytes_per_s
    ids = {link: k for k, link in enumerate(slice_.links)}
    paths = {f.id: [ids[lk] for lk in route(slice_, f.src, f.dst)] for f in flows}
    # Drain start per flow; 0-hop and 0-byte flows finish without draining.
    arrivals = sorted((f.start_s + len(paths[f.id]) * slice_.hop_latency_s, f.id) for f in flows)
    size = {f.id: f.size_bytes for f in flows}
    finish: dict[str, float] = {}
    active: dict[str, float] = {}  # id -> remaining bytes
    now = 0.0
    queue = list(arrivals)
    while queue or active:
        order = sorted(active)
        rates = reference_max_min([paths[i] for i in order], [bw] * len(slice_.links))
        rate = dict(zip(order, rates, strict=True))
        next_finish = min((now + active[i] / rate[i] for i in order), default=float("inf"))
        next_arrival = queue[0][0] if queue else float("inf")
        t = min(next_finish, next_arrival)
        for i in order:
            active[i] -= rate[i] * (t - now)
        now = t
        for i in order:
            if now + active[i] / rate[i] <= now * (1 + 1e-12) or active[i] <= 1e-9 * size[i]:
                finish[i] = now
                del active[i]
        while queue and queue[0][0] <= now:
            _, i = queue.pop(0)
            if not paths[i] or size[i] == 0:
                finish[i] = now
            else:
                active[i] = size[i]
    return finish
