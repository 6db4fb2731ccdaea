"""Max-min fair rates of a whole problem, two ways: the textbook and the vectorised.

The engine keeps its allocation between events and updates only what a change
reaches (:mod:`sim.sharing`); these solvers answer a problem from scratch:

- :func:`progressive_filling`: the textbook algorithm in plain Python --
  repeatedly saturate the link with the smallest fair share ``remaining
  capacity / unfrozen flows``, freezing its flows at that share (a heap keeps
  it at ``O(pairs * log(links))``; ties go to the smaller link id);
- :func:`max_min_rates`: the same allocation with numpy, freezing every local
  bottleneck per round; :mod:`sim.sharing` uses it for large batches of
  simultaneous arrivals and departures (a collective step);
- :func:`saturation_level`: the level at which one link fills when some of its
  flows are capped by other links -- the equation every link of an
  incremental update solves.

>>> progressive_filling({0: (0,), 1: (0, 1)}, {0: 1.0, 1: 10.0})
{0: 0.5, 1: 0.5}
>>> saturation_level([0.25, 0.5], new_flows=1, capacity=1.0)
0.375
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

__all__ = ["max_min_rates", "progressive_filling", "saturation_level"]

# Links whose fair share is within this relative distance of the bottleneck
# share saturate in the same progressive-filling round (float noise only).
_SHARE_REL_TOL = 1e-9


def progressive_filling(
    links_of: Mapping[int, Sequence[int]],
    residual_capacity: Mapping[int, float],
    *,
    users: Mapping[int, Sequence[int]] | None = None,
) -> dict[int, float]:
    """Max-min fair rates of the flows ``links_of`` (flow -> its link ids).

    ``residual_capacity`` gives the capacity of every link any flow crosses
    (bytes/s). Every flow must cross at least one link. ``users`` (link -> the
    flows of ``links_of`` crossing it, each once; links without flows are
    ignored) may be passed when the
    caller already has it. The result maps each flow to its rate, in the
    order of ``links_of``. Ties between equal shares go to the smaller link
    id, so the result is deterministic.

    >>> progressive_filling({0: (0,), 1: (0,), 2: (0, 1)}, {0: 3.0, 1: 0.5})
    {0: 1.25, 1: 1.25, 2: 0.5}
    """
    if users is None:
        built: dict[int, list[int]] = {}
        for f, links in links_of.items():
            for lk in links:
                got = built.get(lk)
                if got is None:
                    built[lk] = [f]
                else:
                    got.append(f)
        users = built
    residual = {lk: float(residual_capacity[lk]) for lk in users}
    count = {lk: len(fs) for lk, fs in users.items()}
    heap = [(residual[lk] / n, lk) for lk, n in count.items() if n]
    heapq.heapify(heap)
    rate: dict[int, float] = {}
    push = heapq.heappush
    pop = heapq.heappop
    while heap:
        share, lk = pop(heap)
        n = count[lk]
        # Entries are pushed whenever a link's share changes; only the one
        # matching the link's current state is live.
        if n == 0 or share != residual[lk] / n:
            continue
        if share < 0.0:  # float dust on a link that is already full
            share = 0.0
        for f in users[lk]:
            if f in rate:
                continue
            rate[f] = share
            for m in links_of[f]:
                if m == lk:
                    continue
                residual[m] -= share
                left = count[m] - 1
                count[m] = left
                if left:
                    push(heap, (residual[m] / left, m))
        count[lk] = 0
    return {f: rate[f] for f in links_of}


def saturation_level(old_rates: Iterable[float], *, new_flows: int, capacity: float) -> float:
    """The level ``lambda`` at which a link saturates once ``new_flows`` join it.

    Solves ``sum(min(r, lambda) for r in old_rates) + new_flows * lambda ==
    capacity`` (``new_flows >= 1``; the old rates must fit in ``capacity``):
    the fill level at which the link would freeze the arriving flows if
    nothing else changed first.

    >>> saturation_level([], new_flows=2, capacity=1.0)
    0.5
    >>> saturation_level([0.1, 0.8], new_flows=1, capacity=1.0)
    0.45
    """
    rates = sorted(old_rates)
    filled = 0.0
    unfrozen = len(rates) + new_flows
    for r in rates:
        level = (capacity - filled) / unfrozen
        if level <= r:
            return level
        filled += r
        unfrozen -= 1
    return (capacity - filled) / unfrozen


def max_min_rates(
    pair_flow: np.ndarray,
    pair_link: np.ndarray,
    num_flows: int,
    capacity_bytes_per_s: np.ndarray,
) -> np.ndarray:
    """Max-min fair rates by progressive filling.

    Flow ``pair_flow[k]`` crosses link ``pair_link[k]``; every flow must cross
    at least one link. Progressive filling raises all unfrozen rates together;
    a link saturates when its fair share ``remaining capacity / unfrozen flows
    on it`` is reached, freezing the flows crossing it. Each round here
    freezes the flows of every *local* bottleneck (a link whose share is the
    smallest among the links of all flows crossing it), which includes the
    global one, and removes their rates from their links.

    >>> import numpy as np
    >>> max_min_rates(np.array([0, 1, 1]), np.array([0, 0, 1]), 2, np.array([1.0, 10.0]))
    array([0.5, 0.5])
    >>> max_min_rates(np.array([0, 1, 2, 2]), np.array([0, 0, 1, 0]), 3,
    ...               np.array([3.0, 0.5]))
    array([1.25, 1.25, 0.5 ])
    """
    import numpy as np  # here, not at import: sim's command line starts without it

    rate = np.zeros(num_flows)
    if num_flows == 0:
        return rate
    pl = np.asarray(pair_link)
    pf = np.asarray(pair_flow)
    m = capacity_bytes_per_s.size
    cap = np.array(capacity_bytes_per_s, dtype=float)
    count = np.bincount(pl, minlength=m).astype(float)
    share = np.empty(m)
    for _ in range(num_flows):  # each round freezes at least one flow
        if pf.size == 0:
            break
        share.fill(np.inf)
        np.divide(cap, count, out=share, where=count > 0)
        np.maximum(share, 0.0, out=share)
        # A flow's tightest link, and for each link the tightest link of any
        # flow crossing it. A link whose share is that minimum is a local
        # bottleneck: shares only grow while filling, so its flows freeze at
        # its share exactly as the one-link-at-a-time algorithm would freeze
        # them. Freezing every local bottleneck per round gives the same
        # allocation in far fewer rounds.
        flow_min = np.full(num_flows, np.inf)
        np.minimum.at(flow_min, pf, share[pl])
        link_min = np.full(m, np.inf)
        np.minimum.at(link_min, pl, flow_min[pf])
        local = (count > 0) & (share <= link_min * (1.0 + _SHARE_REL_TOL))
        frozen = np.zeros(num_flows, dtype=bool)
        frozen[pf[local[pl]]] = True
        rate[frozen] = flow_min[frozen]
        frozen_pairs = frozen[pf]
        gone_links = pl[frozen_pairs]
        cap -= np.bincount(gone_links, weights=rate[pf[frozen_pairs]], minlength=m)
        count -= np.bincount(gone_links, minlength=m)
        keep = ~frozen_pairs
        pf = pf[keep]
        pl = pl[keep]
    return rate
