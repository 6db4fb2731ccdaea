"""Collectives as flows: each named algorithm turns one collective into a DAG.

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

Algorithms (``n`` = group size, groups in their given ring order):

- ``ring``: ``n-1`` steps (``2(n-1)`` for all-reduce = reduce-scatter then
  all-gather); in every step each member sends one ``B/n`` chunk to the next
  member. Step ``s`` of member ``i`` waits for (a) the step ``s-1`` flow that
  delivered to ``i`` (the chunk it forwards or reduces) and (b) ``i``'s own step
  ``s-1`` send (one chunk in flight per member and direction).
- ``bidir_ring``: two such rings at once, one each way round the group, each
  carrying half of every chunk (``B/(2n)`` per flow).
- ``pairwise`` (all-to-all): every member sends ``B/n`` directly to every other
  member, all at once: ``n(n-1)`` concurrent flows.
- ``direct`` (collective-permute): one flow of ``B`` per (source, target) pair.

Defaults (why: docs/simulator.md): ``bidir_ring`` for all-gather,
reduce-scatter and all-reduce; ``pairwise`` for all-to-all; ``direct`` for
collective-permute.

Every plan ends in a join node ``done_id`` (a zero-duration :class:`Compute`
on no chip) that finishes when the whole collective has.

>>> plan = collective_flows("all-gather", [[(0,), (1,), (2,), (3,)]], buffer_bytes=8e6,
...                         algorithm="ring", id_prefix="ag")
>>> len(plan.flows), plan.flows[0].size_bytes, plan.done_id
(12, 2000000.0, 'ag/done')
>>> plan.flows[4].id, plan.flows[4].after
('ag/g0/cw/s1/0', ('ag/g0/cw/s0/3', 'ag/g0/cw/s0/0'))
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from sim.engine import Compute, Flow
from sim.errors import CollectiveError

__all__ = [
    "ALGORITHMS",
    "DEFAULT_ALGORITHM",
    "KINDS",
    "CollectivePlan",
    "collective_flows",
]

Coord = tuple[int, ...]

KINDS: tuple[str, ...] = (
    "all-gather",
    "reduce-scatter",
    "all-reduce",
    "all-to-all",
    "collective-permute",
)
ALGORITHMS: dict[str, tuple[str, ...]] = {
    "all-gather": ("bidir_ring", "ring"),
    "reduce-scatter": ("bidir_ring", "ring"),
    "all-reduce": ("bidir_ring", "ring"),
    "all-to-all": ("pairwise",),
    "collective-permute": ("direct",),
}
DEFAULT_ALGORITHM: dict[str, str] = {kind: algos[0] for kind, algos in ALGORITHMS.items()}


@dataclass(frozen=True)
class CollectivePlan:
    """The nodes of one collective and the id of its completion join."""

    kind: str
    algorithm: str
    nodes: tuple[Flow | Compute, ...]
    done_id: str

    @property
    def flows(self) -> tuple[Flow, ...]:
        """Just the flows, in creation order."""
        return tuple(n for n in self.nodes if isinstance(n, Flow))

    @property
    def total_bytes(self) -> float:
        """Bytes injected into the network (0-hop flows included)."""
        return math.fsum(f.size_bytes for f in self.flows)


def _coord(value: object, *, where: str) -> Coord:
    if (
        not isinstance(value, tuple | list)
        or not value
        or not all(isinstance(c, int) and not isinstance(c, bool) for c in value)
    ):
        raise CollectiveError(
            f"{where}: {value!r} is not a chip coordinate; write a tuple of ints, e.g. (0, 1)"
        )
    return tuple(value)


def _check_groups(groups: Sequence[Sequence[Coord]]) -> list[list[Coord]]:
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
        # A chip may appear twice: its devices (a tpu7x chip's two TensorCores) are members
        # of their own, and a flow between them is 0-hop, using no link.
        out.append([_coord(c, where=f"group #{gi}") for c in group])
    return out


def _ring(
    members: list[Coord],
    *,
    prefix: str,
    direction: int,
    steps: int,
    chunk_bytes: float,
    after: tuple[str, ...],
    start_s: float,
) -> tuple[list[Flow], list[str]]:
    """``steps`` dependent steps of a ring in ``direction`` (+1: i sends to i+1)."""
    n = len(members)
    flows: list[Flow] = []
    last: list[str] = []
    for step in range(steps):
        ids = [f"{prefix}/s{step}/{i}" for i in range(n)]
        for i in range(n):
            if step == 0:
                deps = after
            else:
                fed_by = f"{prefix}/s{step - 1}/{(i - direction) % n}"
                own = f"{prefix}/s{step - 1}/{i}"
                deps = (fed_by, own)
            flows.append(
                Flow(
                    id=ids[i],
                    src=members[i],
                    dst=members[(i + direction) % n],
                    size_bytes=chunk_bytes,
                    start_s=start_s,
                    after=deps,
                )
            )
        last = ids
    return flows, last


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
) -> CollectivePlan:
    """Decompose one collective into flows plus a completion join.

    ``groups``: replica groups as lists of chip coordinates, each in its ring
    order (ignored for ``collective-permute``, which takes ``pairs`` of
    (source, target) coordinates instead; pass ``groups=()``). Flow ids are
    ``{id_prefix}/g{group}/{cw|ccw}/s{step}/{member}`` for rings,
    ``{id_prefix}/g{group}/{i}->{j}`` for pairwise and ``{id_prefix}/p{k}`` for
    permutes; the join is ``{id_prefix}/done``. Step-0 flows wait for ``after``.

    >>> p = collective_flows("all-to-all", [[(0, 0), (1, 0), (0, 1)]], buffer_bytes=3e6,
    ...                      id_prefix="a2a")
    >>> p.algorithm, len(p.flows), p.flows[0].size_bytes
    ('pairwise', 6, 1000000.0)
    >>> p = collective_flows("collective-permute", (), pairs=[((0, 0), (1, 0))],
    ...                      buffer_bytes=5.0, id_prefix="cp", after=("x",))
    >>> [(f.id, f.after) for f in p.flows], p.nodes[-1].after
    ([('cp/p0', ('x',))], ('cp/p0',))
    """
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

    flows: list[Flow] = []
    finals: list[str] = []
    if kind == "collective-permute":
        if pairs is None or len(groups) > 0:
            raise CollectiveError(
                "collective-permute takes pairs=[(source, target), ...] and groups=(); e.g. "
                "collective_flows('collective-permute', (), pairs=[((0, 0), (1, 0))], ...)"
            )
        for k, pair in enumerate(pairs):
            if not isinstance(pair, tuple | list) or len(pair) != 2:
                raise CollectiveError(
                    f"pair #{k} is {pair!r}; write (source, target), e.g. ((0, 0), (1, 0))"
                )
            src = _coord(pair[0], where=f"pair #{k}")
            dst = _coord(pair[1], where=f"pair #{k}")
            flows.append(Flow(f"{id_prefix}/p{k}", src, dst, size, start_s, after))
        finals = [f.id for f in flows]
    else:
        if pairs is not None:
            raise CollectiveError(f"pairs= is only for collective-permute, not {kind}")
        for gi, members in enumerate(_check_groups(groups)):
            n = len(members)
            if n == 1:
                continue  # a lone member already holds the result
            if algo == "pairwise":
                for i in range(n):
                    for j in range(n):
                        if i != j:
                            flows.append(
                                Flow(
                                    f"{id_prefix}/g{gi}/{i}->{j}",
                                    members[i],
                                    members[j],
                                    size / n,
                                    start_s,
                                    after,
                                )
                            )
                finals.extend(f.id for f in flows[-n * (n - 1) :])
                continue
            steps = 2 * (n - 1) if kind == "all-reduce" else n - 1
            directions = ((1, "cw"),) if algo == "ring" else ((1, "cw"), (-1, "ccw"))
            chunk = size / n / len(directions)
            for direction, tag in directions:
                ring_flows, last = _ring(
                    members,
                    prefix=f"{id_prefix}/g{gi}/{tag}",
                    direction=direction,
                    steps=steps,
                    chunk_bytes=chunk,
                    after=after,
                    start_s=start_s,
                )
                flows.extend(ring_flows)
                # The last step waits (transitively) for every earlier step.
                finals.extend(last)
    done_id = f"{id_prefix}/done"
    join = Compute(
        id=done_id,
        chip=None,
        duration_s=0.0,
        start_s=start_s,
        after=tuple(finals) if flows else after,
    )
    return CollectivePlan(kind=kind, algorithm=algo, nodes=(*flows, join), done_id=done_id)
