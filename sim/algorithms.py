"""The named collective algorithms, each as flows over one group in a given order.

Every builder returns a :class:`Steps`: the flows, what each carries (a
:class:`FlowRole`) and the ids the collective's completion waits for. ``n``
is the group size, ``B`` the per-device buffer (see :mod:`sim.collectives`);
members are given in the order the algorithm walks them, and ``chunk``
numbers in the roles are positions in that order.

- ``ring`` / ``bidir_ring`` (all-gather, reduce-scatter, all-reduce): ``n-1``
  dependent steps (``2(n-1)`` for all-reduce: reduce-scatter, then
  all-gather); in each, every member sends one chunk to the next member
  round the ring -- one way (``ring``, chunk ``B/n``) or both ways at once
  (``bidir_ring``, half a chunk ``B/(2n)`` each way). Step ``s`` of member
  ``i`` waits for the step ``s-1`` flow that delivered to ``i`` (the chunk it
  forwards or adds to) and for ``i``'s own step ``s-1`` send.
- ``bidir_line`` (same kinds): the ends are not joined. Every chunk travels
  both ways along the line, one link per step, ``n-1`` steps of whole chunks
  ``B/n``; at step ``s`` the link between positions ``i`` and ``i+1`` carries
  one chunk each way, or nothing once (all-gather) or until (reduce-scatter)
  no chunk needs it. Same waiting rule. This is the scaling-book's
  "3 hops for data from the edges to reach the other edge" on an axis
  without wrap-around: ``(n-1)(hop latency + B/(n bw))``.
- ``pairwise`` (all-to-all): every member sends ``B/n`` straight to every
  other member at once.
- ``direct`` (collective-permute): one flow of ``B`` per (source, target) pair.

>>> s = line_steps("all-gather", [(0,), (1,), (2,)], buffer_bytes=3.0, prefix="g0", after=())
>>> [(f.id, f.src, f.dst, s.roles[f.id].chunk) for f in s.flows]  # doctest: +NORMALIZE_WHITESPACE
[('g0/r/s0/0', (0,), (1,), 0), ('g0/r/s0/1', (1,), (2,), 1), ('g0/l/s0/1', (1,), (0,), 1),
 ('g0/l/s0/2', (2,), (1,), 2), ('g0/r/s1/1', (1,), (2,), 0), ('g0/l/s1/1', (1,), (0,), 2)]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from sim.coords import Coord
from sim.nodes import Flow

__all__ = ["FlowRole", "Steps", "line_steps", "pairwise_steps", "ring_steps"]


@dataclass(frozen=True)
class FlowRole:
    """What one flow of a collective carries.

    ``phase``: ``"all-gather"`` (a copy of chunk ``chunk``, the shard of the
    member at that position), ``"reduce-scatter"`` (a partial sum of chunk
    ``chunk``, the shard that member ends with), ``"all-to-all"`` (the block
    for position ``chunk``) or ``"collective-permute"``; ``part`` tells the
    halves of a bidirectional ring apart (0 one way, 1 the other) and, for
    all-to-all, names the sending position. ``step`` is the algorithm's step.
    ``group`` is the group's index among the collective's groups.
    """

    group: int
    phase: str
    step: int
    chunk: int
    part: int = 0


@dataclass
class Steps:
    """Flows of one group (or of a permute) and the ids the completion waits for."""

    flows: list[Flow] = field(default_factory=list)
    roles: dict[str, FlowRole] = field(default_factory=dict)
    finals: list[str] = field(default_factory=list)

    def add(self, flow: Flow, role: FlowRole) -> None:
        self.flows.append(flow)
        self.roles[flow.id] = role


def _phases(kind: str, n: int) -> list[tuple[str, int]]:
    """``(phase, step within phase)`` for every step of the kind."""
    rs = [("reduce-scatter", s) for s in range(n - 1)]
    ag = [("all-gather", s) for s in range(n - 1)]
    return {"all-gather": ag, "reduce-scatter": rs, "all-reduce": rs + ag}[kind]


def ring_steps(
    kind: str,
    members: Sequence[Coord],
    *,
    buffer_bytes: float,
    bidirectional: bool,
    prefix: str,
    after: tuple[str, ...],
    group: int = 0,
    start_s: float = 0.0,
) -> Steps:
    """``ring`` / ``bidir_ring`` over ``members`` in this order (see the module doc)."""
    n = len(members)
    out = Steps()
    directions = ((1, "cw", 0), (-1, "ccw", 1)) if bidirectional else ((1, "cw", 0),)
    chunk_bytes = buffer_bytes / n / len(directions)
    for d, tag, part in directions:
        last: list[str] = []
        for step, (phase, k) in enumerate(_phases(kind, n)):
            ids = [f"{prefix}/{tag}/s{step}/{i}" for i in range(n)]
            for i in range(n):
                # All-gather forwards the chunk that arrived last step; reduce-
                # scatter adds to the partial sum of the chunk one further on.
                chunk = (i - d * k) % n if phase == "all-gather" else (i - d * (k + 1)) % n
                deps = after if step == 0 else (last[(i - d) % n], last[i])
                role = FlowRole(group, phase, step, chunk, part)
                flow = Flow(ids[i], members[i], members[(i + d) % n], chunk_bytes, start_s, deps)
                out.add(flow, role)
            last = ids
        out.finals.extend(last)  # the last step waits, transitively, for all
    return out


def _line_moves(phase: str, n: int, k: int, d: int) -> list[tuple[int, int]]:
    """``(sender position, chunk)`` for every move one way (``d``) at phase step ``k``."""
    senders = range(n - 1) if d == 1 else range(1, n)
    moves = []
    for i in senders:
        e = i if d == 1 else n - 1 - i  # distance from the line's start, this way
        if phase == "all-gather" and e >= k:  # forwards the chunk from e - k back
            moves.append((i, i - d * k))
        elif phase == "reduce-scatter" and e <= k:  # the chunk n-1-k+e ahead
            moves.append((i, i + d * (n - 1 - k)))
    return moves


def line_steps(
    kind: str,
    members: Sequence[Coord],
    *,
    buffer_bytes: float,
    prefix: str,
    after: tuple[str, ...],
    group: int = 0,
    start_s: float = 0.0,
) -> Steps:
    """``bidir_line`` over ``members`` in this order (see the module doc)."""
    n = len(members)
    out = Steps()
    chunk_bytes = buffer_bytes / n
    phases = _phases(kind, n)
    for step, (phase, k) in enumerate(phases):
        for d, tag, part in ((1, "r", 0), (-1, "l", 1)):
            for i, chunk in _line_moves(phase, n, k, d):
                fid = f"{prefix}/{tag}/s{step}/{i}"
                if step == 0:
                    deps = after
                else:
                    # The flow that brought this chunk to i, and i's own last
                    # send this way; the first all-gather step of an
                    # all-reduce waits for both halves of i's reduced chunk.
                    wanted = [(tag, i - d), (tag, i)]
                    if phase == "all-gather" and k == 0:
                        wanted += [("r", i - 1), ("l", i + 1)]
                    ids = [f"{prefix}/{t}/s{step - 1}/{j}" for t, j in wanted]
                    deps = tuple(dict.fromkeys(x for x in ids if x in out.roles))
                role = FlowRole(group, phase, step, chunk, part)
                out.add(Flow(fid, members[i], members[i + d], chunk_bytes, start_s, deps), role)
    out.finals.extend(f.id for f in out.flows if out.roles[f.id].step == len(phases) - 1)
    return out


def pairwise_steps(
    members: Sequence[Coord],
    *,
    buffer_bytes: float,
    prefix: str,
    after: tuple[str, ...],
    group: int = 0,
    start_s: float = 0.0,
) -> Steps:
    """``pairwise`` all-to-all: ``B/n`` from every member to every other, all at once."""
    n = len(members)
    out = Steps()
    for i in range(n):
        for j in range(n):
            if i != j:
                flow = Flow(
                    f"{prefix}/{i}->{j}", members[i], members[j], buffer_bytes / n, start_s, after
                )
                out.add(flow, FlowRole(group, "all-to-all", 0, j, i))
    out.finals.extend(out.roles)
    return out
