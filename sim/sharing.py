"""Max-min fair link sharing, kept between events and updated where it changes.

:class:`LinkSharing` holds the draining flows, the flow-link incidence (which
flows cross each link) and the current max-min fair allocation: each flow's
rate and *bottleneck* (the link at which progressive filling froze it), and
each link's *level* (the fill level at which it saturated; ``inf`` if it never
did). :meth:`LinkSharing.update` applies a batch of arrivals and departures and
returns only the flows whose rate changed. Nothing is rebuilt between events.

How an update stays exact while touching only what changes
----------------------------------------------------------
Progressive filling raises every unfrozen flow's rate together; a link
saturates at the level ``x`` solving ``sum(min(t_f, x)) = capacity`` over its
flows (``t_f`` the level at which flow ``f`` freezes somewhere), and freezes
the flows still unfrozen there. The update re-runs this filling *lazily*,
level by level (a heap keyed by level), and visits only *dirty* links:

- A link is dirty once its own inputs differ from the previous filling: a
  flow arrived on it or left it, or one of its flows froze at a different
  level than before (or was not frozen where it was before). Every other link
  is *clean*: its flows freeze at the same levels as before, so it saturates
  at its old level and freezes the same flows -- nothing to compute.
- A dirty link's level is solved from its flows: a flow already frozen in
  this filling counts with its new rate; a flow that will still freeze at its
  old rate at its old (clean) bottleneck counts as ``min(old rate, x)``
  (:func:`sim.maxmin.saturation_level`); a new flow, a flow bottlenecked at
  this very link, or a flow whose old bottleneck no longer holds it counts as
  unfrozen (``x``). The solve needs no sort: it takes out, pass by pass, the
  held flows below the level the rest would reach (the level only rises as
  they go, so each one taken out is below the final level too) until a pass
  takes none -- the same water level, in a few linear passes.
- A level solved from a link's flows as they still stand is *exact*: when
  the filling pops it, the link saturates there without a second solve. Any
  change to one of its flows (frozen, loosened, arrived, left) clears that.
  Its first solve in an update classifies its flows once (capacity less the
  rates frozen so far, the unfrozen flows, the held flows and rates);
  freezing or loosening one of them moves it between these lists, so a later
  solve, the link's saturation and its release read only the lists.
- When the filling reaches a dirty link's level, the link saturates and
  freezes its unfrozen flows at that level. A flow whose rate changes (or
  that is new) makes all its links dirty.
- When the filling reaches a dirty link's *old* level without the link having
  saturated, its old bottleneck flows were not frozen there this time: they
  become unfrozen everywhere, which makes their other links dirty.

Levels only grow during filling, and a flow's change (or non-freeze) at level
``y`` alters a link's equation only above ``y``, while every link it touches
has an old level of at least ``y``: so a dirty link's level is never below the
current fill level, the heap order is the order of the textbook filling, and
the result is the textbook allocation (ties broken by link id). This is the
"bottleneck structure" view of max-min fairness (Ros-Giralt et al., "On the
Bottleneck Structure of Congestion-Controlled Networks", SIGMETRICS 2020):
a perturbation propagates only from a link to the flows bottlenecked there and
on to their other links.

>>> net = LinkSharing([1.0, 10.0], num_flows=3)
>>> net.set_route(0, (0,)); net.set_route(1, (0, 1)); net.set_route(2, (1,))
>>> [f for f, _ in net.update(0.0, arrivals=[0, 1, 2], departures=[])]
[0, 1, 2]
>>> net.rate
[0.5, 0.5, 9.5]
>>> sorted(f for f, _ in net.update(1.0, arrivals=[], departures=[0]))
[1, 2]
>>> net.rate[1:], net.users
([1.0, 9.0], [[1], [1, 2]])
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence

from sim.classshare import ClassFilling, FlowClocks
from sim.maxmin import max_min_rates

__all__ = ["LinkSharing"]

# Relative tolerance below which two rates or levels count as equal: float
# noise of the level equations, far below the engine's 1e-9 exactness.
_REL_TOL = 1e-12
_INF = math.inf
# Heap entry kinds; at equal keys a saturation is handled before a check.
_SATURATE, _CHECK = 0, 1
# A batch whose arrivals and departures cross more (flow, link) pairs than
# this is solved over all draining flows at once with numpy: symmetric
# collective steps start and end hundreds of flows at one instant, and then a
# vectorised solve beats walking the changes (benchmarks/sim_bench.py: the
# 16x16 storm and the replay case run fastest between 64 and 256).
_BATCH_PAIRS = 128
# From this many draining (flow, link) pairs per link of the slice on, every
# update re-solves the classes in full (sim.classshare.ClassFilling) instead of
# walking the changes flow by flow; back to the lazy update below half as many
# (no flapping at the edge). The lazy update pays per flow on a link whose
# level moves, the full one per link and class: crowded links favour the
# latter (benchmarks/sim_bench.py: the dense case, ~115 flows a link, runs
# 3x faster from 2 pairs a link up; the 2,000-flow burst, ~47, 1.2x), lightly
# loaded ones the former (the 16x16 storm, 960 flows of ~1 hop on 960 links,
# runs 1.8x slower by classes).
_CLASS_LOAD = 8


class LinkSharing:
    """Flows on capacitated links with their max-min fair rates, updated incrementally.

    Flows and links are small integers. ``capacity[l]`` is link ``l``'s
    bandwidth; ``set_route(f, links)`` gives flow ``f`` its links before it
    arrives. After :meth:`update`, ``rate[f]`` is each draining flow's rate,
    ``users[l]`` the draining flows on link ``l`` (in arrival order) and
    ``busy_s[l]`` the time link ``l`` carried traffic (intervals closed so far;
    :meth:`close` adds the open ones). A batch crossing more than
    ``batch_pairs`` (flow, link) pairs is solved over every draining flow with
    :func:`sim.maxmin.max_min_rates` instead (``-1``: always; the tests
    compare both ways). While the draining flows cross ``class_load``
    (flow, link) pairs per link or more, every update solves by bottleneck
    classes (:class:`sim.classshare.ClassFilling`, kept in ``classes``; ``0``:
    always, ``-1``: never), which then also keep the event loop's clocks
    (:meth:`attach_clocks`).

    One update's scratch state lives in arrays stamped with the update's
    number (``_epoch``), so an update allocates almost nothing and hashes
    nothing: ``_dirty[l] == epoch`` marks a dirty link, ``_fixed[f] == epoch``
    a flow frozen in this filling at ``_new_rate[f]``, and so on.
    """

    def __init__(
        self,
        capacity: Sequence[float],
        *,
        num_flows: int,
        batch_pairs: int = _BATCH_PAIRS,
        class_load: int = _CLASS_LOAD,
        track_rates: bool = True,
    ) -> None:
        m = len(capacity)
        self.batch_pairs = batch_pairs  # see _BATCH_PAIRS; -1: always solve every flow
        self.class_load = class_load  # see _CLASS_LOAD; 0: always, -1: never
        self._pairs = 0  # (flow, link) pairs of the draining flows
        # False: while solving by classes, rate and bottleneck are written only
        # when the classes end, and update reports no changes (the event loop
        # reads the classes' clocks; sim.pycore without a rate log).
        self.track_rates = track_rates
        self.classes: ClassFilling | None = None  # while solving by classes
        n = num_flows
        self.capacity: list[float] = [float(c) for c in capacity]
        self.users: list[list[int]] = [[] for _ in range(m)]
        self.level: list[float] = [_INF] * m
        self.busy_s: list[float] = [0.0] * m
        self._since: list[float] = [0.0] * m
        self.links: list[tuple[int, ...]] = [()] * n
        self.rate: list[float] = [0.0] * n
        self.bottleneck: list[int] = [-1] * n
        self._epoch = 0
        self._dirty: list[int] = [0] * m
        self._done: list[int] = [0] * m
        self._queued: list[int] = [0] * m
        # _exact[l] == epoch: _key[l] is l's level solved from its flows as
        # they still stand (nothing on l changed since), so popping it needs
        # no second solve.
        self._exact: list[int] = [0] * m
        # A link's flows as the filling stands, kept from its first solve in
        # an update (_cache[l] == epoch): capacity less the rates frozen in
        # this update, the unfrozen flows, and the flows held elsewhere with
        # their old rates. A list loses an entry by moving its last one into
        # its place (as the compiled core's lists do).
        self._cache: list[int] = [0] * m
        self._c_cap: list[float] = [0.0] * m
        self._u_flow: list[list[int]] = [[] for _ in range(m)]
        self._h_rate: list[list[float]] = [[] for _ in range(m)]
        self._h_flow: list[list[int]] = [[] for _ in range(m)]
        self._h_pos: dict[tuple[int, int], int] = {}  # (flow, link) -> place in its list
        self._key: list[float] = [_INF] * m
        self._fixed: list[int] = [0] * n
        self._loose: list[int] = [0] * n
        self._new_rate: list[float] = [0.0] * n
        self._heap: list[tuple[float, int, int]] = []
        self._stale: list[int] = []
        self._dirty_links: list[int] = []
        self._frozen: list[int] = []
        self._at = 0.0
        self.draining: dict[int, None] = {}  # draining flows, in arrival order
        # The event loop's per-flow clocks (attach_clocks), which the classes
        # take over while they last; standing alone, nothing drains.
        self.clocks = FlowClocks([0.0] * n, [0.0] * n, self.rate, [0] * n)

    def attach_clocks(self, remaining: list[float], updated: list[float], seq: list[int]) -> None:
        """The event loop's bytes left per flow as of ``updated``, and drain order."""
        self.clocks = FlowClocks(remaining, updated, self.rate, seq)

    def set_route(self, flow: int, links: tuple[int, ...]) -> None:
        """The links ``flow`` crosses (each at most once), before it arrives."""
        self.links[flow] = links

    def close(self, now: float) -> None:
        """Count links still carrying traffic as busy until ``now``."""
        for lk, users in enumerate(self.users):
            if users:
                self.busy_s[lk] += now - self._since[lk]
                self._since[lk] = now

    def update(
        self, now: float, *, arrivals: Iterable[int], departures: Iterable[int]
    ) -> list[tuple[int, float]]:
        """Add ``arrivals``, remove ``departures`` at time ``now``; re-solve what changed.

        Returns ``(flow, old rate)`` for every flow whose rate changed,
        arrivals first (old rate 0.0), in a deterministic order.
        """
        self._epoch += 1
        epoch = self._epoch
        self._at = 0.0
        users = self.users
        links = self.links
        leaving = list(departures)
        new = list(arrivals)
        whole = sum(len(links[f]) for f in leaving) + sum(len(links[f]) for f in new)
        whole = whole > self.batch_pairs
        self._pairs += sum(len(links[f]) for f in new) - sum(len(links[f]) for f in leaving)
        classes = self._class_mode(self._pairs, now)
        quiet = whole or classes  # the lazy update's marks are not needed
        for f in leaving:
            if self.classes is not None:
                self.classes.leave(f)
            del self.draining[f]
            for lk in links[f]:
                on = users[lk]
                on.remove(f)
                if not on:
                    self.busy_s[lk] += now - self._since[lk]
                if not quiet:
                    self._raised(lk)  # less traffic: the level can only rise
            self.rate[f] = 0.0
            self.bottleneck[f] = -1
        for f in new:
            self.draining[f] = None
            self._loose[f] = epoch
            for lk in links[f]:
                on = users[lk]
                if not on:
                    self._since[lk] = now
                on.append(f)
            if self.classes is not None:
                self.classes.arrive(f)
        if classes:
            if self.classes is None:
                flows = list(self.draining)
                self.classes = ClassFilling(
                    self.capacity, links, flows, self.bottleneck, self.clocks, now, self.track_rates
                )
            return self.classes.solve(users, new, self.rate, self.bottleneck, self.level)
        if whole:
            return self._solve_all(new)
        for f in new:
            for lk in links[f]:
                self._lowered(lk)
        self._fill()
        return self._commit(new)

    def _class_mode(self, pairs: int, now: float) -> bool:
        """Whether an update at ``now`` leaving ``pairs`` (flow, link) pairs draining
        solves by classes (``_CLASS_LOAD``); ends the classes when it does not."""
        need = self.class_load * len(self.capacity)
        if self.classes is not None:
            self.classes.begin(now)
            if pairs < need // 2:
                # The lazy update goes on from the exact state left, the per-flow
                # clocks from the bytes left now.
                if not self.classes.per_flow:
                    self.classes.sync(self.rate, self.bottleneck)
                self.classes.materialize()
                self.classes = None
        if self.classes is not None:
            return True
        return 0 <= need <= pairs

    def _solve_all(self, new: list[int]) -> list[tuple[int, float]]:
        """Re-solve every draining flow with numpy; rebuild levels and bottlenecks."""
        import numpy as np  # here, not at import: sim's command line starts without it

        flows = list(self.draining)
        links = self.links
        lengths = [len(links[f]) for f in flows]
        pair_flow = np.repeat(np.arange(len(flows)), lengths)
        pair_link = np.fromiter(
            (lk for f in flows for lk in links[f]), dtype=np.int64, count=sum(lengths)
        )
        capacity = np.asarray(self.capacity)
        solved = max_min_rates(pair_flow, pair_link, len(flows), capacity)
        # A link is saturated when full; its level is the largest rate on it,
        # and a flow's bottleneck is its first saturated link at its own rate.
        m = capacity.size
        load = np.bincount(pair_link, weights=solved[pair_flow], minlength=m)
        level = np.full(m, -np.inf)
        np.maximum.at(level, pair_link, solved[pair_flow])
        full = load >= capacity * (1.0 - 1e-9)
        level[~full] = np.inf
        at_level = full[pair_link] & (solved[pair_flow] >= level[pair_link] * (1.0 - 1e-9))
        hit = np.flatnonzero(at_level)
        _, first = np.unique(pair_flow[hit], return_index=True)
        self.level = level.tolist()
        rate = self.rate
        bottleneck = self.bottleneck
        changed: list[tuple[int, float]] = [(f, 0.0) for f in new]
        for f, r, b in zip(flows, solved.tolist(), pair_link[hit[first]].tolist(), strict=True):
            bottleneck[f] = b
            old = rate[f]
            if old == 0.0:
                rate[f] = r  # an arrival, listed already
            elif abs(r - old) > _REL_TOL * r:
                rate[f] = r
                changed.append((f, old))
        return changed

    # -- marking links dirty -------------------------------------------------

    def _first_dirty(self, lk: int) -> None:
        self._dirty[lk] = self._epoch
        self._dirty_links.append(lk)
        old = self.level[lk]
        self._key[lk] = old
        if old < _INF:
            # The old level bounds the new one from below until a change
            # lowers it; at a tie the saturation goes before the check.
            heapq.heappush(self._heap, (old, _SATURATE, lk))
            heapq.heappush(self._heap, (old * (1.0 + _REL_TOL), _CHECK, lk))

    def _raised(self, lk: int) -> None:
        """``lk``'s level can only have risen: its heap key stays a lower bound."""
        epoch = self._epoch
        self._exact[lk] = 0
        if self._done[lk] != epoch and self._dirty[lk] != epoch:
            self._first_dirty(lk)

    def _lowered(self, lk: int) -> None:
        """``lk``'s level may have dropped: re-solve it before the filling moves on."""
        epoch = self._epoch
        if self._done[lk] == epoch:
            return
        self._exact[lk] = 0
        if self._dirty[lk] != epoch:
            self._first_dirty(lk)
        if self._queued[lk] != epoch:
            self._queued[lk] = epoch
            self._stale.append(lk)

    # -- the filling ---------------------------------------------------------

    def _cache_build(self, lk: int) -> None:
        """Classify ``lk``'s flows once per update (see ``_cache`` in ``__init__``)."""
        epoch = self._epoch
        fixed = self._fixed
        loose = self._loose
        bottleneck = self.bottleneck
        rate = self.rate
        new_rate = self._new_rate
        pos = self._h_pos
        cap = self.capacity[lk]
        u_flow: list[int] = []
        h_rate: list[float] = []
        h_flow: list[int] = []
        for f in self.users[lk]:
            if fixed[f] == epoch:
                cap -= new_rate[f]
            elif loose[f] == epoch or bottleneck[f] == lk:
                pos[f, lk] = len(u_flow)
                u_flow.append(f)
            else:
                pos[f, lk] = len(h_rate)
                h_rate.append(rate[f])
                h_flow.append(f)
        self._c_cap[lk] = cap
        self._u_flow[lk] = u_flow
        self._h_rate[lk] = h_rate
        self._h_flow[lk] = h_flow
        self._cache[lk] = epoch

    def _cached(self, lk: int) -> None:
        if self._cache[lk] != self._epoch:
            self._cache_build(lk)

    def _unhold(self, lk: int, f: int) -> None:
        """``f`` leaves ``lk``'s held list: the last entry takes its place."""
        h_rate, h_flow = self._h_rate[lk], self._h_flow[lk]
        k = self._h_pos.pop((f, lk))
        last_rate, last_flow = h_rate.pop(), h_flow.pop()
        if last_flow != f:
            h_rate[k] = last_rate
            h_flow[k] = last_flow
            self._h_pos[last_flow, lk] = k

    def _unfree(self, lk: int, f: int) -> None:
        """``f`` leaves ``lk``'s unfrozen list: the last entry takes its place."""
        u_flow = self._u_flow[lk]
        k = self._h_pos.pop((f, lk))
        last_flow = u_flow.pop()
        if last_flow != f:
            u_flow[k] = last_flow
            self._h_pos[last_flow, lk] = k

    def _level_of(self, lk: int) -> float:
        """Solve ``sum(min(t_f, x)) = capacity`` for link ``lk`` (see the module doc)."""
        self._cached(lk)
        cap = self._c_cap[lk]
        unfrozen = len(self._u_flow[lk])
        held: list[float] = []
        at = self._at
        for r in self._h_rate[lk]:
            # A flow held below the fill level reached is frozen already:
            # it only takes capacity (a link full of such flows is tied
            # with one that saturated at that level, and freezes nothing).
            if r < at:
                cap -= r
            else:
                held.append(r)
        # Water-filling without sorting: a held flow below the level of the
        # flows not yet counted as below is below the final level too (the
        # level only rises as such flows are taken out), so each pass takes
        # every such flow out, in the held list's order, until a pass takes none.
        while held:
            x = cap / (unfrozen + len(held))
            kept: list[float] = []
            for r in held:
                if r < x:
                    cap -= r
                else:
                    kept.append(r)
            if len(kept) == len(held):
                return x if x > at else at
            held = kept
        if unfrozen == 0:
            return _INF  # every flow is held below capacity elsewhere
        x = cap / unfrozen
        return x if x > at else at

    def _resolve(self) -> None:
        epoch = self._epoch
        key = self._key
        done = self._done
        queued = self._queued
        heap = self._heap
        for lk in self._stale:
            queued[lk] = 0
            if done[lk] != epoch:
                x = self._level_of(lk)
                key[lk] = x
                self._exact[lk] = epoch
                if x < _INF:
                    heapq.heappush(heap, (x, _SATURATE, lk))
        self._stale.clear()

    def _fill(self) -> None:
        heap = self._heap
        done = self._done
        key = self._key
        epoch = self._epoch
        while True:
            if self._stale:
                self._resolve()
            if not heap:
                break
            k, kind, lk = heapq.heappop(heap)
            if done[lk] == epoch:
                continue
            if kind == _CHECK:
                old = self.level[lk]  # the key is nudged up; the level is not
                if old > self._at:
                    self._at = old
                self._release(lk)
            elif k == key[lk]:
                x = k if self._exact[lk] == epoch else self._level_of(lk)
                if x > k * (1.0 + _REL_TOL):
                    key[lk] = x  # the key was a stale lower bound
                    self._exact[lk] = epoch
                    if x < _INF:
                        heapq.heappush(heap, (x, _SATURATE, lk))
                else:
                    self._at = x
                    self._saturate(lk, x)

    def _saturate(self, lk: int, x: float) -> None:
        """``lk`` saturates at ``x``: its unfrozen flows freeze there, and so do
        the flows held at old rates not below ``x`` (frozen earlier below
        ``x``, a flow keeps its old rate and bottleneck)."""
        self._done[lk] = self._epoch
        self.level[lk] = x
        above = x * (1.0 + _REL_TOL)
        below = x * (1.0 - _REL_TOL)
        self._cached(lk)
        for f in self._u_flow[lk]:
            self._freeze(lk, f, x, above, below)
        h_flow = self._h_flow[lk]
        for i, r in enumerate(self._h_rate[lk]):
            if not r < below:
                self._freeze(lk, h_flow[i], x, above, below)

    def _freeze(self, lk: int, f: int, x: float, above: float, below: float) -> None:
        """Freeze ``f`` at ``lk``'s level ``x``; its other links learn what changed."""
        epoch = self._epoch
        was = self.bottleneck[f]
        old = self.rate[f]
        unfrozen = self._loose[f] == epoch
        self._fixed[f] = epoch
        self._new_rate[f] = x
        self.bottleneck[f] = lk
        self._frozen.append(f)
        for m in self.links[f]:
            if m == lk:
                continue
            if self._cache[m] == epoch:
                if unfrozen or was == m:
                    self._unfree(m, f)
                else:
                    self._unhold(m, f)
                self._c_cap[m] -= x
            # In m's equation f counted as unfrozen (loose, or bottlenecked
            # at m) or as held at its old rate; now it takes exactly x.
            if unfrozen or was == m or old > above:
                self._raised(m)
            elif old < below:
                self._lowered(m)
            else:
                self._exact[m] = 0  # the same rate to 1e-12, not the same double

    def _release(self, lk: int) -> None:
        """The filling passed ``lk``'s old level and ``lk`` did not saturate there:
        its bottlenecked flows are unfrozen everywhere."""
        epoch = self._epoch
        loose = self._loose
        bottleneck = self.bottleneck
        cache = self._cache
        self._cached(lk)
        for f in self._u_flow[lk]:
            if loose[f] == epoch or bottleneck[f] != lk:
                continue
            loose[f] = epoch
            for m in self.links[f]:
                if m == lk:
                    continue
                if cache[m] == epoch:  # held there (bottlenecked at lk): now unfrozen
                    self._unhold(m, f)
                    self._h_pos[f, m] = len(self._u_flow[m])
                    self._u_flow[m].append(f)
                self._lowered(m)

    def _commit(self, new: list[int]) -> list[tuple[int, float]]:
        epoch = self._epoch
        level = self.level
        done = self._done
        for lk in self._dirty_links:
            if done[lk] != epoch:
                level[lk] = _INF
        self._dirty_links.clear()
        rate = self.rate
        new_rate = self._new_rate
        loose = self._loose
        changed: list[tuple[int, float]] = [(f, 0.0) for f in new]
        for f in self._frozen:
            r = new_rate[f]
            old = rate[f]
            if old == 0.0:
                rate[f] = r  # an arrival, listed already
            elif loose[f] == epoch or abs(r - old) > _REL_TOL * r:
                rate[f] = r
                changed.append((f, old))
        self._frozen.clear()
        return changed
