"""The fluid max-min flow engine, driven by a SimPy event clock.

Model (fixed; see docs/simulator.md):

- A node is released at ``max(start_s, finish of everything in after)``.
- A :class:`Flow` of ``h`` hops released at ``r`` first pays ``h * hop_latency_s``
  without using bandwidth (as SimGrid's latency model does), then *drains*: its
  bytes move at its max-min fair rate over the links of its route, and it
  finishes when the last byte is through. A 0-hop flow (``src == dst``)
  finishes at release; a zero-byte flow finishes when its latency is paid.
- Rates are max-min fair (progressive filling) over all draining flows and are
  recomputed whenever a flow starts or stops draining; all changes at one
  instant are batched into one recomputation. Only the flows a change can
  affect are re-solved (see :mod:`sim.maxmin` for why that is exact); a large
  affected set is solved over all draining flows with :func:`max_min_rates`.
- A :class:`Compute` runs for ``duration_s`` from its release and uses no
  links. Computes on one chip may overlap: the caller orders them with
  ``after`` (a compiled schedule is already a total order per chip). A compute
  with ``chip=None`` and ``duration_s=0`` is a join/barrier node.

The run is deterministic: the same nodes give the same floats, events and
records. Bad input raises :class:`~sim.errors.GraphError` (duplicate or
unknown ids, cycles, negative or non-finite numbers) or
:class:`~sim.errors.RoutingError` (coordinates off the slice) before anything
runs, so a run never hangs.

Example: two equal flows share one link, then a compute waits for both.

>>> from sim.topology import make_slice
>>> s = make_slice([2], link_bandwidth_bytes_per_s=1e9, hop_latency_s=1e-6)
>>> r = simulate(s, [Flow("a", (0,), (1,), 1e6), Flow("b", (0,), (1,), 1e6),
...                  Compute("c", (1,), 1e-3, after=("a", "b"))])
>>> round(r.flow("a").finish_s, 9), round(r.finish_s("c"), 9)
(0.002001, 0.003001)
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import simpy

from sim.errors import GraphError
from sim.maxmin import progressive_filling, saturation_level
from sim.records import (
    ComputeRecord,
    Event,
    FlowRecord,
    LinkRecord,
    RateSnapshot,
    SimResult,
)
from sim.routing import route_link_ids
from sim.topology import Slice

__all__ = ["Compute", "Flow", "max_min_rates", "simulate"]

# Links whose fair share is within this relative distance of the bottleneck
# share saturate in the same progressive-filling round (float noise only).
_SHARE_REL_TOL = 1e-9
# Flows predicted to finish within this relative distance of "now" finish now.
_FINISH_REL_TOL = 1e-12
# Once the affected component exceeds this many (flow, link) pairs, walking it
# in Python costs more than one numpy solve of every draining flow (crossover
# measured on benchmarks/sim_bench.py's random case, CPU time: 40-250 all
# within 10%, 0 i.e. always numpy ~35% slower).
_NUMPY_MIN_PAIRS = 80


@dataclass(frozen=True)
class Flow:
    """``size_bytes`` from chip ``src`` to chip ``dst`` (coordinates on the slice).

    Released at ``max(start_s, finish of every id in after)``.
    """

    id: str
    src: tuple[int, ...]
    dst: tuple[int, ...]
    size_bytes: float
    start_s: float = 0.0
    after: tuple[str, ...] = ()


@dataclass(frozen=True)
class Compute:
    """A delay of ``duration_s`` on ``chip`` (``None``: no chip, e.g. a join).

    Released like a flow; uses no links; may overlap other computes on the
    same chip unless ordered by ``after``.
    """

    id: str
    chip: tuple[int, ...] | None
    duration_s: float
    start_s: float = 0.0
    after: tuple[str, ...] = ()


def max_min_rates(
    pair_flow: np.ndarray,
    pair_link: np.ndarray,
    num_flows: int,
    capacity_bytes_per_s: np.ndarray,
) -> np.ndarray:
    """Max-min fair rates by progressive filling.

    Flow ``pair_flow[k]`` crosses link ``pair_link[k]``; every flow must cross
    at least one link. Progressive filling raises all unfrozen rates together;
    a link saturates when its fair share ``remaining capacity / unfrozen flows
    on it`` is reached, freezing the flows crossing it. Each round here
    freezes the flows of every *local* bottleneck (a link whose share is the
    smallest among the links of all flows crossing it), which includes the
    global one, and removes their rates from their links.

    >>> max_min_rates(np.array([0, 1, 1]), np.array([0, 0, 1]), 2, np.array([1.0, 10.0]))
    array([0.5, 0.5])
    >>> max_min_rates(np.array([0, 1, 2, 2]), np.array([0, 0, 1, 0]), 3,
    ...               np.array([3.0, 0.5]))
    array([1.25, 1.25, 0.5 ])
    """
    rate = np.zeros(num_flows)
    if num_flows == 0:
        return rate
    pl = np.asarray(pair_link)
    pf = np.asarray(pair_flow)
    m = capacity_bytes_per_s.size
    cap = np.array(capacity_bytes_per_s, dtype=float)
    count = np.bincount(pl, minlength=m).astype(float)
    share = np.empty(m)
    for _ in range(num_flows):  # each round freezes at least one flow
        if pf.size == 0:
            break
        share.fill(np.inf)
        np.divide(cap, count, out=share, where=count > 0)
        np.maximum(share, 0.0, out=share)
        # A flow's tightest link, and for each link the tightest link of any
        # flow crossing it. A link whose share is that minimum is a local
        # bottleneck: shares only grow while filling, so its flows freeze at
        # its share exactly as the one-link-at-a-time algorithm would freeze
        # them. Freezing every local bottleneck per round gives the same
        # allocation in far fewer rounds.
        flow_min = np.full(num_flows, np.inf)
        np.minimum.at(flow_min, pf, share[pl])
        link_min = np.full(m, np.inf)
        np.minimum.at(link_min, pl, flow_min[pf])
        local = (count > 0) & (share <= link_min * (1.0 + _SHARE_REL_TOL))
        frozen = np.zeros(num_flows, dtype=bool)
        frozen[pf[local[pl]]] = True
        rate[frozen] = flow_min[frozen]
        frozen_pairs = frozen[pf]
        gone_links = pl[frozen_pairs]
        cap -= np.bincount(gone_links, weights=rate[pf[frozen_pairs]], minlength=m)
        count -= np.bincount(gone_links, minlength=m)
        keep = ~frozen_pairs
        pf = pf[keep]
        pl = pl[keep]
    return rate


def _check_number(value: object, *, what: str, node_id: str, example: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise GraphError(f"{what} of node {node_id!r} must be a number, got {value!r}; {example}")
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise GraphError(
            f"{what} of node {node_id!r} is {value!r}; it must be finite and >= 0; {example}"
        )
    return number


def _validate(slice_: Slice, nodes: Sequence[Flow | Compute]) -> dict[str, int]:
    index: dict[str, int] = {}
    for i, node in enumerate(nodes):
        if not isinstance(node, Flow | Compute):
            raise GraphError(f"node #{i} is {node!r}; expected a sim.engine.Flow or Compute")
        if not isinstance(node.id, str) or not node.id:
            raise GraphError(f"node #{i} has id {node.id!r}; ids are non-empty strings, e.g. 'f0'")
        if node.id in index:
            raise GraphError(
                f"duplicate node id {node.id!r} (nodes #{index[node.id]} and #{i}); ids must be "
                "unique, e.g. 'ag0/s1/cw/3'"
            )
        index[node.id] = i
        _check_number(node.start_s, what="start_s", node_id=node.id, example="e.g. 0.0")
        if isinstance(node, Flow):
            _check_number(node.size_bytes, what="size_bytes", node_id=node.id, example="e.g. 1e6")
        else:
            _check_number(node.duration_s, what="duration_s", node_id=node.id, example="e.g. 1e-4")
            if node.chip is not None and not slice_.contains(tuple(node.chip)):
                raise GraphError(
                    f"compute {node.id!r} is on chip {node.chip!r}, which is not on slice "
                    f"{slice_.name} of shape {slice_.shape}; e.g. {slice_.coords[0]!r} or None"
                )
    for node in nodes:
        if isinstance(node.after, str) or not isinstance(node.after, tuple | list):
            raise GraphError(
                f"'after' of node {node.id!r} must be a tuple of ids, got {node.after!r}; "
                "e.g. ('f1',)"
            )
        for dep in node.after:
            if dep not in index:
                raise GraphError(
                    f"node {node.id!r} waits for unknown id {dep!r}; 'after' may only name "
                    f"nodes given to simulate(), e.g. {next(iter(index))!r}"
                )
            if dep == node.id:
                raise GraphError(f"node {node.id!r} lists itself in 'after'")
    _check_acyclic(nodes, index)
    return index


def _check_acyclic(nodes: Sequence[Flow | Compute], index: dict[str, int]) -> None:
    indegree = [len(set(node.after)) for node in nodes]
    children: list[list[int]] = [[] for _ in nodes]
    for i, node in enumerate(nodes):
        for dep in sorted(set(node.after)):
            children[index[dep]].append(i)
    queue = deque(i for i, d in enumerate(indegree) if d == 0)
    seen = 0
    while queue:
        i = queue.popleft()
        seen += 1
        for c in children[i]:
            indegree[c] -= 1
            if indegree[c] == 0:
                queue.append(c)
    if seen == len(nodes):
        return
    # Walk back along unfinished predecessors until a node repeats: a cycle.
    stuck = {i for i, d in enumerate(indegree) if d > 0}
    start = min(stuck)
    path = [start]
    pos = {start: 0}
    cur = start
    while True:
        cur = next(index[d] for d in sorted(set(nodes[cur].after)) if index[d] in stuck)
        if cur in pos:
            cycle = [nodes[i].id for i in path[pos[cur] :]][::-1]
            break
        pos[cur] = len(path)
        path.append(cur)
    shown = " -> ".join(repr(c) for c in [*cycle, cycle[0]])
    raise GraphError(
        f"dependency cycle: {shown} (each waits for the next to finish); remove one of "
        "these ids from an 'after' list"
    )


class _Run:
    """One simulation: SimPy callbacks plus the draining set, updated incrementally.

    The draining flows keep their max-min rates between changes; at each
    batch of arrivals and departures only the flows that can change are
    recomputed (see :mod:`sim.maxmin` for why that is exact). Each draining
    flow carries ``(remaining bytes at t_upd, rate, predicted finish)``, and a
    heap of predicted finishes (stale entries skipped) gives the next
    departure.
    """

    def __init__(
        self,
        slice_: Slice,
        nodes: Sequence[Flow | Compute],
        index: dict[str, int],
        order: Sequence[int] | None,
        record_rates: bool,
    ) -> None:
        self.slice = slice_
        self.nodes = nodes
        self.env = simpy.Environment()
        n = len(nodes)
        self.size_bytes = [float(nd.size_bytes) if isinstance(nd, Flow) else 0.0 for nd in nodes]
        routes: dict[tuple[tuple[int, ...], tuple[int, ...]], tuple[int, ...]] = {}
        self.links_of: list[tuple[int, ...]] = []
        for nd in nodes:
            if isinstance(nd, Flow):
                key = (tuple(nd.src), tuple(nd.dst))
                ids = routes.get(key)
                if ids is None:
                    ids = tuple(route_link_ids(slice_, key[0], key[1], order=order).tolist())
                    routes[key] = ids
                self.links_of.append(ids)
            else:
                self.links_of.append(())
        self.waiting = [len(set(nd.after)) for nd in nodes]
        self.ready_s = [float(nd.start_s) for nd in nodes]
        self.children: list[list[int]] = [[] for _ in nodes]
        for i, nd in enumerate(nodes):
            for dep in sorted(set(nd.after), key=lambda d: index[d]):
                self.children[index[dep]].append(i)
        self.release_s = [math.nan] * n
        self.drain_s = [math.nan] * n
        self.finish_s = [math.nan] * n
        self.events: list[Event] = []
        self.worklist: deque[tuple[int, int]] = deque()
        self.record_rates = record_rates
        self.rate_log: list[RateSnapshot] = []
        # Network state. ``active`` and ``link_users`` are insertion-ordered
        # (drain order), so every iteration over them is deterministic.
        num_links = len(slice_.links)
        self.bandwidth_bytes_per_s = float(slice_.link_bandwidth_bytes_per_s)
        self.link_users: list[dict[int, None]] = [{} for _ in range(num_links)]
        self.link_busy_s = [0.0] * num_links
        self.busy_since_s = [0.0] * num_links
        self.active: dict[int, None] = {}
        self.rate = [0.0] * n
        self.remaining_bytes = [0.0] * n  # as of updated_s
        self.updated_s = [0.0] * n
        self.predicted_finish_s = [math.inf] * n
        self.drain_seq = [0] * n
        self.next_seq = 0
        self.finish_heap: list[tuple[float, int, int]] = []  # (finish, drain seq, node)
        self.pending: list[int] = []
        self.version = 0
        self.dirty = False
        self.hop_latency_s = slice_.hop_latency_s

    # -- node life cycle (all run from the worklist, never recursively) -----

    _RELEASE, _DRAIN, _FINISH = 0, 1, 2

    def _drain_worklist(self) -> None:
        work = self.worklist
        while work:
            what, i = work.popleft()
            if what == self._RELEASE:
                self._release(i)
            elif what == self._DRAIN:
                self._start_drain(i)
            else:
                self._finish(i)

    def _on_timer(self, event: simpy.Event) -> None:
        self.worklist.append(cast(tuple[int, int], event.value))  # set by _later
        self._drain_worklist()

    def _later(self, delay_s: float, what: int, i: int) -> None:
        timer = self.env.timeout(delay_s, value=(what, i))
        timer.callbacks.append(self._on_timer)

    def _release(self, i: int) -> None:
        now = self.ready_s[i]
        self.release_s[i] = now
        node = self.nodes[i]
        self.events.append(Event(now, "release", node.id))
        if isinstance(node, Compute):
            if node.duration_s > 0:
                self._later(node.duration_s, self._FINISH, i)
            else:
                self.worklist.append((self._FINISH, i))
            return
        hops = len(self.links_of[i])
        if hops == 0:
            self.drain_s[i] = now
            self.worklist.append((self._FINISH, i))
            return
        latency_s = hops * self.hop_latency_s
        if latency_s > 0:
            self._later(latency_s, self._DRAIN, i)
        else:
            self.worklist.append((self._DRAIN, i))

    def _start_drain(self, i: int) -> None:
        now = self.env.now
        self.drain_s[i] = now
        self.events.append(Event(now, "drain", self.nodes[i].id))
        if self.size_bytes[i] == 0:
            self.worklist.append((self._FINISH, i))
            return
        self.drain_seq[i] = self.next_seq
        self.next_seq += 1
        self.pending.append(i)
        self._touch()

    def _finish(self, i: int) -> None:
        now = self.env.now
        self.finish_s[i] = now
        self.events.append(Event(now, "finish", self.nodes[i].id))
        for c in self.children[i]:
            self.waiting[c] -= 1
            if now > self.ready_s[c]:
                self.ready_s[c] = now
            if self.waiting[c] == 0:
                if self.ready_s[c] > now:
                    self._later(self.ready_s[c] - now, self._RELEASE, c)
                else:
                    self.ready_s[c] = now
                    self.worklist.append((self._RELEASE, c))

    # -- the network -------------------------------------------------------

    def _touch(self) -> None:
        if not self.dirty:
            self.dirty = True
            timer = self.env.timeout(0.0)
            timer.callbacks.append(self._on_dirty)

    def _on_dirty(self, _event: simpy.Event) -> None:
        if self.dirty:
            self._recompute()
            self._drain_worklist()

    def _on_wakeup(self, event: simpy.Event) -> None:
        if event.value == self.version:
            self._recompute(wakeup=True)
            self._drain_worklist()

    def _departures(self, now: float, *, wakeup: bool) -> list[int]:
        """Pop the flows whose predicted finish is now, in drain order."""
        heap = self.finish_heap
        predicted = self.predicted_finish_s
        active = self.active
        limit = now * (1.0 + _FINISH_REL_TOL)
        done: list[int] = []
        while heap:
            t, _, i = heap[0]
            if i not in active or predicted[i] != t:
                heapq.heappop(heap)  # stale: the flow's rate changed or it left
                continue
            if t > limit and not (wakeup and not done):
                break
            # The wake-up was set for the earliest finish: it finishes now even
            # if float rounding says otherwise, so time always advances.
            heapq.heappop(heap)
            if i not in done:
                done.append(i)
        done.sort(key=self.drain_seq.__getitem__)
        return done

    def _recompute(self, *, wakeup: bool = False) -> None:
        self.dirty = False
        now = self.env.now
        active = self.active
        link_users = self.link_users
        rate = self.rate
        theta = math.inf  # flows with an old rate below this keep it (sim.maxmin)
        seeds: list[int] = []
        if active:
            for i in self._departures(now, wakeup=wakeup):
                del active[i]
                if rate[i] < theta:
                    theta = rate[i]
                for lk in self.links_of[i]:
                    users = link_users[lk]
                    del users[i]
                    if not users:
                        self.link_busy_s[lk] += now - self.busy_since_s[lk]
                seeds.extend(self.links_of[i])
                self.worklist.append((self._FINISH, i))
        new: dict[int, None] = {}
        if self.pending:
            for i in self.pending:
                new[i] = None
                active[i] = None
                for lk in self.links_of[i]:
                    users = link_users[lk]
                    if not users:
                        self.busy_since_s[lk] = now
                    users[i] = None
            self.pending = []
            arriving: dict[int, int] = {}
            for i in new:
                for lk in self.links_of[i]:
                    arriving[lk] = arriving.get(lk, 0) + 1
            for lk, k in arriving.items():
                level = saturation_level(
                    (rate[j] for j in link_users[lk] if j not in new),
                    new_flows=k,
                    capacity=self.bandwidth_bytes_per_s,
                )
                if level < theta:
                    theta = level
            seeds.extend(arriving)
        self.version += 1
        if seeds and active:
            self._update_rates(now, theta, seeds, new)
        if self.record_rates:
            self.rate_log.append(
                RateSnapshot(now, tuple((self.nodes[i].id, rate[i]) for i in active))
            )
        heap = self.finish_heap
        predicted = self.predicted_finish_s
        while heap and (heap[0][2] not in active or predicted[heap[0][2]] != heap[0][0]):
            heapq.heappop(heap)
        if heap:
            wake = self.env.timeout(heap[0][0] - now, value=self.version)
            wake.callbacks.append(self._on_wakeup)

    def _update_rates(
        self, now: float, theta: float, seeds: list[int], new: dict[int, None]
    ) -> None:
        """Re-solve the component of changed links among flows at or above ``theta``."""
        rate = self.rate
        link_users = self.link_users
        links_of = self.links_of
        # Float noise in theta only ever widens the set: a smaller theta is exact too.
        threshold = theta * (1.0 - _SHARE_REL_TOL)
        bandwidth = self.bandwidth_bytes_per_s
        comp: dict[int, tuple[int, ...]] = {}
        skip: set[int] = set()  # flows that keep their rate
        users: dict[int, list[int]] = {}  # component link -> its component flows
        residual: dict[int, float] = {}  # component link -> capacity minus kept flows
        stack = sorted(set(seeds), reverse=True)
        pairs = 0
        while stack:
            lk = stack.pop()
            if lk in users:
                continue
            mine: list[int] = []
            cap = bandwidth
            for f in link_users[lk]:
                if f in comp:
                    mine.append(f)
                elif f in skip:
                    cap -= rate[f]
                elif f in new or rate[f] >= threshold:
                    links = links_of[f]
                    comp[f] = links
                    mine.append(f)
                    pairs += len(links)
                    stack.extend(links)
                    if pairs > _NUMPY_MIN_PAIRS:
                        # A large component: walking it in Python costs more
                        # than one vectorised solve of every draining flow.
                        self._solve_all(now, new)
                        return
                else:
                    skip.add(f)
                    cap -= rate[f]
            users[lk] = mine
            residual[lk] = cap
        if not comp:
            return
        self._apply(now, progressive_filling(comp, residual, users=users), new)

    def _solve_all(self, now: float, new: dict[int, None]) -> None:
        """Max-min rates of every draining flow at once (numpy)."""
        order = list(self.active)
        links_of = self.links_of
        lengths = [len(links_of[f]) for f in order]
        pair_flow = np.repeat(np.arange(len(order)), lengths)
        pair_link = np.fromiter(
            (lk for f in order for lk in links_of[f]), dtype=np.int64, count=sum(lengths)
        )
        capacity = np.full(len(self.link_users), self.bandwidth_bytes_per_s)
        solved = max_min_rates(pair_flow, pair_link, len(order), capacity)
        self._apply(now, dict(zip(order, solved.tolist(), strict=True)), new)

    def _apply(self, now: float, new_rates: dict[int, float], new: dict[int, None]) -> None:
        """Set new rates: advance each changed flow's bytes and predicted finish."""
        rate = self.rate
        remaining = self.remaining_bytes
        updated = self.updated_s
        predicted = self.predicted_finish_s
        heap = self.finish_heap
        seq = self.drain_seq
        for f, r in new_rates.items():
            if f in new:
                remaining[f] = self.size_bytes[f]
            elif r == rate[f]:
                continue
            else:
                remaining[f] -= rate[f] * (now - updated[f])
            updated[f] = now
            rate[f] = r
            t = now + remaining[f] / r if r > 0 else math.inf
            predicted[f] = t
            heapq.heappush(heap, (t, seq[f], f))

    # -- driver ------------------------------------------------------------

    def run(self) -> SimResult:
        for i in range(len(self.nodes)):
            if self.waiting[i] == 0:
                if self.ready_s[i] > 0:
                    self._later(self.ready_s[i], self._RELEASE, i)
                else:
                    self.worklist.append((self._RELEASE, i))
        self._drain_worklist()
        self.env.run()
        unfinished = [self.nodes[i].id for i, f in enumerate(self.finish_s) if math.isnan(f)]
        if unfinished:  # cannot happen for a validated DAG; never return silently
            raise RuntimeError(f"simulation ended with unfinished nodes {unfinished[:5]}")
        return self._result()

    def _result(self) -> SimResult:
        flows: list[FlowRecord] = []
        computes: list[ComputeRecord] = []
        for i, node in enumerate(self.nodes):
            if isinstance(node, Flow):
                flows.append(
                    FlowRecord(
                        id=node.id,
                        src=tuple(node.src),
                        dst=tuple(node.dst),
                        size_bytes=float(node.size_bytes),
                        hops=len(self.links_of[i]),
                        release_s=self.release_s[i],
                        drain_s=self.drain_s[i],
                        finish_s=self.finish_s[i],
                    )
                )
            else:
                computes.append(
                    ComputeRecord(
                        id=node.id,
                        chip=None if node.chip is None else tuple(node.chip),
                        duration_s=float(node.duration_s),
                        release_s=self.release_s[i],
                        finish_s=self.finish_s[i],
                    )
                )
        makespan_s = max(self.finish_s, default=0.0)
        bandwidth = self.slice.link_bandwidth_bytes_per_s
        # Every flow delivers all its bytes over every link of its route, so a
        # link's integrated rate x time over the run is exactly this sum.
        link_bytes = [0.0] * len(self.slice.links)
        for i, route_ids in enumerate(self.links_of):
            for lk in route_ids:
                link_bytes[lk] += self.size_bytes[i]
        links = tuple(
            LinkRecord(
                src=lk.src,
                dst=lk.dst,
                dim=lk.dim,
                wrap=lk.wrap,
                bandwidth_bytes_per_s=bandwidth,
                bytes_carried=link_bytes[k],
                busy_s=self.link_busy_s[k],
                utilisation=(link_bytes[k] / (bandwidth * makespan_s) if makespan_s > 0 else 0.0),
            )
            for k, lk in enumerate(self.slice.links)
        )
        return SimResult(
            slice_name=self.slice.name,
            shape=self.slice.shape,
            wraparound=self.slice.wraparound,
            makespan_s=float(makespan_s),
            flows=tuple(flows),
            computes=tuple(computes),
            links=links,
            events=tuple(self.events),
            rate_log=tuple(self.rate_log),
        )


def simulate(
    slice_: Slice,
    nodes: Sequence[Flow | Compute],
    *,
    routing_order: Sequence[int] | None = None,
    record_rates: bool = False,
) -> SimResult:
    """Replay ``nodes`` (flows and computes, a DAG through ``after``) on ``slice_``.

    ``routing_order`` is the dimension order of :func:`sim.routing.route`
    (default x, y, z). ``record_rates=True`` also logs every max-min
    allocation (for tests and debugging; it costs time).

    >>> from sim.topology import load_slice
    >>> s = load_slice("v5e:2x4")
    >>> r = simulate(s, [Flow("f", (0, 0), (1, 3), 4.5e6)])
    >>> r.flow("f").hops, round(r.makespan_s * 1e6, 6)  # 4 us latency + 100 us drain
    (4, 104.0)
    """
    index = _validate(slice_, nodes)
    return _Run(slice_, nodes, index, routing_order, record_rates).run()
