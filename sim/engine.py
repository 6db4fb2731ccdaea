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
  instant are batched into one recomputation.
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

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import simpy

from sim.errors import GraphError
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
    """One simulation: SimPy callbacks plus numpy arrays for the draining set."""

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
        self.links_of: list[np.ndarray] = []
        empty = np.zeros(0, dtype=np.int64)
        for nd in nodes:
            if isinstance(nd, Flow):
                self.links_of.append(
                    route_link_ids(slice_, tuple(nd.src), tuple(nd.dst), order=order)
                )
            else:
                self.links_of.append(empty)
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
        # Network state: the draining flows, their remaining bytes and rates,
        # and the (flow position, link) pairs of their routes.
        num_links = len(slice_.links)
        self.capacity: np.ndarray = np.full(num_links, slice_.link_bandwidth_bytes_per_s)
        self.link_bytes: np.ndarray = np.zeros(num_links)
        self.link_busy_s: np.ndarray = np.zeros(num_links)
        self.link_load: np.ndarray = np.zeros(num_links)
        self.act_nodes: np.ndarray = np.zeros(0, dtype=np.int64)
        self.act_remaining: np.ndarray = np.zeros(0)
        self.act_rate: np.ndarray = np.zeros(0)
        self.act_finish: np.ndarray = np.zeros(0)
        self.pair_pos: np.ndarray = np.zeros(0, dtype=np.int64)
        self.pair_link: np.ndarray = np.zeros(0, dtype=np.int64)
        self.pending: list[int] = []
        self.last_s = 0.0
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
        node_id = self.nodes[i].id
        self.events.append(Event(now, "release", node_id))
        node = self.nodes[i]
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

    def _recompute(self, *, wakeup: bool = False) -> None:
        self.dirty = False
        now = self.env.now
        dt = now - self.last_s
        if dt > 0 and self.act_nodes.size:
            self.act_remaining -= self.act_rate * dt
            self.link_bytes += self.link_load * dt
            self.link_busy_s[self.link_load > 0] += dt
        self.last_s = now
        # Departures: flows whose predicted finish is now.
        if self.act_nodes.size:
            done = self.act_finish <= now * (1.0 + _FINISH_REL_TOL)
            if wakeup:
                # The wake-up was set for the earliest finish: it finishes now
                # even if float rounding says otherwise, so time always advances.
                done[int(np.argmin(self.act_finish))] = True
            if done.any():
                self._remove(done)
        # Arrivals batched since the last recomputation.
        if self.pending:
            self._add(self.pending)
            self.pending = []
        self.version += 1
        if self.act_nodes.size == 0:
            self.link_load[:] = 0.0
            self.act_rate = np.zeros(0)
            if self.record_rates:
                self.rate_log.append(RateSnapshot(now, ()))
            return
        self.act_rate = max_min_rates(
            self.pair_pos, self.pair_link, self.act_nodes.size, self.capacity
        )
        self.link_load = np.bincount(
            self.pair_link, weights=self.act_rate[self.pair_pos], minlength=self.capacity.size
        )
        self.act_finish = now + self.act_remaining / self.act_rate
        if self.record_rates:
            ids = [self.nodes[int(i)].id for i in self.act_nodes]
            self.rate_log.append(
                RateSnapshot(now, tuple(zip(ids, (float(r) for r in self.act_rate), strict=True)))
            )
        wake = self.env.timeout(float(self.act_finish.min()) - now, value=self.version)
        wake.callbacks.append(self._on_wakeup)

    def _remove(self, done: np.ndarray) -> None:
        # Whatever float dust is left is delivered now, so bytes are conserved.
        done_pairs = done[self.pair_pos]
        leftover = np.where(done, np.maximum(self.act_remaining, 0.0), 0.0)
        self.link_bytes += np.bincount(
            self.pair_link[done_pairs],
            weights=leftover[self.pair_pos[done_pairs]],
            minlength=self.capacity.size,
        )
        finished = self.act_nodes[done]
        keep = ~done
        new_pos = np.cumsum(keep) - 1
        keep_pairs = ~done_pairs
        self.pair_pos = new_pos[self.pair_pos[keep_pairs]]
        self.pair_link = self.pair_link[keep_pairs]
        self.act_nodes = self.act_nodes[keep]
        self.act_remaining = self.act_remaining[keep]
        self.act_finish = self.act_finish[keep]
        for i in finished:
            self.worklist.append((self._FINISH, int(i)))

    def _add(self, new: list[int]) -> None:
        base = self.act_nodes.size
        links = [self.links_of[i] for i in new]
        lengths = np.fromiter((len(lk) for lk in links), dtype=np.int64, count=len(new))
        self.pair_pos = np.concatenate(
            [self.pair_pos, np.repeat(np.arange(base, base + len(new)), lengths)]
        )
        self.pair_link = np.concatenate([self.pair_link, *links])
        self.act_nodes = np.concatenate([self.act_nodes, np.asarray(new, dtype=np.int64)])
        sizes = np.fromiter((self.size_bytes[i] for i in new), dtype=float, count=len(new))
        self.act_remaining = np.concatenate([self.act_remaining, sizes])

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
        links = tuple(
            LinkRecord(
                src=lk.src,
                dst=lk.dst,
                dim=lk.dim,
                wrap=lk.wrap,
                bandwidth_bytes_per_s=bandwidth,
                bytes_carried=float(self.link_bytes[k]),
                busy_s=float(self.link_busy_s[k]),
                utilisation=(
                    float(self.link_bytes[k]) / (bandwidth * makespan_s) if makespan_s > 0 else 0.0
                ),
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
