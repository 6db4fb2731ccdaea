"""How a replica group lies on the slice, and the ring or line order that fits it.

The ``auto`` algorithm of :mod:`sim.collectives` asks :func:`group_layout`
for every group: which named algorithm to run and in which member order.
The rule (evidence and measurements: docs/simulator.md, "Line or ring"):

- **One axis** (members differ in one coordinate only), sorted along it:
  - on a wrapped axis where every cyclic gap between consecutive members is
    at most half the axis (so every ring hop, the closing one included, goes
    forward round the ring): ``bidir_ring`` in that cyclic order;
  - otherwise -- no wrap-around, or an arc of a ring: ``bidir_ring`` in the
    *folded* order ``0, 2, 4, ..., 5, 3, 1`` (:func:`folded`), where every ring
    hop crosses at most two links and each link carries one ring flow per
    direction and step. A ring in replica-group order on a line would send
    its closing hop back over every link, and every step would wait for it.
- **A box** (every combination of the members' per-axis coordinates is a
  member; 2 or 3 axes): ``bidir_ring`` round a Hamiltonian cycle when one
  exists (some side even); otherwise round a boustrophedon path, folded.
- **Anything else**: the given order, ``bidir_ring`` (no better rule known).
- **Several devices of one chip** (tpu7x): the chips' layout, each chip's
  devices consecutive (the hop between them is 0-hop).

Every choice is ``bidir_ring`` in some order: the measured rows favour the
folded ring over the ``bidir_line`` algorithm only slightly, and over the
group order clearly (docs/simulator.md).

Orders are positions into the group as given. Coordinates are trusted to be
on the slice (:mod:`sim.collectives` checks them).

>>> from sim.topology import load_slice
>>> s = load_slice("v5e:2x4")
>>> group_layout([(0, 3), (0, 0), (0, 2), (0, 1)], s)  # folded: (0,0) (0,2) (0,3) (0,1)
GroupLayout(algorithm='bidir_ring', order=(1, 2, 0, 3))
>>> group_layout([(0, 0), (1, 0), (0, 1), (1, 1)], s)
GroupLayout(algorithm='bidir_ring', order=(0, 2, 3, 1))
>>> group_layout([(x, 5) for x in range(16)], load_slice("v5e:16x16")).algorithm
'bidir_ring'

A chip that hosts several devices (tpu7x) appears once per device; its devices
stay together:

>>> group_layout([(0, 0, 0), (1, 0, 0), (0, 0, 0), (1, 0, 0)], load_slice("tpu7x:2x2x1"))
GroupLayout(algorithm='bidir_ring', order=(0, 2, 1, 3))
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from sim.coords import Coord
from sim.topology import Slice

__all__ = ["GroupLayout", "folded", "group_layout", "snake_cycle", "snake_path"]


@dataclass(frozen=True)
class GroupLayout:
    """The algorithm to run over one group and its member order (positions in the group)."""

    algorithm: str
    order: tuple[int, ...]


def _varying_axes(members: Sequence[Coord]) -> list[int]:
    return [d for d in range(len(members[0])) if len({m[d] for m in members}) > 1]


def folded(path: Sequence[int]) -> tuple[int, ...]:
    """A ring through a path that never jumps more than two steps: evens out, odds back.

    >>> folded([10, 11, 12, 13, 14, 15])
    (10, 12, 14, 15, 13, 11)
    """
    return (*path[::2], *path[1::2][::-1])


def _one_axis(members: Sequence[Coord], axis: int, slice_: Slice) -> GroupLayout:
    order = tuple(sorted(range(len(members)), key=lambda i: members[i][axis]))
    if slice_.wraparound[axis]:
        length = slice_.shape[axis]
        ps = [members[i][axis] for i in order]
        gaps = [b - a for a, b in itertools.pairwise(ps)] + [length - ps[-1] + ps[0]]
        if max(gaps) * 2 <= length:
            return GroupLayout("bidir_ring", order)
    return GroupLayout("bidir_ring", folded(order))


def snake_path(sides: Sequence[int]) -> list[tuple[int, ...]]:
    """A boustrophedon through a box of ``sides``: consecutive cells are neighbours.

    >>> snake_path([2, 3])
    [(0, 0), (1, 0), (1, 1), (0, 1), (0, 2), (1, 2)]
    """
    if len(sides) == 1:
        return [(i,) for i in range(sides[0])]
    inner = snake_path(sides[:-1])
    out: list[tuple[int, ...]] = []
    for k in range(sides[-1]):
        run = inner if k % 2 == 0 else inner[::-1]
        out.extend((*cell, k) for cell in run)
    return out


def snake_cycle(sides: Sequence[int]) -> list[tuple[int, ...]] | None:
    """A Hamiltonian cycle through a box of ``sides`` (all >= 2), or None if none exists.

    The box is seen as rows (axis 0) by columns (a snake through the other
    axes); with an even number of rows: along row 0, back and forth through
    columns 1.. of the other rows, then up column 0 to the start. A box with
    every side odd has an odd number of cells and no cycle (it is bipartite).

    >>> snake_cycle([2, 2])
    [(0, 0), (0, 1), (1, 1), (1, 0)]
    >>> snake_cycle([3, 3]) is None
    True
    """
    if len(sides) < 2 or min(sides) < 2 or math.prod(sides) % 2:
        return None
    rows, cols = sides[0], snake_path(sides[1:])
    if rows % 2:
        # Put an even side first: rotate the axes, build, rotate back.
        even = next(d for d, n in enumerate(sides) if n % 2 == 0)
        perm = [even, *[d for d in range(len(sides)) if d != even]]
        rotated = snake_cycle([sides[d] for d in perm])
        assert rotated is not None  # the first side is even now
        back = [perm.index(d) for d in range(len(sides))]
        return [tuple(cell[back[d]] for d in range(len(sides))) for cell in rotated]
    grid = [(0, c) for c in range(len(cols))]
    for r in range(1, rows):
        span = range(len(cols) - 1, 0, -1) if r % 2 else range(1, len(cols))
        grid.extend((r, c) for c in span)
    grid.extend((r, 0) for r in range(rows - 1, 0, -1))
    return [(r, *cols[c]) for r, c in grid]


def _box(members: Sequence[Coord], axes: list[int]) -> GroupLayout | None:
    values = [sorted({m[d] for m in members}) for d in axes]
    if math.prod(len(v) for v in values) != len(members):
        return None
    where = {tuple(m[d] for d in axes): i for i, m in enumerate(members)}
    if len(where) != len(members):
        return None
    sides = [len(v) for v in values]
    cycle = snake_cycle(sides)
    cells = cycle if cycle is not None else snake_path(sides)
    try:
        order = tuple(where[tuple(values[k][c] for k, c in enumerate(cell))] for cell in cells)
    except KeyError:
        return None  # the same varying axes, but not every combination is a member
    return GroupLayout("bidir_ring", order if cycle is not None else folded(order))


def group_layout(members: Sequence[Coord], slice_: Slice) -> GroupLayout:
    """The algorithm and member order for an all-gather/reduce-scatter/all-reduce group."""
    n = len(members)
    if n <= 1:
        return GroupLayout("bidir_ring", tuple(range(n)))
    chips = list(dict.fromkeys(members))
    if len(chips) < n:
        # Devices of one chip (a tpu7x chip's two cores) sit next to each other in the
        # ring, their hop 0-hop; the chips run in the order their own layout calls for.
        outer = group_layout(chips, slice_)
        at = {c: [i for i, m in enumerate(members) if m == c] for c in chips}
        return GroupLayout(outer.algorithm, tuple(i for k in outer.order for i in at[chips[k]]))
    axes = _varying_axes(members)
    if len(axes) == 1:
        return _one_axis(members, axes[0], slice_)
    box = _box(members, axes)
    if box is not None:
        return box
    return GroupLayout("bidir_ring", tuple(range(n)))
