"""The simulator's input: flows and computes forming a DAG, and its validation.

A :class:`Flow` moves bytes between two chips; a :class:`Compute` is a delay
(on a chip, or on none: a join). Both are released at ``max(start_s, finish of
every id in after)``. :func:`validate_graph` checks a node list before a run
and raises :class:`~sim.errors.GraphError` (ids, numbers, ``after``, cycles)
or :class:`~sim.errors.RoutingError` (flow endpoints), so a run never hangs.

>>> from sim.topology import make_slice
>>> s = make_slice([2], link_bandwidth_bytes_per_s=1e9, hop_latency_s=0.0)
>>> g = validate_graph(s, [Flow("a", (0,), (1,), 1e3), Compute("c", None, 0.0, after=("a",))])
>>> g.index, g.endpoints
({'a': 0, 'c': 1}, [((0,), (1,)), None])
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

from sim.coords import Coord, all_plain, as_coord
from sim.errors import GraphError
from sim.topology import Slice

__all__ = ["CheckedGraph", "Compute", "Flow", "validate_graph"]


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


def _check_number(value: object, *, what: str, node_id: str, example: str) -> float:
    if type(value) is float and 0.0 <= value < math.inf:
        return value  # the common case, decided without the general checks
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise GraphError(f"{what} of node {node_id!r} must be a number, got {value!r}; {example}")
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise GraphError(
            f"{what} of node {node_id!r} is {value!r}; it must be finite and >= 0; {example}"
        )
    return number


@dataclass(frozen=True)
class CheckedGraph:
    """What :func:`validate_graph` found: ``index[id]`` is a node's position;
    ``endpoints[i]`` a flow's (source, destination) as tuples of plain ints
    (``None`` for a compute); ``waiting[i]`` how many distinct nodes node ``i``
    waits for; ``children[i]`` the nodes that wait for it, by position."""

    index: dict[str, int]
    endpoints: list[tuple[Coord, Coord] | None]
    waiting: list[int] = field(default_factory=list)
    children: list[list[int]] = field(default_factory=list)


def _check_node(
    slice_: Slice, i: int, node: object, index: dict[str, int]
) -> tuple[Coord, Coord] | None:
    if not isinstance(node, Flow | Compute):
        raise GraphError(f"node #{i} is {node!r}; expected a sim.engine.Flow or Compute")
    if not isinstance(node.id, str) or not node.id:
        raise GraphError(f"node #{i} has id {node.id!r}; ids are non-empty strings, e.g. 'f0'")
    if node.id in index:
        raise GraphError(
            f"duplicate node id {node.id!r} (nodes #{index[node.id]} and #{i}); ids must be "
            "unique, e.g. 'ag0/s1/cw/3'"
        )
    _check_number(node.start_s, what="start_s", node_id=node.id, example="e.g. 0.0")
    if isinstance(node, Flow):
        _check_number(node.size_bytes, what="size_bytes", node_id=node.id, example="e.g. 1e6")
        shape, name = slice_.shape, slice_.name
        return (
            as_coord(node.src, shape=shape, slice_name=name, role=f"flow {node.id!r}: source"),
            as_coord(node.dst, shape=shape, slice_name=name, role=f"flow {node.id!r}: destination"),
        )
    _check_number(node.duration_s, what="duration_s", node_id=node.id, example="e.g. 1e-4")
    if node.chip is not None:
        as_coord(
            node.chip,
            shape=slice_.shape,
            slice_name=slice_.name,
            role=f"compute {node.id!r}: chip",
            error=GraphError,
        )
    return None


def _plain_numbers(values: list[float]) -> bool:
    # _check_number's fast path, by the list: floats only, finite, >= 0.
    return set(map(type, values)) <= {float} and (
        not values or (all(map(math.isfinite, values)) and min(values) >= 0.0)
    )


def _plain_graph(
    slice_: Slice, nodes: Sequence[Flow | Compute]
) -> tuple[dict[str, int], list[tuple[Coord, Coord] | None]] | None:
    """The index and endpoints :func:`validate_graph` finds when every node is a
    plainly valid flow with a new id, else ``None``.

    The per-node checks' fast paths over the whole list at once (sets of
    types, minima and maxima): a tenth of checking 10,000 flows one by one.
    Anything else goes through the one-by-one checks, which name the problem.
    """
    if not nodes or set(map(type, nodes)) != {Flow}:
        return None
    flows = cast("Sequence[Flow]", nodes)
    ids = [nd.id for nd in flows]
    if not set(map(type, ids)) <= {str} or not all(ids):  # before hashing them
        return None
    index = dict(zip(ids, range(len(ids)), strict=True))
    if len(index) != len(ids):  # a duplicate: named by the one-by-one checks
        return None
    srcs, dsts = [nd.src for nd in flows], [nd.dst for nd in flows]
    shape = slice_.shape
    if (
        not _plain_numbers([nd.size_bytes for nd in flows])
        or not _plain_numbers([nd.start_s for nd in flows])
        or not all_plain(srcs, shape, tuple)
        or not all_plain(dsts, shape, tuple)
    ):
        return None
    return index, list(zip(srcs, dsts, strict=True))


def validate_graph(slice_: Slice, nodes: Sequence[Flow | Compute]) -> CheckedGraph:
    """Check ``nodes`` for a run on ``slice_`` (every rule in the module doc)."""
    plain = _plain_graph(slice_, nodes)
    if plain is not None:
        index, endpoints = plain
    else:  # one by one: the first node that is not plain raises
        index, endpoints = {}, []
        for i, node in enumerate(nodes):
            endpoints.append(_check_node(slice_, i, node, index))
            index[node.id] = i
    waiting, children = _dependencies(nodes, index)
    _check_acyclic(nodes, index, waiting, children)
    return CheckedGraph(index, endpoints, waiting, children)


def _dependencies(
    nodes: Sequence[Flow | Compute], index: dict[str, int]
) -> tuple[list[int], list[list[int]]]:
    """Check every ``after``; per node the number of distinct dependencies, and its children.

    Children are listed in node order, each parent's ``after`` read in the
    position order of its entries (the order the engine releases them in).
    """
    children: list[list[int]] = [[] for _ in nodes]
    afters = [nd.after for nd in nodes]
    if set(map(type, afters)) <= {tuple, list} and not any(afters):
        return [0] * len(nodes), children  # every after empty: nothing to check or count
    waiting: list[int] = []
    for i, node in enumerate(nodes):
        after = node.after
        if isinstance(after, str) or not isinstance(after, tuple | list):
            raise GraphError(
                f"'after' of node {node.id!r} must be a tuple of ids, got {after!r}; e.g. ('f1',)"
            )
        if not after:
            waiting.append(0)
            continue
        for dep in after:
            if dep not in index:
                raise GraphError(
                    f"node {node.id!r} waits for unknown id {dep!r}; 'after' may only name "
                    f"nodes given to simulate(), e.g. {next(iter(index))!r}"
                )
            if dep == node.id:
                raise GraphError(f"node {node.id!r} lists itself in 'after'")
        deps = sorted({index[dep] for dep in after})
        waiting.append(len(deps))
        for d in deps:
            children[d].append(i)
    return waiting, children


def _check_acyclic(
    nodes: Sequence[Flow | Compute],
    index: dict[str, int],
    waiting: list[int],
    children: list[list[int]],
) -> None:
    indegree = list(waiting)
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
