"""The pure-Python event core: the reference the compiled core is checked against.

:func:`run_python` replays a :class:`~sim.problem.Problem` exactly as
``sim/_flowcore.c`` does, in plain Python: a SimPy process sleeps from
instant to instant; the instants come from an agenda (releases, drain starts,
compute finishes) and the earliest predicted flow finish, and are taken
exactly from the agenda (SimPy's ``now + delay`` never shifts an event); the
rates come from :class:`sim.sharing.LinkSharing`. Each step below has a
C twin of the same name, with the same operations in the same order, so the
two cores give the same doubles, events and records
(``tests/sim/test_compiled.py``). :func:`sim.engine.simulate` runs this core
with ``core="python"``, or when the compiled one is not built.

>>> from sim.nodes import Flow, validate_graph
>>> from sim.problem import build_problem
>>> from sim.topology import make_slice
>>> s = make_slice([2], link_bandwidth_bytes_per_s=1e9, hop_latency_s=1e-6)
>>> nodes = [Flow("a", (0,), (1,), 1e6), Flow("b", (0,), (1,), 1e6)]
>>> out = run_python(build_problem(s, nodes, validate_graph(s, nodes), None))
>>> [round(t, 9) for t in out.finish_s]
[0.002001, 0.002001]
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Generator
from typing import TYPE_CHECKING, NamedTuple

from sim.problem import Problem
from sim.records import Event, RateSnapshot
from sim.sharing import _BATCH_PAIRS, _CLASS_LOAD, LinkSharing

if TYPE_CHECKING:
    import simpy

__all__ = ["CoreOutput", "run_python"]

# Flows predicted to finish within this relative distance of "now" finish now.
_FINISH_REL_TOL = 1e-12
# Agenda actions.
_RELEASE, _DRAIN, _DONE = 0, 1, 2


class CoreOutput(NamedTuple):
    """What an event core returns: per node release, drain and finish times
    (``nan`` where a node has no such moment), the event log
    (:class:`~sim.records.Event`), each channel's busy seconds and the rate log
    (``None`` unless recorded)."""

    release_s: list[float]
    drain_s: list[float]
    finish_s: list[float]
    events: list[Event]
    busy_s: list[float]
    rate_log: list[RateSnapshot] | None


class _Run:
    """One simulation: the DAG's life cycle, an agenda, and the draining flows."""

    def __init__(
        self, problem: Problem, *, record_rates: bool, batch_pairs: int, class_load: int
    ) -> None:
        p = problem
        n = len(p.ids)
        self.ids = p.ids
        self.is_flow = p.is_flow
        self.duration_s = p.duration_s
        self.route_ptr = p.route_ptr
        self.net = LinkSharing(
            p.capacity_bytes_per_s,
            num_flows=n,
            batch_pairs=batch_pairs,
            class_load=class_load,
            track_rates=record_rates,  # else the classes' clocks alone (sim.classshare)
        )
        for i in range(n):
            a, b = p.route_ptr[i], p.route_ptr[i + 1]
            if b > a:
                self.net.set_route(i, tuple(p.route_chan[a:b]))
        self.size_bytes = p.size_bytes
        self.waiting = list(p.waiting)
        self.ready_s = list(p.ready_s)
        self.children = [p.child_idx[p.child_ptr[i] : p.child_ptr[i + 1]] for i in range(n)]
        self.release_s = [math.nan] * n
        self.drain_s = [math.nan] * n
        self.finish_s = [math.nan] * n
        self.events: list[Event] = []
        self.rate_log: list[RateSnapshot] | None = [] if record_rates else None
        self.latency_s = p.hop_latency_s
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
        # While the sharing solves by classes, the classes keep the clocks.
        self.net.attach_clocks(self.remaining, self.updated_s, self.drain_seq)
        import simpy  # here, not at import: the compiled core never needs it

        self.env = simpy.Environment()

    # -- the DAG -----------------------------------------------------------

    def _at(self, time_s: float, action: int, i: int) -> None:
        self.seq += 1
        heapq.heappush(self.agenda, (time_s, self.seq, action, i))

    def _release(self, i: int) -> None:
        now = self.now
        self.release_s[i] = now
        self.events.append(Event(now, "release", self.ids[i]))
        if not self.is_flow[i]:
            if self.duration_s[i] > 0:
                self._at(now + self.duration_s[i], _DONE, i)
            else:
                self._finish(i)
            return
        hops = self.route_ptr[i + 1] - self.route_ptr[i]
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
        self.events.append(Event(now, "drain", self.ids[i]))
        if self.size_bytes[i] == 0:
            self._finish(i)
        else:
            self.arrivals.append(i)

    def _finish(self, i: int) -> None:
        now = self.now
        self.finish_s[i] = now
        self.events.append(Event(now, "finish", self.ids[i]))
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
        if self.net.classes is not None:
            done = self.net.classes.pop_due(limit)
            for i in done:
                del active[i]
            done.sort(key=self.drain_seq.__getitem__)
            return done
        done = []
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
        was = self.net.classes is not None
        changed = self.net.update(now, arrivals=arriving, departures=leaving)
        if self.net.classes is not None:
            if not was:
                heap.clear()  # the classes' clocks take over
            changed = []
        elif was:  # back from the classes: every flow's bytes left are as of now
            changed = [(f, 0.0) for f in self.active]
        for f, old in changed:
            if old > 0.0:
                remaining[f] -= old * (now - updated[f])
                updated[f] = now
            r = rate[f]
            left = remaining[f]
            t = now + (left if left > 0.0 else 0.0) / r if r > 0.0 else math.inf
            predicted[f] = t
            heapq.heappush(heap, (t, seq[f], f))
        if self.rate_log is not None:
            ids = self.ids
            self.rate_log.append(RateSnapshot(now, tuple((ids[i], rate[i]) for i in self.active)))

    # -- the clock ---------------------------------------------------------

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
        if self.net.classes is not None:
            return min(t, self.net.classes.next_due())
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

    def run(self) -> CoreOutput:
        for i in range(len(self.ids)):
            if self.waiting[i] == 0:
                if self.ready_s[i] > 0:
                    self._at(self.ready_s[i], _RELEASE, i)
                else:
                    self.work.append(i)
        self._run_work()
        self.env.process(self._clock())
        self.env.run()
        self.net.close(self.now)
        return CoreOutput(
            self.release_s,
            self.drain_s,
            self.finish_s,
            self.events,
            self.net.busy_s,
            self.rate_log,
        )


def run_python(
    problem: Problem,
    *,
    record_rates: bool = False,
    batch_pairs: int = _BATCH_PAIRS,
    class_load: int = _CLASS_LOAD,
) -> CoreOutput:
    """Replay ``problem`` in pure Python (see the module doc).

    ``batch_pairs`` is :class:`~sim.sharing.LinkSharing`'s switch to the whole
    numpy solve (``-1``: every update solves every draining flow);
    ``class_load`` its switch to the solve by classes, in draining (flow, link)
    pairs per link (``0``: always, ``-1``: never; :mod:`sim.classshare`).
    """
    run = _Run(problem, record_rates=record_rates, batch_pairs=batch_pairs, class_load=class_load)
    return run.run()
