"""The engine's times for node lists whose ring and all-to-all collectives stay compact.

:mod:`aoizora.rank.lumped` runs one representative per class of alike flows,
but finds the classes on the flows themselves: a region of a 1,024-device
program whose all-reduces run in flight together is tens of millions of
flows (4.19 million per 1,024-member ring all-reduce, ~560 bytes each as
Python objects), more memory than a planner has. Here a ring or all-to-all
collective arrives as :class:`~sim.columns.FlowColumns` -- one entry per
column, the same flows repeated over ``steps`` -- and the classes are found
on the columns:

- colour refinement (as :func:`~aoizora.rank.lumped.equitable_partition`)
  over the *column system*: the plain nodes, every family's columns, the
  engine's channels; a column's parent is the column that feeds it (its own
  column is a parent at every step, the same for all), a node waiting for a
  family has every column as a parent;
- the partition is verified exactly on that system; then the partition of
  the *flows* that puts step ``s`` of column ``c`` in cell ``(family, s,
  cell(c))`` is equitable too: its flows have the same size, start and hops;
  step ``s`` waits for step ``s - 1`` of its own column and of its feed, whose
  cells the column system fixes, step 0 for the family's own parents; a
  channel carries of cell ``(f, s, K)`` as many flows as columns of ``K``
  cross it, whatever ``s``. So the quotient of the flows is built from the
  columns alone, step by step, and run with lumped's own event loop
  (:func:`~aoizora.rank.lumped.simulate_cells`' rules): the engine's times to
  float rounding, with memory in the columns and the cells, not the flows.

``tests/aoizora/test_compact.py`` checks it against the engine on the
expanded flows (:meth:`~sim.columns.ColumnPlan.expand`) to 1e-9 relative.
When the partition fails (not verified, or more cells than ``max_cells``),
:class:`CompactUnavailable` is raised: the caller runs the flows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from aoizora.rank.lumped import (
    FlowSystem,
    Partition,
    _CellRun,
    _Cells,
    _renumber,
    equitable_partition,
    lumped_times,
    refine_round,
)
from sim.cables import channels
from sim.columns import FlowColumns
from sim.engine import Compute, Flow
from sim.routing import check_order, link_ids
from sim.topology import Slice

__all__ = [
    "APPROXIMATED",
    "CompactUnavailable",
    "Item",
    "approximate_times",
    "coarse_partition",
    "compact_times",
    "mixed_times",
]

Item = Flow | Compute | FlowColumns

# A lifted quotient larger than this runs too slowly in Python to help, and so
# does one with fewer than MIN_REDUCTION nodes a cell (lumped's own threshold,
# :func:`~aoizora.rank.lumped.simulate_nodes`): the engine's C core runs flows
# faster than the quotient's Python loop runs cells.
DEFAULT_MAX_CELLS = 400_000
MIN_REDUCTION = 8
# Flows one by one cost ~560 bytes each as Python objects (and lumped's arrays
# beside them): a million is about a gigabyte, what a planner's worker can hold.
DEFAULT_MAX_FLOWS = 1_000_000
# The flow counts of the runs priced by approximate_times in this process, in order.
APPROXIMATED: list[int] = []


class CompactUnavailable(Exception):
    """The column system has no verified partition small enough; run the flows instead."""


class _System:
    """The column system: element ``e`` is a plain node (``e < plain``) or a column."""

    def __init__(self, slice_: Slice, items: Sequence[Item]) -> None:
        self.items = items
        self.index = {it.id: k for k, it in enumerate(items)}
        self.fam = [k for k, it in enumerate(items) if isinstance(it, FlowColumns)]
        plain = [k for k, it in enumerate(items) if not isinstance(it, FlowColumns)]
        self.plain = plain
        self.elem_of = {k: e for e, k in enumerate(plain)}  # plain item -> element
        self.base: dict[int, int] = {}  # family item -> its first column's element
        n = len(plain)
        for k in self.fam:
            self.base[k] = n
            n += items[k].num_columns  # type: ignore[union-attr]
        self.n = n
        self.depth = self._depths()
        self._routes(slice_)

    def _depths(self) -> list[int]:
        """Longest chain to each item (a family counts its steps); items come in order."""
        depth = [0] * len(self.items)
        last = [0] * len(self.items)  # the depth a node waiting for the item sits behind
        for k, it in enumerate(self.items):
            d = 0
            for dep in set(it.after):
                j = self.index.get(dep)
                if j is None or j >= k:
                    raise CompactUnavailable(f"{it.id} waits for {dep}, not an earlier node")
                d = max(d, last[j] + 1)
            depth[k] = d
            steps = it.steps if isinstance(it, FlowColumns) else 1
            last[k] = d + steps - 1
        return depth

    def _routes(self, slice_: Slice) -> None:
        pools = channels(slice_)
        ordering = check_order(slice_, None)
        route_of: dict[tuple[object, object], int] = {}
        table: list[tuple[int, ...]] = []
        rid = np.full(self.n, -1, dtype=np.int64)  # per element: its route (-1: no flow)

        def route(src: tuple[int, ...], dst: tuple[int, ...]) -> int:
            key = (src, dst)
            got = route_of.get(key)
            if got is None:
                lks = link_ids(slice_, tuple(src), tuple(dst), ordering)
                got = route_of[key] = len(table)
                table.append(tuple(pools.channel_of[x] for x in lks))
            return got

        for e, k in enumerate(self.plain):
            it = self.items[k]
            if isinstance(it, Flow):
                rid[e] = route(it.src, it.dst)
        for k in self.fam:
            cols: FlowColumns = self.items[k]  # type: ignore[assignment]
            b = self.base[k]
            rid[b : b + cols.num_columns] = [route(s, d) for s, d in zip(cols.src, cols.dst,
                                                                          strict=True)]  # fmt: skip
        lengths = np.asarray([len(r) for r in table], dtype=np.int64)
        flat = np.asarray([c for r in table for c in r], dtype=np.int64)
        offsets = np.cumsum(lengths) - lengths
        is_flow = rid >= 0
        hops = np.where(is_flow, lengths[np.maximum(rid, 0)] if table else 0, 0)
        flows = np.flatnonzero(is_flow)
        counts = hops[flows]
        pair_node = np.repeat(flows, counts)
        within = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
        pair_link = flat[offsets[rid[pair_node]] + within] if flat.size else flat
        used, pc = np.unique(pair_link, return_inverse=True)
        self.is_flow, self.hops = is_flow, hops.astype(np.int64)
        self.pair_node, self.pair_channel = pair_node, pc.reshape(-1).astype(np.int64)
        self.capacity = np.asarray(pools.capacity_bytes_per_s, dtype=float)[used]

    def system(self, latency_s: float) -> tuple[FlowSystem, np.ndarray]:
        """The column system as a :class:`FlowSystem` and each element's starting depth."""
        n = self.n
        size = np.zeros(n)
        start = np.zeros(n)
        duration = np.zeros(n)
        depth = np.zeros(n, dtype=np.int64)
        tag = np.zeros(n, dtype=np.int64)  # a family's columns never share a cell with others
        parent: list[np.ndarray] = []
        child: list[np.ndarray] = []
        for e, k in enumerate(self.plain):
            it = self.items[k]
            start[e], depth[e] = it.start_s, self.depth[k]
            if isinstance(it, Flow):
                size[e] = it.size_bytes
            elif isinstance(it, Compute):
                duration[e] = it.duration_s
            for dep in set(it.after):
                j = self.index[dep]
                if j in self.base:  # waits for every column's last step
                    m = self.items[j].num_columns  # type: ignore[union-attr]
                    parent.append(np.arange(self.base[j], self.base[j] + m))
                    child.append(np.full(m, e))
                else:
                    parent.append(np.asarray([self.elem_of[j]]))
                    child.append(np.asarray([e]))
        for t, k in enumerate(self.fam, start=1):
            cols: FlowColumns = self.items[k]  # type: ignore[assignment]
            b, m = self.base[k], cols.num_columns
            size[b : b + m], start[b : b + m] = cols.chunk_bytes, cols.start_s
            depth[b : b + m], tag[b : b + m] = self.depth[k], t
            feed = np.asarray(cols.feed, dtype=np.int64)
            if cols.steps > 1 and np.any(feed >= 0):
                has = np.flatnonzero(feed >= 0)
                parent.append(b + feed[has])
                child.append(b + has)
        system = FlowSystem(
            is_flow=self.is_flow, size_bytes=size, start_s=start, duration_s=duration,
            hops=self.hops, pair_node=self.pair_node, pair_channel=self.pair_channel,
            parent=_concat(parent), child=_concat(child),
            capacity=self.capacity, latency_s=latency_s,
        )  # fmt: skip
        return system, depth * (len(self.fam) + 1) + tag


