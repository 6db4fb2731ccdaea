"""Max-min fair sharing over *bottleneck classes*, for dense traffic (issue 28).

When thousands of flows drain at once, nearly every update moves the levels
of a few dozen links, and every flow bottlenecked at such a link changes
rate: the lazy per-flow update of :class:`sim.sharing.LinkSharing` then pays
per flow (hundreds of freezes of ~5 links each). But the flows fall into far
fewer *classes* -- the flows bottlenecked at one link all drain at that
link's level -- and a link in use carries a handful of classes against a
hundred flows. :class:`ClassFilling` redoes the textbook progressive filling
in full at every update, over classes instead of flows:

- a class keeps its members and its *footprint*: per link, how many of its
  members cross it; a link keeps the same counts per class (the transpose);
- every link starts at its capacity over its flow count; the filling pops
  the lowest level (ties by link id, as the lazy update breaks them); when a
  link saturates at ``x``, each unfrozen class on it freezes **whole** at
  ``x`` if all its members cross the link -- its footprint's links lose
  ``count * x`` of capacity and ``count`` unfrozen flows -- and otherwise the
  members crossing the link are first split off into a class of their own
  (rare: a fraction of a split per update on the benchmark's dense case);
- classes that froze at one link are merged (the smaller into the larger,
  footprints added link by link), so that afterwards a class is exactly the
  set of flows bottlenecked at one link, and every member's rate **is** its
  bottleneck's level, the same double.

Each level is the textbook one (progressive filling run in full), so the
result is the max-min allocation whatever the previous one was; only the
rounding differs from the per-flow filling (a class subtracts ``count * x``
where flows subtract ``x`` one by one). A class whose level and bottleneck
come out as before has members whose rates did not change, so they are not
visited at all.

The classes also keep the event loop's clocks while they last: a class
drains all its members at one rate, so it keeps the bytes served to each
member (``served`` as of ``since``, at ``crate`` since then), and a member
the served bytes at which it finishes (``goal``), in a per-class heap; a heap
of classes orders their next finishes. A level change then moves one clock
and one entry, where the per-flow clocks would move every member's bytes
left and finish. A flow's bytes left are read off its clock only when it
changes class (split, merge) or when the classes end (:meth:`materialize`).

``sim/_flowclass.c`` and ``sim/_flowclock.c`` are the same algorithm in C,
operation for operation, so that both event cores stay bit-identical.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["ClassFilling", "FlowClocks"]

_INF = math.inf


@dataclass
class FlowClocks:
    """The event loop's per-flow clocks, shared with the classes: a flow's bytes
    left as of ``updated``, drained at ``rate`` since; ``drain_seq`` orders
    flows that finish together (:mod:`sim.pycore`). Read when the classes
    start, written when they end (:meth:`ClassFilling.materialize`)."""

    remaining: list[float]
    updated: list[float]
    rate: list[float]
    drain_seq: list[int]


class ClassFilling:
    """The draining flows of a :class:`~sim.sharing.LinkSharing`, grouped in classes.

    ``links[f]`` is flow ``f``'s route (each link at most once); ``rate``,
    ``bottleneck`` and ``level`` are the sharing's own lists, written in place
    by :meth:`solve`. Build it over the flows draining now (``flows``, in
    arrival order, each grouped with the flows of its current bottleneck;
    ``-1``: a class of its own), then keep it up to date with :meth:`arrive`
    and :meth:`leave` before each :meth:`solve`.
    """

    def __init__(
        self,
        capacity: Sequence[float],
        links: Sequence[tuple[int, ...]],
        flows: Sequence[int],
        bottleneck: Sequence[int],
        clocks: FlowClocks,
        now: float,
        per_flow: bool,
    ) -> None:
        m, n = len(capacity), len(links)
        self.now = now
        # Write each member's rate and bottleneck at every solve (else only in
        # sync, when the classes end: the event loop reads the clocks instead).
        self.per_flow = per_flow
        self.flow_clocks = clocks
        self.capacity = capacity
        self.links = links
        self.cls = [-1] * n  # each draining flow's class
        self.mem_pos = [0] * n  # its place in its class's member list
        self.members: list[list[int]] = [[] for _ in range(n)]
        self.fp_link: list[list[int]] = [[] for _ in range(n)]  # per class: links ...
        self.fp_cnt: list[list[int]] = [[] for _ in range(n)]  # ... and members crossing each
        self.lc_cls: list[list[int]] = [[] for _ in range(m)]  # per link: classes ...
        self.lc_cnt: list[list[int]] = [[] for _ in range(m)]  # ... and their members on it
        self.free = list(range(n - 1, -1, -1))  # class ids, a stack: 0 first
        # The rate and bottleneck every member of a class has (nan: not all
        # the same yet, e.g. a new class, so solve visits its members).
        self.old_rate = [math.nan] * n
        self.old_at = [-1] * n
        self.frozen = [0] * n  # per class: the solve number it froze in ...
        self.new_rate = [0.0] * n  # ... at this level ...
        self.new_at = [-1] * n  # ... at this link
        self.epoch = 0
        self.done = [0] * m
        self.canon = [0] * m  # per link: the class merged into in this solve ...
        self.canon_at = [0] * m  # ... valid when this equals the solve number
        self.res = [0.0] * m
        self.nun = [0] * m
        self.key = [_INF] * m
        self.lev = [0.0] * m
        # The clocks (see the module doc): per class the bytes each member has
        # been served, as of `since`, at `crate` since then ...
        self.served = [0.0] * n
        self.since = [0.0] * n
        self.crate = [0.0] * n
        # ... per flow the served bytes at which it finishes, and its members'
        # heap entry (goal, drain order, flow, version: stale once ver moves on).
        self.goal = [0.0] * n
        self.ver = [0] * n
        self.mheap: list[list[tuple[float, int, int, int]]] = [[] for _ in range(n)]
        # The classes by their next finish (time, class, version as cver).
        self.cheap: list[tuple[float, int, int]] = []
        self.cver = [0] * n
        self.stamp = 1  # the update's number; a class touched in it is listed once
        self.touched_at = [0] * n
        self.touched: list[int] = []
        of_link: dict[int, int] = {}
        remaining, updated, rate = clocks.remaining, clocks.updated, clocks.rate
        for f in flows:
            b = bottleneck[f]
            k = of_link.get(b, -1) if b >= 0 else -1
            if k < 0:
                k = self._fresh()
                if b >= 0:
                    of_link[b] = k
            # The per-flow clock's bytes left now (as the event loop computes them).
            self.goal[f] = remaining[f] - rate[f] * (now - updated[f])
            self._join(f, k)

    # -- the classes -------------------------------------------------------

    def _count(self, k: int, lk: int, d: int) -> None:
        """Add ``d`` to class ``k``'s count on link ``lk`` (both tables); drop zeros."""
        fl, fc = self.fp_link[k], self.fp_cnt[k]
        try:
            i = fl.index(lk)
        except ValueError:
            fl.append(lk)
            fc.append(d)
            self.lc_cls[lk].append(k)
            self.lc_cnt[lk].append(d)
            return
        c = fc[i] + d
        lcc, lcn = self.lc_cls[lk], self.lc_cnt[lk]
        j = lcc.index(k)
        if c:
            fc[i] = c
            lcn[j] = c
            return
        # The last entry takes the place of the one dropped (as in C).
        fl[i] = fl[-1]
        fc[i] = fc[-1]
        fl.pop()
        fc.pop()
        lcc[j] = lcc[-1]
        lcn[j] = lcn[-1]
        lcc.pop()
        lcn.pop()

    def _join(self, f: int, k: int) -> None:
        """``f`` (its ``goal`` set against ``k``'s clock) joins class ``k``."""
        self.cls[f] = k
        self.mem_pos[f] = len(self.members[k])
        self.members[k].append(f)
        for lk in self.links[f]:
            self._count(k, lk, 1)
        self.ver[f] += 1
        entry = (self.goal[f], self.flow_clocks.drain_seq[f], f, self.ver[f])
        heapq.heappush(self.mheap[k], entry)
        self._touch(k)

    def _drop(self, f: int) -> int:
        """Take ``f`` out of its class; returns the class (its id freed if empty)."""
        k = self.cls[f]
        mem = self.members[k]
        i = self.mem_pos[f]
        last = mem.pop()
        if last != f:
            mem[i] = last
            self.mem_pos[last] = i
        for lk in self.links[f]:
            self._count(k, lk, -1)
        self.cls[f] = -1
        self.ver[f] += 1
        self._touch(k)
        if not mem:
            self._release(k)
        return k

    def _release(self, k: int) -> None:
        self.cver[k] += 1  # its entry in the heap of classes is stale
        self.old_rate[k] = math.nan
        self.old_at[k] = -1
        self.free.append(k)

    def _fresh(self) -> int:
        """A class id off the stack, its clock at 0 bytes now, stopped."""
        k = self.free.pop()
        self.served[k] = 0.0
        self.since[k] = self.now
        self.crate[k] = 0.0
        self.mheap[k] = []
        return k

    def arrive(self, f: int) -> None:
        """``f`` starts to drain (its bytes ``remaining``): a class of its own until solved."""
        self.goal[f] = self.flow_clocks.remaining[f]
        self._join(f, self._fresh())

    def leave(self, f: int) -> None:
        """``f`` stops draining."""
        self._drop(f)

    def _split(self, k: int, lk: int) -> int:
        """Move ``k``'s members that cross ``lk`` into a new class; return it."""
        new = self._fresh()
        self._advance(k)
        goal, served = self.goal, self.served[k]
        for f in list(self.members[k]):
            if lk in self.links[f]:
                self._drop(f)
                goal[f] = goal[f] - served  # bytes left, on the new clock (at 0)
                self._join(f, new)
        return new

    def _merge(self, src: int, dst: int) -> None:
        """Class ``src`` joins ``dst`` (both froze at one link): footprints add up."""
        for lk, c in zip(self.fp_link[src], self.fp_cnt[src], strict=True):
            lcc, lcn = self.lc_cls[lk], self.lc_cnt[lk]
            j = lcc.index(src)
            lcc[j] = lcc[-1]
            lcn[j] = lcn[-1]
            lcc.pop()
            lcn.pop()
            self._count(dst, lk, c)
        self.fp_link[src] = []
        self.fp_cnt[src] = []
        self._advance(src)
        self._advance(dst)
        mem = self.members[dst]
        goal, ver, seq = self.goal, self.ver, self.flow_clocks.drain_seq
        heap, gap = self.mheap[dst], self.served[dst] - self.served[src]
        for f in self.members[src]:
            self.cls[f] = dst
            self.mem_pos[f] = len(mem)
            mem.append(f)
            goal[f] = goal[f] + gap
            ver[f] += 1
            heapq.heappush(heap, (goal[f], seq[f], f, ver[f]))
        self.members[src] = []
        self.mheap[src] = []
        self._touch(src)
        self._touch(dst)
        self._release(src)

    # -- the clocks --------------------------------------------------------

    def begin(self, now: float) -> None:
        """An update at ``now`` starts (before :meth:`leave` and :meth:`arrive`)."""
        self.now = now
        self.stamp += 1

    def _touch(self, k: int) -> None:
        if self.touched_at[k] != self.stamp:
            self.touched_at[k] = self.stamp
            self.touched.append(k)

    def _advance(self, k: int) -> None:
        """Bring class ``k``'s clock to now, at the rate it ran since."""
        now = self.now
        if self.since[k] != now:
            self.served[k] += self.crate[k] * (now - self.since[k])
            self.since[k] = now
            self._touch(k)

    def _top_member(self, k: int) -> int:
        """Class ``k``'s member that finishes first (-1: none); drops stale entries."""
        heap, cls, ver = self.mheap[k], self.cls, self.ver
        while heap:
            _, _, f, v = heap[0]
            if cls[f] == k and ver[f] == v:
                return f
            heapq.heappop(heap)
        return -1

    def _schedule(self, k: int) -> None:
        """Class ``k``'s next finish into the heap of classes (none if stopped or empty)."""
        self.cver[k] += 1
        f = self._top_member(k) if self.members[k] else -1
        r = self.crate[k]
        if f < 0 or not r > 0.0:
            return
        left = self.goal[f] - self.served[k]
        t = self.since[k] + (left if left > 0.0 else 0.0) / r
        heapq.heappush(self.cheap, (t, k, self.cver[k]))

    def next_due(self) -> float:
        """When the next draining flow finishes (``inf``: none)."""
        heap, cver = self.cheap, self.cver
        while heap:
            t, k, v = heap[0]
            if cver[k] == v:
                return t
            heapq.heappop(heap)
        return _INF

    def pop_due(self, limit: float) -> list[int]:
        """The flows finishing by ``limit``, each taken off its class's heap (in
        finish order; :meth:`leave` takes them out of the classes)."""
        done: list[int] = []
        while self.next_due() <= limit:
            k = heapq.heappop(self.cheap)[1]
            f = self._top_member(k)
            heapq.heappop(self.mheap[k])
            self.ver[f] += 1
            done.append(f)
            self._schedule(k)
        return done

    def sync(self, rate: list[float], bottleneck: list[int]) -> None:
        """Write every member's rate and bottleneck: its class's, as last solved."""
        for k, mem in enumerate(self.members):
            x, lk = self.crate[k], self.new_at[k]
            for f in mem:
                rate[f] = x
                bottleneck[f] = lk

    def materialize(self) -> None:
        """Write every member's bytes left into the flow clocks (the classes end)."""
        remaining, updated = self.flow_clocks.remaining, self.flow_clocks.updated
        now = self.now
        for k, mem in enumerate(self.members):
            if mem:
                self._advance(k)
                served = self.served[k]
                for f in mem:
                    remaining[f] = self.goal[f] - served
                    updated[f] = now

    # -- the filling -------------------------------------------------------

    def _freeze(self, k: int, lk: int, x: float, heap: list[tuple[float, int]]) -> None:
        """Class ``k`` freezes whole at ``lk``'s level ``x``: its other links
        lose its members' capacity and flows, and take their new levels."""
        self.frozen[k] = self.epoch
        self.new_rate[k] = x
        self.new_at[k] = lk
        res, nun, key = self.res, self.nun, self.key
        for m, c in zip(self.fp_link[k], self.fp_cnt[k], strict=True):
            if m == lk:
                continue
            r = res[m] - c * x
            res[m] = r
            u = nun[m] - c
            nun[m] = u
            if u > 0:
                y = r / u
                key[m] = y
                heapq.heappush(heap, (y, m))
            else:
                key[m] = _INF  # every flow on m froze elsewhere: m never saturates

    def _fill(self, users: Sequence[Sequence[int]]) -> list[int]:
        """Progressive filling over the classes; returns them in freezing order.

        A link's entry in the heap is live while it carries the link's current
        key (a freeze elsewhere pushes a new one); the least live (key, link)
        saturates next, ties by link id as in the lazy update."""
        self.epoch += 1
        epoch = self.epoch
        res, nun, key, done, lev = self.res, self.nun, self.key, self.done, self.lev
        heap: list[tuple[float, int]] = []
        for lk, on in enumerate(users):
            if on:
                c = self.capacity[lk]
                res[lk] = c
                nun[lk] = len(on)
                y = c / len(on)
                key[lk] = y
                heap.append((y, lk))
        heapq.heapify(heap)
        order: list[int] = []
        at = 0.0
        while heap:
            y, lk = heapq.heappop(heap)
            if done[lk] == epoch or y != key[lk]:
                continue  # stale: the link saturated, or its level moved since
            # Rounding can put a level a hair below the fill level reached.
            x = y if y > at else at
            at = x
            done[lk] = epoch
            lev[lk] = x
            frozen = self.frozen
            for k, c in list(zip(self.lc_cls[lk], self.lc_cnt[lk], strict=True)):
                if frozen[k] == epoch:
                    continue
                if c != len(self.members[k]):
                    k = self._split(k, lk)
                self._freeze(k, lk, x, heap)
                order.append(k)
        return order

    def solve(
        self,
        users: Sequence[Sequence[int]],
        new: list[int],
        rate: list[float],
        bottleneck: list[int],
        level: list[float],
    ) -> list[tuple[int, float]]:
        """Re-solve every class; write ``rate``, ``bottleneck`` and ``level``.

        Returns ``(flow, old rate)`` for every flow whose rate changed, the
        arrivals ``new`` first (old rate 0.0), as :meth:`LinkSharing.update`;
        nothing and no per-flow rates unless ``per_flow`` (see :meth:`sync`).
        """
        order = self._fill(users)
        epoch = self.epoch
        done, lev = self.done, self.lev
        for lk in range(len(level)):
            level[lk] = lev[lk] if done[lk] == epoch else _INF
        changed: list[tuple[int, float]] = [(f, 0.0) for f in new] if self.per_flow else []
        crate = self.crate
        for k in order:
            x, lk = self.new_rate[k], self.new_at[k]
            if x != crate[k]:
                self._advance(k)  # served so far at the old rate
                crate[k] = x
                self._touch(k)
            if self.per_flow and (x != self.old_rate[k] or lk != self.old_at[k]):
                for f in self.members[k]:
                    old = rate[f]
                    bottleneck[f] = lk
                    if old == 0.0:
                        rate[f] = x  # an arrival, listed already
                    elif old != x:
                        rate[f] = x
                        changed.append((f, old))
                self.old_rate[k] = x
                self.old_at[k] = lk
        canon, canon_at = self.canon, self.canon_at
        for k in order:
            lk = self.new_at[k]
            if canon_at[lk] != epoch:
                canon_at[lk] = epoch
                canon[lk] = k
                continue
            dst = canon[lk]
            if len(self.members[k]) > len(self.members[dst]):
                k, dst = dst, k
            self._merge(k, dst)
            canon[lk] = dst
        for k in self.touched:
            if self.members[k]:
                self._schedule(k)
        self.touched.clear()
        return changed
