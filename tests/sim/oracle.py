"""Independent, deliberately naive references for the engine's tests.

Plain Python floats and loops, one global bottleneck per progressive-filling
round, a hand-written event loop without SimPy, and a routing function of
their own (:func:`oracle_path`): slow, obviously correct, and sharing no code
with :mod:`sim.engine`, :mod:`sim.sharing` or :mod:`sim.routing`. Links are
keyed by their (source chip, destination chip) pair, so the parallel cables of
a wrapped length-2 axis form one resource of twice the bandwidth by
construction.
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.engine import Flow
from sim.topology import Slice

__all__ = [
    "check_max_min",
    "oracle_capacity",
    "oracle_path",
    "reference_finish_times",
    "reference_max_min",
]

Pair = tuple[tuple[int, ...], tuple[int, ...]]


def oracle_path(
    shape: Sequence[int],
    wrap: Sequence[bool],
    src: Sequence[int],
    dst: Sequence[int],
    order: Sequence[int] | None = None,
) -> list[Pair]:
    """Chip pairs visited by dimension-ordered routing, written from the spec alone.

    Dimension by dimension (``order``, default 0, 1, 2): step one chip at a
    time towards the target; on a wrapped dimension go round the shorter
    way, and on a tie (exactly half-way round) the way of increasing
    coordinates.
    """
    cur = list(src)
    hops: list[Pair] = []
    for d in order if order is not None else range(len(shape)):
        n = shape[d]
        ahead = (dst[d] - cur[d]) % n if wrap[d] else dst[d] - cur[d]
        if wrap[d]:
            step = 1 if ahead <= n - ahead else -1
            count = ahead if step == 1 else n - ahead
        else:
            step = 1 if ahead > 0 else -1
            count = abs(ahead)
        for _ in range(count):
            here = tuple(cur)
            cur[d] = (cur[d] + step) % n
            hops.append((here, tuple(cur)))
    return hops


def oracle_capacity(slice_: Slice) -> dict[Pair, float]:
    """Bandwidth of every directed chip pair: one cable, or two on a wrapped length-2 axis."""
    bw = slice_.link_bandwidth_bytes_per_s
    cap: dict[Pair, float] = {}
    for chip in slice_.coords:
        for d, n in enumerate(slice_.shape):
            for step in (1, -1):
                if n == 1 or (not slice_.wraparound[d] and not 0 <= chip[d] + step < n):
                    continue
                other = list(chip)
                other[d] = (chip[d] + step) % n
                pair = (tuple(chip), tuple(other))
                cap[pair] = cap.get(pair, 0.0) + bw
    return cap


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


def oracle_problem(
    slice_: Slice, flows: Sequence[Flow]
) -> tuple[dict[str, list[int]], list[float]]:
    """Each flow's route as resource numbers, and the resources' capacities."""
    cap = oracle_capacity(slice_)
    number = {pair: k for k, pair in enumerate(sorted(cap))}
    paths = {
        f.id: [number[p] for p in oracle_path(slice_.shape, slice_.wraparound, f.src, f.dst)]
        for f in flows
    }
    return paths, [cap[p] for p in sorted(cap)]


def reference_finish_times(slice_: Slice, flows: Sequence[Flow]) -> dict[str, float]:
    """Fluid replay of independent flows (start times, no ``after``)."""
    paths, capacity = oracle_problem(slice_, flows)
    # Drain start per flow; 0-hop and 0-byte flows finish without draining.
    arrivals = sorted((f.start_s + len(paths[f.id]) * slice_.hop_latency_s, f.id) for f in flows)
    size = {f.id: f.size_bytes for f in flows}
    finish: dict[str, float] = {}
    active: dict[str, float] = {}  # id -> remaining bytes
    now = 0.0
    queue = list(arrivals)
    while queue or active:
        order = sorted(active)
        rates = reference_max_min([paths[i] for i in order], capacity)
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
