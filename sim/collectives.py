"""Collectives as flows: one call turns one collective into a DAG of flows.

Group members are devices, named by the coordinates of the chip that hosts them;
two devices of one chip (tpu7x) share its coordinates, and a flow between them is
0-hop: it uses no link and finishes when released (the on-chip die-to-die path is
not modelled).

``buffer_bytes`` is always *per device*:

- ``all-gather``: the gathered (output) bytes; each device contributes ``B/n``.
- ``reduce-scatter``: the input (unscattered) bytes; each device ends with ``B/n``.
- ``all-reduce``: the buffer (input = output) bytes.
- ``all-to-all``: the buffer (input = output) bytes; ``B/n`` goes to each peer.
- ``collective-permute``: the bytes each source sends to its target.

Algorithms (their flows: :mod:`sim.algorithms`): ``ring``, ``bidir_ring`` and
``bidir_line`` for all-gather, reduce-scatter and all-reduce; ``pairwise``
for all-to-all; ``direct`` for collective-permute; and ``auto``, the default
for every kind, which picks per group from the group's physical layout on
``slice_`` (:func:`sim.layout.group_layout`): ``bidir_ring`` round a full
physical ring, in the folded order 0, 2, 4, ..., 5, 3, 1 on a line without
wrap-around, round a Hamiltonian cycle on a 2D/3D box -- each in the physical
order, whatever order the replica group lists. Without ``slice_`` the layout is unknown and
``auto`` runs ``bidir_ring`` in the given order. An explicitly named
algorithm always walks the group in the given order.

A collective may start with a fixed overhead (``overhead_s``; default: the
chip's ``collective_overhead_s`` from ``topologies/<generation>.toml`` when
``slice_`` is given, else 0): a :class:`Compute` on no chip that the first
flows wait for. Every plan ends in a join ``done_id`` (a zero-duration
:class:`Compute` on no chip) that finishes when the whole collective has.

>>> plan = collective_flows("all-gather", [[(0,), (1,), (2,), (3,)]], buffer_bytes=8e6,
...                         algorithm="ring", id_prefix="ag")
>>> len(plan.flows), plan.flows[0].size_bytes, plan.done_id
(12, 2000000.0, 'ag/done')
>>> plan.flows[4].id, plan.flows[4].after
('ag/g0/cw/s1/0', ('ag/g0/cw/s0/3', 'ag/g0/cw/s0/0'))
>>> from sim.topology import load_slice
>>> p = collective_flows("all-gather", [[(0, 2), (0, 0), (0, 1), (0, 3)]], buffer_bytes=8e6,
...                      id_prefix="ag", slice_=load_slice("v5e:2x4"))
>>> p.groups[0].algorithm, p.groups[0].members  # a line: the folded ring
('bidir_ring', ((0, 0), (0, 2), (0, 3), (0, 1)))
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sim.algorithms import FlowRole, Steps, line_steps, pairwise_steps, ring_steps
from sim.coords import Coord, as_coord, is_index
from sim.errors import CollectiveError
from sim.layout import group_layout
from sim.nodes import Compute, Flow
from sim.topology import Slice

__all__ = [
    "ALGORITHMS",
    "DEFAULT_ALGORITHM",
    "KINDS",
    "CollectivePlan",
    "FlowRole",
    "GroupPlan",
    "collective_flows",
    "group_plans",
]

KINDS: tuple[str, ...] = (
    "all-gather",
    "reduce-scatter",
    "all-reduce",
    "all-to-all",
    "collective-permute",
)
_RINGS = ("auto", "bidir_ring", "bidir_line", "ring")
ALGORITHMS: dict[str, tuple[str, ...]] = {
    "all-gather": _RINGS,
    "reduce-scatter": _RINGS,
    "all-reduce": _RINGS,
    "all-to-all": ("auto", "pairwise"),
    "collective-permute": ("auto", "direct"),
}
DEFAULT_ALGORITHM: dict[str, str] = {kind: "auto" for kind in KINDS}


@dataclass(frozen=True)
class GroupPlan:
    """How one group runs: the algorithm and the members in the order it walks them."""

    algorithm: str
    members: tuple[Coord, ...]


@dataclass(frozen=True)
class CollectivePlan:
    """The nodes of one collective, the id of its completion join, and what each flow carries.

    ``algorithm`` is the one asked for (``"auto"`` included); ``groups[g]``
    says what group ``g`` actually runs; ``roles[flow id]`` what the flow
    carries (:class:`~sim.algorithms.FlowRole`); ``overhead_s`` the fixed
    start-up delay paid before the first flows.
    """

    kind: str
    algorithm: str
    nodes: tuple[Flow | Compute, ...]
    done_id: str
    groups: tuple[GroupPlan, ...] = ()
    roles: Mapping[str, FlowRole] | None = None
    overhead_s: float = 0.0

    @property
    def flows(self) -> tuple[Flow, ...]:
        """Just the flows, in creation order."""
        return tuple(n for n in self.nodes if isinstance(n, Flow))

    @property
    def total_bytes(self) -> float:
        """Bytes injected into the network (0-hop flows included)."""
        return math.fsum(f.size_bytes for f in self.flows)


def _coord(value: object, *, where: str, slice_: Slice | None) -> Coord:
    if slice_ is not None:
        return as_coord(
            value, shape=slice_.shape, slice_name=slice_.name, role=where, error=CollectiveError
        )
    if (
        isinstance(value, str)
        or not isinstance(value, tuple | list)
        or not value
        or not all(is_index(c) for c in value)
    ):
        raise CollectiveError(
            f"{where}: {value!r} is not a chip coordinate; write a tuple of ints, e.g. (0, 1)"
        )
    return tuple(int(c) for c in value)


def _check_groups(groups: object, slice_: Slice | None) -> list[list[Coord]]:
    if isinstance(groups, str) or not isinstance(groups, Sequence):
        raise CollectiveError(
            f"groups {groups!r} must be a list of groups of chip coordinates, "
            "e.g. [[(0, 0), (1, 0)], [(0, 1), (1, 1)]]"
        )
    out: list[list[Coord]] = []
    for gi, group in enumerate(groups):
        if isinstance(group, str) or not isinstance(group, Sequence) or len(group) == 0:
            raise CollectiveError(
                f"group #{gi} is {group!r}; a group is a non-empty list of chip coordinates, "
                "e.g. [(0, 0), (1, 0)]"
            )
        # A chip may appear once per device it hosts (a tpu7x chip's two TensorCores are
        # members of their own; a flow between them is 0-hop, using no link). Without a
        # slice the number of devices per chip is unknown, so repeats are not checked.
        members = [_coord(c, where=f"group #{gi}", slice_=slice_) for c in group]
        per_chip = len(members) if slice_ is None else slice_.chip.devices_per_chip
        dup = next((c for c in members if members.count(c) > per_chip), None)
        if dup is not None:
            raise CollectiveError(
                f"group #{gi} lists chip {dup!r} {members.count(dup)} times; a chip of "
                f"{slice_.name if slice_ else ''} hosts {per_chip} device(s), so it appears at "
                f"most {per_chip} time(s) per group"
            )
        out.append(members)
    return out


def _check_args(
    kind: str, algorithm: str | None, buffer_bytes: object, id_prefix: object, after: object
) -> tuple[str, float]:
    if kind not in KINDS:
        raise CollectiveError(f"unknown collective kind {kind!r}; valid kinds: {', '.join(KINDS)}")
    algo = DEFAULT_ALGORITHM[kind] if algorithm is None else algorithm
    if algo not in ALGORITHMS[kind]:
        raise CollectiveError(
            f"algorithm {algo!r} does not implement {kind}; valid for {kind}: "
            f"{', '.join(ALGORITHMS[kind])} (default {DEFAULT_ALGORITHM[kind]})"
        )
    if isinstance(buffer_bytes, bool) or not isinstance(buffer_bytes, int | float):
        raise CollectiveError(f"buffer_bytes {buffer_bytes!r} must be a number, e.g. 16e6")
    size = float(buffer_bytes)
    if not math.isfinite(size) or size < 0:
        raise CollectiveError(f"buffer_bytes {buffer_bytes!r} must be finite and >= 0, e.g. 16e6")
    if not isinstance(id_prefix, str) or not id_prefix:
        raise CollectiveError(f"id_prefix {id_prefix!r} must be a non-empty string, e.g. 'ag0'")
    if isinstance(after, str) or not isinstance(after, tuple):
        raise CollectiveError(f"after {after!r} must be a tuple of node ids, e.g. ('c0',)")
    return algo, size


def _overhead(overhead_s: float | None, slice_: Slice | None) -> float:
    if overhead_s is None:
        return 0.0 if slice_ is None else slice_.chip.collective_overhead_s
    if isinstance(overhead_s, bool) or not isinstance(overhead_s, int | float):
        raise CollectiveError(f"overhead_s {overhead_s!r} must be a number of seconds, e.g. 2e-6")
    if not math.isfinite(overhead_s) or overhead_s < 0:
        raise CollectiveError(f"overhead_s {overhead_s!r} must be finite and >= 0, e.g. 2e-6")
    return float(overhead_s)


def _permute(
    pairs: Sequence[tuple[Coord, Coord]],
    size: float,
    prefix: str,
    deps: tuple[str, ...],
    start_s: float,
    slice_: Slice | None,
) -> Steps:
    out = Steps()
    for k, pair in enumerate(pairs):
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise CollectiveError(
                f"pair #{k} is {pair!r}; write (source, target), e.g. ((0, 0), (1, 0))"
            )
        src = _coord(pair[0], where=f"pair #{k}", slice_=slice_)
        dst = _coord(pair[1], where=f"pair #{k}", slice_=slice_)
        flow = Flow(f"{prefix}/p{k}", src, dst, size, start_s, deps)
        out.add(flow, FlowRole(-1, "collective-permute", 0, k))
    out.finals.extend(out.roles)
    return out


def _resolve(kind: str, algo: str, members: Sequence[Coord], slice_: Slice | None) -> GroupPlan:
    """The algorithm one group runs and its members in walking order (``auto`` resolved)."""
    if len(members) == 1:
        return GroupPlan("none", tuple(members))
    if kind == "all-to-all":
        return GroupPlan("pairwise", tuple(members))
    if algo == "auto":
        if slice_ is None:
            return GroupPlan("bidir_ring", tuple(members))
        layout = group_layout(members, slice_)
        return GroupPlan(layout.algorithm, tuple(members[i] for i in layout.order))
    return GroupPlan(algo, tuple(members))


def group_plans(
    kind: str,
    groups: Sequence[Sequence[Coord]],
    *,
    algorithm: str | None = None,
    slice_: Slice | None = None,
) -> tuple[GroupPlan, ...]:
    """What every group of :func:`collective_flows` runs, without building its flows.

    The same :class:`GroupPlan` s as ``collective_flows(...).groups`` (tests
    check it), for callers that compute with the algorithm's structure.

    >>> from sim.topology import load_slice
    >>> group_plans("all-gather", [[(0, 3), (0, 0), (0, 2), (0, 1)]], slice_=load_slice("v5e:2x4"))
    (GroupPlan(algorithm='bidir_ring', members=((0, 0), (0, 2), (0, 3), (0, 1))),)
    """
    algo = DEFAULT_ALGORITHM[kind] if algorithm is None else algorithm
    return tuple(_resolve(kind, algo, list(g), slice_) for g in groups)


def _group(
    kind: str,
    algo: str,
    gi: int,
    members: list[Coord],
    *,
    size: float,
    prefix: str,
    deps: tuple[str, ...],
    start_s: float,
    slice_: Slice | None,
) -> tuple[GroupPlan, Steps]:
    """One group's flows under ``algo`` (``auto`` resolved here); a lone member needs none."""
    plan = _resolve(kind, algo, members, slice_)
    if plan.algorithm == "none":
        return plan, Steps()
    if plan.algorithm == "pairwise":
        steps = pairwise_steps(
            members,
            buffer_bytes=size,
            prefix=f"{prefix}/g{gi}",
            after=deps,
            group=gi,
            start_s=start_s,
        )
        return plan, steps
    algo, members = plan.algorithm, list(plan.members)
    name = f"{prefix}/g{gi}"
    if algo == "bidir_line":
        steps = line_steps(
            kind, members, buffer_bytes=size, prefix=name, after=deps, group=gi, start_s=start_s
        )
    else:
        steps = ring_steps(
            kind,
            members,
            buffer_bytes=size,
            bidirectional=algo == "bidir_ring",
            prefix=name,
            after=deps,
            group=gi,
            start_s=start_s,
        )
    return GroupPlan(algo, tuple(members)), steps