def _concat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)


def _loads(
    system: FlowSystem, part: Partition, *, peak: bool
) -> dict[int, list[tuple[int, float]]]:
    """Per node cell: (channel cell, flows of the cell per channel of it).

    Equitable partitions carry the same count on every channel of a cell; for
    others ``peak`` takes the busiest channel's count (else the mean).
    """
    cell = part.node_cell
    out: dict[int, list[tuple[int, float]]] = {}
    if not system.pair_node.size:
        return out
    if not peak:
        chan_sizes = np.bincount(part.channel_cell)
        keys, counts = np.unique(
            np.stack([cell[system.pair_node], part.channel_cell[system.pair_channel]]),
            axis=1, return_counts=True,
        )  # fmt: skip
        for c, lk, k in zip(keys[0].tolist(), keys[1].tolist(), counts.tolist(), strict=True):
            out.setdefault(c, []).append((lk, k / int(chan_sizes[lk])))
        return out
    per, counts = np.unique(np.stack([cell[system.pair_node], system.pair_channel]),
                            axis=1, return_counts=True)  # fmt: skip
    keys = np.stack([per[0], part.channel_cell[per[1]]])
    order = np.lexsort((counts, keys[1], keys[0]))
    keys, counts = keys[:, order], counts[order]
    last = np.ones(keys.shape[1], dtype=bool)
    last[:-1] = np.any(keys[:, 1:] != keys[:, :-1], axis=0)
    for c, lk, k in zip(keys[0][last].tolist(), keys[1][last].tolist(),
                        counts[last].tolist(), strict=True):  # fmt: skip
        out.setdefault(c, []).append((lk, float(k)))
    return out


