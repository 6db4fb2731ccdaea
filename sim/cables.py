"""Which directed links the engine shares bandwidth over: parallel cables pooled.

On a wrapped dimension of length 2 the two chips are joined by two cables,
the plain one and the wrap one (:func:`sim.topology.make_slice` builds both),
so each direction has two parallel directed links. A route names one of them
(the tie rule of :mod:`sim.routing`: the positive way), but a physical 2-ring
would spread traffic over both. The engine therefore shares bandwidth over
*channels*: one channel per directed link, except that the parallel links of
one direction form one channel of their summed bandwidth. A flow crossing the
pair uses both cables, each direction of each cable carries half of the
channel's bytes, and no directed link sits idle.

>>> from sim.topology import make_slice
>>> ring2 = make_slice([2], wraparound=True, link_bandwidth_bytes_per_s=1.0, hop_latency_s=0.0)
>>> c = channels(ring2)
>>> c.channel_of, c.capacity_bytes_per_s, c.cables
((0, 0, 1, 1), (2.0, 2.0), (2, 2))
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.topology import Slice

__all__ = ["Channels", "channels"]


@dataclass(frozen=True)
class Channels:
    """``channel_of[k]``: the channel of directed link ``k`` of the slice.

    ``capacity_bytes_per_s[c]`` is the summed one-way bandwidth of channel
    ``c``'s links and ``cables[c]`` how many links it pools.
    """

    channel_of: tuple[int, ...]
    capacity_bytes_per_s: tuple[float, ...]
    cables: tuple[int, ...]


def channels(slice_: Slice) -> Channels:
    """Pool the parallel directed links of ``slice_`` (same src, dst and direction)."""
    cached = slice_._cache.get("channels")
    if isinstance(cached, Channels):
        return cached
    bandwidth = slice_.link_bandwidth_bytes_per_s
    first: dict[tuple[tuple[int, ...], tuple[int, ...]], int] = {}
    channel_of: list[int] = []
    capacity: list[float] = []
    cables: list[int] = []
    for link in slice_.links:
        pair = (link.src, link.dst)
        c = first.get(pair)
        if c is None:
            c = first[pair] = len(capacity)
            capacity.append(0.0)
            cables.append(0)
        channel_of.append(c)
        capacity[c] += bandwidth
        cables[c] += 1
    result = Channels(tuple(channel_of), tuple(capacity), tuple(cables))
    slice_._cache["channels"] = result
    return result
