"""The fluid max-min flow engine, driven by a SimPy event clock.

Model (fixed; see docs/simulator.md):

- A node is released at ``max(start_s, finish of everything in after)``.
- A :class:`Flow` of ``h`` hops released at ``r`` first pays ``h * hop_latency_s``
  without using bandwidth (as SimGrid's latency model does), then *drains*: its
  bytes move at its max-min fair rate over the links of its route, and it
  finishes when the last byte is through. A 0-hop flow (``src == dst``)
  finishes at release; a zero-byte flow finishes when its latency is paid.
- Rates are max-min fair (progressive filling) over all draining flows and
  change whenever a flow starts or stops draining; all changes at one instant
  are batched into one update, which re-solves only the flows the change
  reaches (:mod:`sim.sharing`). The parallel cables of a wrapped length-2
  axis pool their bandwidth (:mod:`sim.cables`).
- A :class:`Compute` runs for ``duration_s`` from its release and uses no
  links. Computes on one chip may overlap: the caller orders them with
  ``after`` (a compiled schedule is already a total order per chip). A compute
  with ``chip=None`` and ``duration_s=0`` is a join/barrier node.

Time advances from instant to instant in a SimPy process; the instants come
from an agenda of releases, drain starts and compute finishes plus the next
predicted flow finish. The run is deterministic: the same nodes give the same
floats, events and records. Bad input raises :class:`~sim.errors.GraphError`
or :class:`~sim.errors.RoutingError` (:func:`sim.nodes.validate_graph`)
before anything runs, so a run never hangs.

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
from collections.abc import Generator, Sequence

import simpy

from sim.cables import channels
from sim.maxmin import max_min_rates
from sim.nodes import CheckedGraph, Compute, Flow, validate_graph
from sim.records import RateSnapshot, SimResult, build_result
from sim.routing import route_link_ids
from sim.sharing import LinkSharing
from sim.topology import Slice

__all__ = ["Compute", "Flow", "max_min_rates", "simulate"]

# Flows predicted to finish within this relative distance of "now" finish now.
_FINISH_REL_TOL = 1e-12
# Agenda actions.
_RELEASE, _DRAIN, _DONE = 0, 1, 2


def _routes(
    slice_: Slice, graph: CheckedGraph, order: Sequence[int] | None
) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """Per node: its route as slice link ids and as sharing channels (``()`` for computes)."""
    chan = channels(slice_).channel_of
    cache: dict[tuple[tuple[int, ...], tuple[int, ...]], tuple[tuple[int, ...], tuple[int, ...]]]
    cache = {}
    link_routes: list[tuple[int, ...]] = []
    channel_routes: list[tuple[int, ...]] = []
    for key in graph.endpoints:
        if key is not None:
            # Keys are canonical int tuples (validate_graph): (0.0, 0) never
            # reaches the cache, where it would equal (0, 0).
            got = cache.get(key)
            if got is None:
                ids = tuple(route_link_ids(slice_, key[0], key[1], order=order).tolist())
                got = cache[key] = (ids, tuple(chan[k] for k in ids))
            link_routes.append(got[0])
            channel_routes.append(got[1])
        else:
            link_routes.append(())
            channel_routes.append(())
    return link_routes, channel_routes


class _Run:
    """One simulation: the DAG's life cycle, an agenda, and the draining flows."""

    def __init__(
        self,
        slice_: Slice,
        nodes: Sequence[Flow | Compute],
        graph: CheckedGraph,
        order: Sequence[int] | None,
        record_rates: bool,
    ) -> None:
        self.slice = slice_
        self.nodes = nodes
        n = len(nodes)
        index = graph.index
        self.link_routes, routes = _routes(slice_, graph, order)
        self.net = LinkSharing(channels(slice_).capacity_bytes_per_s, num_flows=n)
        for i, r in enumerate(routes):
            if r:
                self.net.set_route(i, r)
        self.size_bytes = [float(nd.size_bytes) if isinstance(nd, Flow) else 0.0 for nd in nodes]
        self.waiting = [len(set(nd.after)) for nd in nodes]
        self.ready_s = [float(nd.start_s) for nd in nodes]
        self.children: list[list[int]] = [[] for _ in nodes]
        for i, nd in enumerate(nodes):
            for dep in sorted(set(nd.after), key=index.__getitem__):
                self.children[index[dep]].append(i)
        self.release_s = [math.nan] * n
        self.drain_s = [math.nan] * n
        self.finish_s = [math.nan] * n
        self.events: list[tuple[float, str, str]] = []
        self.record_rates = record_rates
        self.rate_log: list[RateSnapshot] = []
        self.latency_s = slice_.hop_latency_s
        self.now = 0.0
        self.agenda: list[tuple[float, int, int, int]] = []  # (time, seq, action, node)
        self.seq = 0
        self.work: list[int] = []  # nodes released at `now`, in order
        self.arrivals: list[int] = []  # flows starting to drain at `now`
        # Draining flows, in drain order: remaining bytes as of updated_s.
        self.active: dict[int, None] = {}
        self.remaining = [0.0] * n
        self.updated_s = [0.0] * n
        self.predicted_s = [math.inf] * n
        self.drain_seq = [0] * n
        self.finishes: list[tuple[float, int, int]] = []  # (finish, drain seq, node)
        self.env = simpy.Environment()

    # -- the DAG -----------------------------------------------------------

    def _at(self, time_s: float, action: int, i: int) -> None:
        self.seq += 1
        heapq.heappush(self.agenda, (time_s, self.seq, action, i))

    def _release(self, i: int) -> None:
        now = self.now
        self.release_s[i] = now
        node = self.nodes[i]
        self.events.append((now, "release", node.id))
        if isinstance(node, Compute):
            if node.duration_s > 0:
                self._at(now + node.duration_s, _DONE, i)
            else:
                self._finish(i)
            return
        hops = len(self.link_routes[i])
        if hops == 0:
            self.drain_s[i] = now
            self._finish(i)
        elif self.latency_s > 0:
            self._at(now + hops * self.latency_s, _DRAIN, i)
        else:
            self._drain(i)

    def _drain(self, i: int) -> None:
        now = self.now
        self.drain_s[i] = now
        self.events.append((now, "drain", self.nodes[i].id))
        if self.size_bytes[i] == 0:
            self._finish(i)
        else:
            self.arrivals.append(i)

    def _finish(self, i: int) -> None:
        now = self.now
        self.finish_s[i] = now
        self.events.append((now, "finish", self.nodes[i].id))
        ready = self.ready_s
        for c in self.children[i]:
            self.waiting[c] -= 1
            if now > ready[c]:
                ready[c] = now
            if self.waiting[c] == 0:
                if ready[c] > now:
                    self._at(ready[c], _RELEASE, c)
                else:
                    self.work.append(c)

    def _run_work(self) -> None:
        work = self.work
        k = 0
        while k < len(work):  # releases may release more (zero-time chains)
            self._release(work[k])
            k += 1
        work.clear()

    # -- the network -------------------------------------------------------

    def _departures(self) -> list[int]:
        """Pop the flows whose predicted finish is now, in drain order."""
        heap = self.finishes
        predicted = self.predicted_s
        active = self.active
        limit = self.now * (1.0 + _FINISH_REL_TOL)
        done: list[int] = []
        while heap:
            t, _, i = heap[0]
            if i not in active or predicted[i] != t:
                heapq.heappop(heap)  # stale: the flow's rate changed or it left
                continue
            if t > limit:
                break
            heapq.heappop(heap)
            del active[i]
            done.append(i)
        done.sort(key=self.drain_seq.__getitem__)
        return done

    def _reshare(self, leaving: list[int]) -> None:
        """One max-min update for this instant's arrivals and departures."""
        now = self.now
        arriving = self.arrivals
        self.arrivals = []
        for i in arriving:
            self.drain_seq[i] = self.seq = self.seq + 1
            self.active[i] = None
            self.remaining[i] = self.size_bytes[i]
            self.updated_s[i] = now
        rate = self.net.rate
        remaining, updated, predicted = self.remaining, self.updated_s, self.predicted_s
        heap, seq = self.finishes, self.drain_seq
        for f, old in self.net.update(now, arrivals=arriving, departures=leaving):
            if old > 0.0:
                remaining[f] -= old * (now - updated[f])
                updated[f] = now
            r = rate[f]
            left = remaining[f]
            t = now + (left if left > 0.0 else 0.0) / r if r > 0.0 else math.inf
            predicted[f] = t
            heapq.heappush(heap, (t, seq[f], f))
        if self.record_rates:
            ids = self.nodes
            self.rate_log.append(
                RateSnapshot(now, tuple((ids[i].id, rate[i]) for i in self.active))
            )

    def _instant(self) -> None:
        """Everything that happens at ``now``: agenda items, finishes, one reshare."""
        now = self.now
        agenda = self.agenda
        while agenda and agenda[0][0] <= now:
            _, _, action, i = heapq.heappop(agenda)
            if action == _RELEASE:
                self._release(i)
            elif action == _DRAIN:
                self._drain(i)
            else:
                self._finish(i)
            self._run_work()
        leaving: list[int] = []
        while True:
            done = self._departures()
            if not done:
                break
            leaving.extend(done)
            for i in done:
                self._finish(i)
            self._run_work()
        if leaving or self.arrivals:
            self._reshare(leaving)

    def _next_s(self) -> float:
        if self.arrivals:  # released and draining at once (no latency): now
            return self.now
        t = self.agenda[0][0] if self.agenda else math.inf
        heap, active, predicted = self.finishes, self.active, self.predicted_s
        while heap and (heap[0][2] not in active or predicted[heap[0][2]] != heap[0][0]):
            heapq.heappop(heap)
        if heap and heap[0][0] < t:
            t = heap[0][0]
        return t

    def _clock(self) -> Generator[simpy.Event, None, None]:
        """The SimPy process: sleep until the next instant, handle it, repeat."""
        env = self.env
        while True:
            t = self._next_s()
            if t == math.inf:
                return
            if t > self.now:
                # SimPy keeps the clock; the instant itself is taken from the
                # agenda so that float sums never shift an event.
                yield env.timeout(t - self.now)
                self.now = t
            self._instant()

    def run(self) -> SimResult:
        for i in range(len(self.nodes)):
            if self.waiting[i] == 0:
                if self.ready_s[i] > 0:
                    self._at(self.ready_s[i], _RELEASE, i)
                else:
                    self.work.append(i)
        self._run_work()
        self.env.process(self._clock())
        self.env.run()
        unfinished = [self.nodes[i].id for i, f in enumerate(self.finish_s) if math.isnan(f)]
        if unfinished:  # cannot happen for a validated DAG; never return silently
            raise RuntimeError(f"simulation ended with unfinished nodes {unfinished[:5]}")
        self.net.close(self.now)
        return build_result(
            self.slice,
            self.nodes,
            link_routes=self.link_routes,
            times=(self.release_s, self.drain_s, self.finish_s),
            channel_busy_s=self.net.busy_s,
            events=self.events,
            rate_log=self.rate_log,
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
    graph = validate_graph(slice_, nodes)
    return _Run(slice_, nodes, graph, routing_order, record_rates).run()
