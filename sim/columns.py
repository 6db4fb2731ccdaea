"""A collective's flows in compact form: columns repeated over steps, never built one by one.

A ring collective over ``n`` members runs ``S`` steps (``n - 1``, or ``2(n - 1)``
for an all-reduce) in which every member sends one chunk to its neighbour
(:mod:`sim.algorithms`): step after step, the same *columns* -- (group,
direction, member), one source and one destination each -- only later. A
pairwise all-to-all is one step whose columns are the ordered pairs. So
:func:`collective_columns` keeps one entry per column (its ends and the column
*feeding* it: step ``s`` of column ``c`` waits for step ``s - 1`` of ``c`` and of
``feed[c]``), not one :class:`~sim.nodes.Flow` per (step, column): a 1,024-member
all-reduce is 2,048 columns where :func:`~sim.collectives.collective_flows`
builds 4.19 million flows (about 560 bytes each with their role and id).

:meth:`FlowColumns.expand` gives the flows back, node for node as
:func:`~sim.collectives.collective_flows` builds them (ids, ends, sizes,
dependencies; ``tests/sim/test_columns.py``), so whatever runs the compact
form is checked against the engine on the expanded one.

>>> from sim.topology import load_slice
>>> s = load_slice("v5e:2x4")
>>> p = collective_columns("all-reduce", [[(0, i) for i in range(4)]], buffer_bytes=8e6,
...                        id_prefix="ar", slice_=s)
>>> p.columns.steps, p.columns.num_columns, p.columns.chunk_bytes  # 6 steps, 2 ways x 4
(6, 8, 1000000.0)
>>> len(p.expand().flows)
48
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from sim.collectives import CollectivePlan, collective_flows, group_plans
from sim.coords import Coord
from sim.nodes import Compute, Flow
from sim.topology import Slice

__all__ = ["ColumnPlan", "FlowColumns", "collective_columns"]

_TAGS = {1: "cw", -1: "ccw"}


@dataclass(frozen=True)
class FlowColumns:
    """``steps`` rounds of one flow per column, all of ``chunk_bytes``.

    Column ``c`` goes ``src[c] -> dst[c]``; its step-0 flow waits for ``after``,
    its step-``s`` flow for its own step ``s - 1`` and for step ``s - 1`` of
    ``feed[c]`` (``-1``: for nothing else). Columns come group by group
    (``groups``: their numbers among the collective's groups), each group's
    ``len(directions) * group_size`` ring columns direction by direction, or its
    ``group_size * (group_size - 1)`` ordered pairs; :meth:`label` rebuilds a
    column's place (and :meth:`flow_id` its flows' ids) from that alone. ``id``
    names the family in a node list: a node whose ``after`` lists it waits for
    every column's last step.
    """

    id: str
    src: tuple[Coord, ...]
    dst: tuple[Coord, ...]
    feed: tuple[int, ...]
    groups: tuple[int, ...]
    group_size: int
    directions: tuple[int, ...]  # +1 / -1 for rings; () for pairwise
    steps: int
    chunk_bytes: float
    start_s: float
    after: tuple[str, ...]
    pairwise: bool

    @property
    def num_columns(self) -> int:
        return len(self.src)

    @property
    def num_flows(self) -> int:
        return self.steps * self.num_columns

    def label(self, column: int) -> tuple[int, int, int]:
        """(group, direction or receiving member, sending member) of ``column``."""
        n = self.group_size
        block = n * (n - 1) if self.pairwise else len(self.directions) * n
        g, r = divmod(column, block)
        if self.pairwise:
            i, j = divmod(r, n - 1)
            return self.groups[g], j + (j >= i), i
        return self.groups[g], self.directions[r // n], r % n

    def flow_id(self, prefix: str, step: int, column: int) -> str:
        """The id :func:`~sim.collectives.collective_flows` gives this flow."""
        g, d, i = self.label(column)
        if self.pairwise:
            return f"{prefix}/g{g}/{i}->{d}"
        return f"{prefix}/g{g}/{_TAGS[d]}/s{step}/{i}"


@dataclass(frozen=True)
class ColumnPlan:
    """A collective as ``head`` (its overhead, if any), its columns and its completion join."""

    kind: str
    id_prefix: str
    head: tuple[Compute, ...]
    columns: FlowColumns
    join: Compute

    @property
    def nodes(self) -> tuple[Compute | FlowColumns, ...]:
        """The compact node list: the join waits for the family (``after=(columns.id,)``)."""
        return (*self.head, self.columns, self.join)

    def expand(self) -> CollectivePlan:
        """The same flows, one by one, as :func:`~sim.collectives.collective_flows` builds them."""
        cols = self.columns
        order = range(cols.num_columns)
        flows: list[Flow] = []
        finals: list[str] = []
        if cols.pairwise:
            for c in order:
                flows.append(Flow(cols.flow_id(self.id_prefix, 0, c), cols.src[c], cols.dst[c],
                                  cols.chunk_bytes, cols.start_s, cols.after))  # fmt: skip
            finals = [f.id for f in flows]
        else:
            runs: dict[tuple[int, int], list[int]] = {}
            for c in order:
                runs.setdefault(cols.label(c)[:2], []).append(c)
            for run in runs.values():  # a group's one direction, step after step
                for s in range(cols.steps):
                    for c in run:
                        deps = cols.after if s == 0 else (
                            cols.flow_id(self.id_prefix, s - 1, cols.feed[c]),
                            cols.flow_id(self.id_prefix, s - 1, c),
                        )  # fmt: skip
                        fid = cols.flow_id(self.id_prefix, s, c)
                        flows.append(Flow(fid, cols.src[c], cols.dst[c], cols.chunk_bytes,
                                          cols.start_s, deps))  # fmt: skip
                finals.extend(cols.flow_id(self.id_prefix, cols.steps - 1, c) for c in run)
        join = Compute(self.join.id, None, 0.0, self.join.start_s, tuple(finals))
        overhead = self.head[0].duration_s if self.head else 0.0
        return CollectivePlan(self.kind, "auto", (*self.head, *flows, join), join.id,
                              overhead_s=overhead)  # fmt: skip


def collective_columns(
    kind: str,
    groups: Sequence[Sequence[Coord]],
    *,
    buffer_bytes: float,
    id_prefix: str,
    slice_: Slice,
    algorithm: str | None = None,
    after: tuple[str, ...] = (),
    start_s: float = 0.0,
) -> ColumnPlan | None:
    """The compact form of ``collective_flows(kind, groups, ...)``, or None where it has none.

    It has one when every group of two or more members runs the same ring
    (``ring``/``bidir_ring``) or ``pairwise`` algorithm over the same number of
    members (so all share one step count) and there is at least one such
    group; lines and permutes (whose steps differ) are left to the flows.
    ``slice_`` gives the layouts (as for ``auto``) and the chip's overhead.
    """
    if kind not in ("all-gather", "reduce-scatter", "all-reduce", "all-to-all"):
        return None
    plans = [(g, p) for g, p in enumerate(group_plans(kind, groups, algorithm=algorithm,
             slice_=slice_)) if p.algorithm != "none"]  # fmt: skip
    algos = {p.algorithm for _, p in plans}
    sizes = {len(p.members) for _, p in plans}
    if not plans or len(algos) > 1 or len(sizes) > 1:
        return None
    algo, n = algos.pop(), sizes.pop()
    if algo not in ("ring", "bidir_ring", "pairwise"):
        return None
    src: list[Coord] = []
    dst: list[Coord] = []
    feed: list[int] = []
    dirs: tuple[int, ...] = ()
    if algo == "pairwise":
        steps, chunk = 1, float(buffer_bytes) / n
        for _, p in plans:
            for i in range(n):
                for j in range(n):
                    if i != j:
                        src.append(p.members[i])
                        dst.append(p.members[j])
                        feed.append(-1)
    else:
        dirs = (1, -1) if algo == "bidir_ring" else (1,)
        steps = 2 * (n - 1) if kind == "all-reduce" else n - 1
        chunk = float(buffer_bytes) / n / len(dirs)
        for _, p in plans:
            for d in dirs:
                base = len(src)
                for i in range(n):
                    src.append(p.members[i])
                    dst.append(p.members[(i + d) % n])
                    feed.append(base + (i - d) % n)
    overhead = float(slice_.chip.collective_overhead_s)
    head: tuple[Compute, ...] = ()
    deps = after
    if overhead > 0:
        head = (Compute(f"{id_prefix}/overhead", None, overhead, start_s, after),)
        deps = (head[0].id,)
    cols = FlowColumns(
        id=f"{id_prefix}/flows", src=tuple(src), dst=tuple(dst), feed=tuple(feed),
        groups=tuple(g for g, _ in plans), group_size=n, directions=dirs, steps=steps,
        chunk_bytes=chunk, start_s=start_s, after=deps, pairwise=algo == "pairwise",
    )  # fmt: skip
    join = Compute(f"{id_prefix}/done", None, 0.0, start_s, (cols.id,))
    return ColumnPlan(kind, id_prefix, head, cols, join)


def _same_as_flows(plan: ColumnPlan, full: CollectivePlan) -> bool:
    """Whether ``plan`` expands to ``full``'s nodes (ids, ends, sizes, waits); for tests."""
    got = plan.expand().nodes
    if len(got) != len(full.nodes):
        return False
    for a, b in zip(got, full.nodes, strict=True):
        if type(a) is not type(b) or a.id != b.id or a.after != b.after:
            return False
        if isinstance(a, Flow) and isinstance(b, Flow):
            if (a.src, a.dst, a.start_s) != (b.src, b.dst, b.start_s):
                return False
            if not math.isclose(a.size_bytes, b.size_bytes, rel_tol=0, abs_tol=0):
                return False
    return True


def check_against_flows(
    kind: str, groups: Sequence[Sequence[Coord]], *, buffer_bytes: float, slice_: Slice
) -> bool:
    """``collective_columns(...).expand()`` equals ``collective_flows(...)``, node for node."""
    plan = collective_columns(kind, groups, buffer_bytes=buffer_bytes, id_prefix="x",
                              slice_=slice_)  # fmt: skip
    if plan is None:
        return False
    full = collective_flows(kind, groups, buffer_bytes=buffer_bytes, id_prefix="x",
                            slice_=slice_)  # fmt: skip
    return _same_as_flows(plan, full)