def collective_flows(
    kind: str,
    groups: Sequence[Sequence[Coord]],
    *,
    buffer_bytes: float,
    algorithm: str | None = None,
    id_prefix: str,
    after: tuple[str, ...] = (),
    start_s: float = 0.0,
    pairs: Sequence[tuple[Coord, Coord]] | None = None,
    slice_: Slice | None = None,
    overhead_s: float | None = None,
) -> CollectivePlan:
    """Decompose one collective into flows plus a completion join.

    ``groups``: replica groups as lists of chip coordinates (ignored for
    ``collective-permute``, which takes ``pairs`` of (source, target)
    coordinates instead; pass ``groups=()``). ``slice_`` lets ``auto`` see the
    physical layout and supplies the chip's overhead. Flow ids are
    ``{id_prefix}/g{group}/{cw|ccw}/s{step}/{member}`` for rings,
    ``{id_prefix}/g{group}/{r|l}/s{step}/{member}`` for lines (members counted
    in walking order, :attr:`CollectivePlan.groups`),
    ``{id_prefix}/g{group}/{i}->{j}`` for pairwise and ``{id_prefix}/p{k}`` for
    permutes; the join is ``{id_prefix}/done``, the overhead ``{id_prefix}/overhead``.

    >>> p = collective_flows("all-to-all", [[(0, 0), (1, 0), (0, 1)]], buffer_bytes=3e6,
    ...                      id_prefix="a2a")
    >>> p.groups[0].algorithm, len(p.flows), p.flows[0].size_bytes
    ('pairwise', 6, 1000000.0)
    >>> p = collective_flows("collective-permute", (), pairs=[((0, 0), (1, 0))],
    ...                      buffer_bytes=5.0, id_prefix="cp", after=("x",), overhead_s=1e-6)
    >>> [(n.id, n.after) for n in p.nodes]
    [('cp/overhead', ('x',)), ('cp/p0', ('cp/overhead',)), ('cp/done', ('cp/p0',))]
    """
    algo, size = _check_args(kind, algorithm, buffer_bytes, id_prefix, after)
    overhead = _overhead(overhead_s, slice_)
    head: list[Flow | Compute] = []
    deps = after
    if overhead > 0:
        head.append(Compute(f"{id_prefix}/overhead", None, overhead, start_s, after))
        deps = (head[0].id,)
    plans: list[GroupPlan] = []
    if kind == "collective-permute":
        if pairs is None or len(groups) > 0:
            raise CollectiveError(
                "collective-permute takes pairs=[(source, target), ...] and groups=(); e.g. "
                "collective_flows('collective-permute', (), pairs=[((0, 0), (1, 0))], ...)"
            )
        steps = _permute(pairs, size, id_prefix, deps, start_s, slice_)
    else:
        if pairs is not None:
            raise CollectiveError(f"pairs= is only for collective-permute, not {kind}")
        steps = Steps()
        for gi, members in enumerate(_check_groups(groups, slice_)):
            plan, got = _group(
                kind,
                algo,
                gi,
                members,
                size=size,
                prefix=id_prefix,
                deps=deps,
                start_s=start_s,
                slice_=slice_,
            )
            plans.append(plan)
            steps.flows.extend(got.flows)
            steps.roles.update(got.roles)
            steps.finals.extend(got.finals)
    done_id = f"{id_prefix}/done"
    join = Compute(done_id, None, 0.0, start_s, tuple(steps.finals) if steps.flows else deps)
    return CollectivePlan(
        kind=kind,
        algorithm=algo,
        nodes=(*head, *steps.flows, join),
        done_id=done_id,
        groups=tuple(plans),
        roles=steps.roles,
        overhead_s=overhead,
    )
