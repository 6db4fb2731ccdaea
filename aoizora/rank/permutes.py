"""A collective-permute's lower bound under many placements at once.

:func:`permute_lower_bounds` is :func:`aoizora.rank.bound.plan_lower_bound` of a
permute's flows (:func:`aoizora.replay.collective_plan`: the chip's collective
overhead, then one flow per pair, all released together) for a whole batch of
placements of the same pairs, in numpy: every route is the simulator's
dimension-ordered one (:mod:`sim.routing`: each dimension in turn, the shorter
way round a ring, ties the positive way), expanded hop by hop into link ids with
:func:`sim.routing.link_table`, and the two halves of the bound follow:

- **flow by flow**: overhead + hops x hop latency + bytes / the flow's slowest link;
- **link by link**: the first flow on a link starts draining after the overhead and
  its own route's hop latencies, then the link moves every byte crossing it
  (``copies`` times them for twins, see :class:`~aoizora.rank.bound.TimelineBound`)
  at its capacity.

A search node whose pending axis's order decides a permute's pairs bounds every
order at once with it (:meth:`aoizora.rank.pending.PendingOrders.values`),
where one :func:`~aoizora.rank.bound.collective_lower_bound` per order cost what
bounding the leaves does. ``tests/aoizora/test_permutes.py`` holds the two equal.

>>> import numpy as np
>>> from sim.topology import load_slice
>>> from aoizora.rank.bound import LinkCapacities
>>> net = LinkCapacities(load_slice("v5e:2x2"))
>>> src = np.array([[[0, 0], [0, 1]], [[0, 0], [1, 0]]])  # 2 placements x 2 pairs x dims
>>> dst = np.array([[[1, 0], [1, 1]], [[1, 1], [1, 1]]])
>>> got = permute_lower_bounds(src, dst, size_bytes=4.5e6, net=net)  # placements x copies
>>> [round(float(t) * 1e6, 3) for t in got[:, 0]]
[101.0, 201.0]

(1 us of hop latency and 4.5 MB at 45 GB/s a pair; in the second both cross the link
``(1, 0) -> (1, 1)`` -- x first, then y -- which carries twice the bytes from the
moment the shorter flow drains, 1 us in.)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from aoizora.errors import PlacementError
from aoizora.rank.bound import LinkCapacities
from sim.routing import check_order, link_table

__all__ = ["permute_lower_bounds"]

# Placements bounded per numpy pass: keeps the (placements x links) arrays small.
_CHUNK = 512


def permute_lower_bounds(
    src: np.ndarray,
    dst: np.ndarray,
    *,
    size_bytes: float,
    net: LinkCapacities,
    copies: Sequence[int] = (1,),
) -> np.ndarray:
    """The permute's bound under each placement (placements x ``len(copies)``).

    ``src`` and ``dst`` hold the chip coordinates of every pair's source and target
    (placements x pairs x chip dims); ``size_bytes`` is what each pair sends.
    Column ``k`` bounds ``copies[k]`` identical copies released together.
    """
    if src.shape != dst.shape or src.ndim != 3:
        raise PlacementError(
            f"permute ends src {src.shape} and dst {dst.shape} must share one shape "
            "(placements, pairs, dims), e.g. (4, 256, 2)"
        )
    out = np.empty((src.shape[0], len(copies)), dtype=np.float64)
    for lo in range(0, src.shape[0], _CHUNK):
        out[lo : lo + _CHUNK] = _bounds(
            src[lo : lo + _CHUNK], dst[lo : lo + _CHUNK], float(size_bytes), net, tuple(copies)
        )
    return out


def _routes(
    src: np.ndarray, dst: np.ndarray, net: LinkCapacities
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every hop of every flow: (link ids, flow numbers), and each flow's hop count.

    Flow ``f`` is pair ``f % pairs`` of placement ``f // pairs``; the hops of one
    dimension follow :func:`sim.routing.route` (``_segment``: the link leaving the
    chip reached so far, in the direction the shorter way takes).
    """
    slice_ = net.slice
    table_list, strides_t = link_table(slice_)
    table = np.asarray(table_list, dtype=np.int64)
    strides = np.asarray(strides_t, dtype=np.int64)
    dims = slice_.num_dims
    flows = np.arange(src.shape[0] * src.shape[1], dtype=np.int64).reshape(src.shape[:2])
    cur = src.astype(np.int64, copy=True)
    hops = np.zeros(src.shape[:2], dtype=np.int64)
    links: list[np.ndarray] = []
    owners: list[np.ndarray] = []
    for d in check_order(slice_, None):
        n, wrap = slice_.shape[d], slice_.wraparound[d]
        a, b = cur[..., d], dst[..., d].astype(np.int64)
        if wrap:
            forward = (b - a) % n
            plus = forward <= n - forward  # the tie rule: half-way goes the positive way
            count = np.where(plus, forward, n - forward)
        else:
            plus = b > a
            count = np.abs(b - a)
        # The link leaving chip c along d: table[(c * dims + d) * 2 + side]; a hop moves
        # c by +-strides[d] (wrapping round the ring), so each flow's ids are one
        # arithmetic walk from its first.
        chip = sum(cur[..., k] * int(strides[k]) for k in range(dims) if k != d)
        side = np.where(plus, 0, 1)
        walk = (chip * dims + d) * 2 + side  # the id index at coordinate 0 along d
        unit = dims * 2 * int(strides[d])  # what one step along d adds to the index
        step = np.where(plus, 1, -1)
        for j in range(int(count.max(initial=0))):
            on = count > j
            pos = (a[on] + step[on] * j) % n
            links.append(table[walk[on] + pos * unit])
            owners.append(flows[on])
        hops += count
        cur[..., d] = b
    empty = np.zeros(0, dtype=np.int64)
    return (
        np.concatenate(links) if links else empty,
        np.concatenate(owners) if owners else empty,
        hops.ravel(),
    )


def _bounds(
    src: np.ndarray,
    dst: np.ndarray,
    size: float,
    net: LinkCapacities,
    copies: tuple[int, ...],
) -> np.ndarray:
    num, pairs = src.shape[:2]
    overhead = net.slice.chip.collective_overhead_s
    latency = net.hop_latency_s
    capacity = np.asarray(net.capacity, dtype=np.float64)
    num_links = capacity.size
    link, flow, hops = _routes(src, dst, net)
    # Flow by flow: a flow with no hop finishes when it is released.
    slowest = np.full(num * pairs, np.inf)
    np.minimum.at(slowest, flow, capacity[link])
    finish = (overhead + hops * latency) + np.where(hops > 0, size / slowest, 0.0)
    done = finish.reshape(num, pairs).max(axis=1, initial=overhead if pairs == 0 else 0.0)
    # Link by link, per placement: bytes on each link and its first drain.
    cell = (flow // pairs) * num_links + link
    load = np.bincount(cell, minlength=num * num_links).astype(np.float64) * size
    first = np.full(num * num_links, np.inf)
    np.minimum.at(first, cell, overhead + hops[flow] * latency)
    used = load > 0
    out = np.empty((num, len(copies)), dtype=np.float64)
    for k, c in enumerate(copies):
        term = np.where(used, first + c * load / np.tile(capacity, num), -np.inf)
        out[:, k] = np.maximum(done, term.reshape(num, num_links).max(axis=1, initial=-np.inf))
    return out