class _Lift:
    """The quotient of the flows, built from the columns' partition (see the module doc)."""

    def __init__(self, cs: _System, system: FlowSystem, part: Partition, *, peak: bool) -> None:
        self.cs, self.system, self.cell = cs, system, part.node_cell
        plain_cells = sorted({int(self.cell[e]) for e in range(len(cs.plain))})
        self.lifted = {c: i for i, c in enumerate(plain_cells)}
        self.fam_cells: dict[int, list[int]] = {}
        self.fam_base: dict[int, int] = {}
        total = len(plain_cells)
        for k in cs.fam:
            m = cs.items[k].num_columns  # type: ignore[union-attr]
            ks = sorted(set(self.cell[cs.base[k] : cs.base[k] + m].tolist()))
            self.fam_cells[k], self.fam_base[k] = ks, total
            total += len(ks) * cs.items[k].steps  # type: ignore[union-attr]
        self.loads = _loads(system, part, peak=peak)
        self.rep = np.unique(self.cell, return_index=True)[1]
        self.is_flow: list[bool] = [False] * total
        self.size = [0.0] * total
        self.start = [0.0] * total
        self.duration = [0.0] * total
        self.hops = [0] * total
        self.parents: list[tuple[int, ...]] = [()] * total
        self.links: list[list[tuple[int, float]]] = [[] for _ in range(total)]
        self.first: dict[int, int] = {}  # per item: its first cell (a family's: step 0's)

    def _cells_of(self, deps: tuple[str, ...]) -> tuple[int, ...]:
        out: set[int] = set()
        for dep in deps:
            j = self.cs.index[dep]
            if j in self.cs.base:  # every column's last step
                ks, steps = self.fam_cells[j], self.cs.items[j].steps  # type: ignore[union-attr]
                out.update(self.fam_base[j] + (steps - 1) * len(ks) + i for i in range(len(ks)))
            else:
                out.add(self.lifted[int(self.cell[self.cs.elem_of[j]])])
        return tuple(sorted(out))

    def _plain(self) -> None:
        sy = self.system
        for c, i in self.lifted.items():
            e = int(self.rep[c])
            self.is_flow[i], self.hops[i] = bool(sy.is_flow[e]), int(sy.hops[e])
            self.size[i], self.start[i] = float(sy.size_bytes[e]), float(sy.start_s[e])
            self.duration[i] = float(sy.duration_s[e])
            self.parents[i] = self._cells_of(self.cs.items[self.cs.plain[e]].after)
            self.links[i] = self.loads.get(c, [])
        for e, k in enumerate(self.cs.plain):
            self.first[k] = self.lifted[int(self.cell[e])]

    def _family(self, k: int) -> None:
        cols: FlowColumns = self.cs.items[k]  # type: ignore[assignment]
        ks, b0, base = self.fam_cells[k], self.fam_base[k], self.cs.base[k]
        pos = {c: i for i, c in enumerate(ks)}
        feeds = [cols.feed[int(self.rep[c]) - base] for c in ks]
        feed_pos = [pos[int(self.cell[base + f])] if f >= 0 else -1 for f in feeds]
        head, w = self._cells_of(cols.after), len(ks)
        for s in range(cols.steps):
            for i, c in enumerate(ks):
                x = b0 + s * w + i
                self.is_flow[x], self.size[x], self.start[x] = True, cols.chunk_bytes, cols.start_s
                self.hops[x] = int(self.system.hops[int(self.rep[c])])
                self.links[x] = self.loads.get(c, [])
                if s == 0:
                    self.parents[x] = head
                else:
                    prev = {b0 + (s - 1) * w + i}
                    if feed_pos[i] >= 0:
                        prev.add(b0 + (s - 1) * w + feed_pos[i])
                    self.parents[x] = tuple(sorted(prev))
        self.first[k] = b0

    def cells(self, part: Partition) -> _Cells:
        self._plain()
        for k in self.cs.fam:
            self._family(k)
        children: list[list[int]] = [[] for _ in self.parents]
        for c, ps in enumerate(self.parents):
            for p in ps:
                children[p].append(c)
        _, chan_rep = np.unique(part.channel_cell, return_index=True)
        return _Cells(self.is_flow, self.size, self.start, self.duration, self.hops,
                      self.parents, children, self.links,
                      self.system.capacity[chan_rep].tolist())  # fmt: skip


def _lifted_size(cs: _System, node_cell: np.ndarray) -> int:
    size = len(set(node_cell[: len(cs.plain)].tolist()))
    for k in cs.fam:
        cols: FlowColumns = cs.items[k]  # type: ignore[assignment]
        b = cs.base[k]
        size += cols.steps * len(set(node_cell[b : b + cols.num_columns].tolist()))
    return size


def coarse_partition(
    cs: _System, system: FlowSystem, start: np.ndarray, *, max_cells: int, max_rounds: int = 64
) -> Partition:
    """The finest colour refinement whose lifted quotient fits ``max_cells`` (not verified).

    Every plain node keeps a cell of its own (the timeline is never merged);
    columns and channels are refined round by round (as
    :func:`~aoizora.rank.lumped.equitable_partition`) while the lifted cells
    fit. Unlike an equitable partition it need not give the engine's times:
    what it gives is the approximation :func:`approximate_times` documents.
    """
    n = system.num_nodes
    own = np.zeros(n, dtype=np.int64)
    own[: len(cs.plain)] = np.arange(1, len(cs.plain) + 1)
    node = _renumber(own, system.size_bytes, system.hops, start)
    chan = _renumber(system.capacity)
    best = Partition(node, chan)
    rng = np.random.default_rng(0x5EED)
    for _ in range(max_rounds):
        counts = (int(node.max()) + 1, int(chan.max()) + 1)
        node, chan = refine_round(system, node, chan, counts, rng)
        if (int(node.max()) + 1, int(chan.max()) + 1) == counts:
            return Partition(node, chan)
        if _lifted_size(cs, node) > max_cells:
            break
        best = Partition(node, chan)
    return best


def compact_times(
    slice_: Slice,
    items: Sequence[Item],
    *,
    max_cells: int = DEFAULT_MAX_CELLS,
    min_reduction: float = MIN_REDUCTION,
) -> tuple[list[float], list[float]]:
    """Release and finish of every item, in order, as the engine runs their flows.

    A :class:`~sim.columns.FlowColumns` item's release is its step-0 flows'
    release and its finish its last step's latest finish (what a node waiting
    for it sees). Raises :class:`CompactUnavailable` when no verified partition
    of at most ``max_cells`` lifted cells, and ``min_reduction`` nodes a cell, exists.
    """
    cs = _System(slice_, items)
    system, start = cs.system(float(slice_.hop_latency_s))
    part = equitable_partition(system, max_cells=max_cells, depths=start)
    if part is None:
        raise CompactUnavailable("no verified partition of the column system")
    size = _lifted_size(cs, part.node_cell)
    flows = sum(it.num_flows if isinstance(it, FlowColumns) else 1 for it in items)
    if size > max_cells or size * min_reduction > flows:
        raise CompactUnavailable(f"{size} lifted cells for {flows} nodes (at most {max_cells}, "
                                 f"and {min_reduction} nodes a cell)")  # fmt: skip
    return _run(cs, system, part, items)


def approximate_times(
    slice_: Slice, items: Sequence[Item], *, max_cells: int = DEFAULT_MAX_CELLS, peak: bool = True
) -> tuple[list[float], list[float]]:
    """:func:`compact_times` on the :func:`coarse_partition`: an approximation.

    Where the partition is equitable it is exact; otherwise a cell's flows run
    as their representative (its feed, its parents) with each channel cell's
    load averaged over its channels. Its error against the engine is measured,
    not proven: ``benchmarks/compact_price.py`` and ``tests/aoizora/test_compact.py``.
    """
    cs = _System(slice_, items)
    system, start = cs.system(float(slice_.hop_latency_s))
    part = coarse_partition(cs, system, start, max_cells=max_cells)
    return _run(cs, system, part, items, peak=peak)


def _run(
    cs: _System, system: FlowSystem, part: Partition, items: Sequence[Item], *, peak: bool = False
) -> tuple[list[float], list[float]]:
    lift = _Lift(cs, system, part, peak=peak)
    cells, first = lift.cells(part), lift.first
    run = _CellRun(cells, system.latency_s)
    run.run()
    release = [run.release[first[k]] for k in range(len(items))]
    finish: list[float] = []
    for k, it in enumerate(items):
        if isinstance(it, FlowColumns):
            width = len(set(part.node_cell[cs.base[k] : cs.base[k] + it.num_columns].tolist()))
            last = first[k] + (it.steps - 1) * width
            finish.append(max(run.finish[last : last + width]))
        else:
            finish.append(run.finish[first[k]])
    return release, finish


def _expanded(items: Sequence[Item]) -> tuple[list[Flow | Compute], dict[str, tuple[int, int]]]:
    """The flows of every family, one by one (ids ``{family}/s{step}/{column}``), and
    where each item's nodes lie in the list (first, end)."""
    nodes: list[Flow | Compute] = []
    span: dict[str, tuple[int, int]] = {}
    finals: dict[str, tuple[str, ...]] = {}
    for it in items:
        at = len(nodes)
        if isinstance(it, FlowColumns):
            ident = [f"{it.id}/s{{}}/{c}" for c in range(it.num_columns)]
            for s in range(it.steps):
                for c in range(it.num_columns):
                    deps = it.after if s == 0 else tuple(dict.fromkeys(
                        [ident[it.feed[c]].format(s - 1)] * (it.feed[c] >= 0)
                        + [ident[c].format(s - 1)]))  # fmt: skip
                    nodes.append(Flow(ident[c].format(s), it.src[c], it.dst[c],
                                      it.chunk_bytes, it.start_s, deps))  # fmt: skip
            finals[it.id] = tuple(i.format(it.steps - 1) for i in ident)
        else:
            after = tuple(x for dep in it.after for x in finals.get(dep, (dep,)))
            if isinstance(it, Flow):
                nodes.append(Flow(it.id, it.src, it.dst, it.size_bytes, it.start_s, after))
            else:
                nodes.append(Compute(it.id, it.chip, it.duration_s, it.start_s, after))
        span[it.id] = (at, len(nodes))
    return nodes, span


def mixed_times(
    slice_: Slice, items: Sequence[Item], *, max_flows: int = DEFAULT_MAX_FLOWS
) -> tuple[list[float], list[float]]:
    """The engine's times of ``items``, in the shape of :func:`compact_times`.

    :func:`compact_times` where it is available; else lumped's times of the
    expanded flows (:func:`~aoizora.rank.lumped.lumped_times`, exact too) when
    they number at most ``max_flows``; else :func:`approximate_times`.
    """
    try:
        return compact_times(slice_, items)
    except CompactUnavailable:
        pass
    flows = sum(it.num_flows if isinstance(it, FlowColumns) else 1 for it in items)
    if flows > max_flows:
        APPROXIMATED.append(flows)
        return approximate_times(slice_, items)
    nodes, span = _expanded(items)
    release, finish = lumped_times(slice_, nodes)
    out_r: list[float] = []
    out_f: list[float] = []
    for it in items:
        a, b = span[it.id]
        if isinstance(it, FlowColumns):
            last = b - it.num_columns
            out_r.append(min(release[a : a + it.num_columns]))
            out_f.append(max(finish[last:b]))
        else:
            out_r.append(release[a])
            out_f.append(finish[a])
    return out_r, out_f
