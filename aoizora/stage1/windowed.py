"""XLA's windowed einsum: which all-gathered dots the SPMD partitioner turns into a loop.

When one operand of a dot must be all-gathered while the other operand and the
result are sharded over every device on the same dimensions, XLA's SPMD dot
handler may skip the all-gather and emit a *windowed einsum* instead: a loop that
passes the gathered operand's shards around a ring with collective-permutes and
multiplies each shard as it arrives (openxla/xla ``xla/service/spmd/dot_handler.cc``,
``GetWindowedEinsumConfiguration``; the compiled program names the loop
``windowed_dot_general_body_ag``). Shardy's ``sdy-reshard-to-collectives`` keeps
the all-gather, so Stage 1 applies XLA's rule itself:

* **Shape rule** (the ``_ag`` cases of ``GetWindowedEinsumConfiguration``): the
  gathered operand, before the gather, is split over all ``n`` devices, only on
  its contracting dimensions or only on its non-contracting ones; the other
  operand is split over all ``n`` devices on its non-contracting dimensions only,
  and the result carries exactly that sharding.
* **Cost rule** (``disable_windowed_einsum`` there): with ``c`` the dot's compute
  time and ``g`` the all-gather's time, XLA keeps the loop unless
  ``max(c, g) + 2 g / n >= c + g`` -- the loop's extra permute must not cost more
  than the overlap saves. Stage 1 prices ``c`` and ``g`` with its own kernel and
  collective times (:mod:`aoizora.stage1.q1`).

Checked with one-dot programs compiled for v5e:2x4 (x ``[2, S, K]`` split over the
8 devices on ``S``, the weight ``[K, F]`` split on either dimension): a 1536 x 1536
weight is windowed at S = 8192 and not at S = 1024; a 64 x 1536 weight at S = 4096
and not at 1024 -- the compute, not a size threshold, decides, as the cost rule says.

**The loop** (read from the compiled 1.3B Wan step, 8 devices): the ring runs both
ways, so each iteration moves ``2`` shards per direction (four permutes of
``W / n``) and runs two partial dots of ``2 / n`` of the FLOPs each; ``n / 4``
iterations. A dot windowed on the contracting dimension accumulates the whole
output every time (first partial dot: read ``X``, write ``O``; second: read ``X``,
the first's ``O`` and the accumulator, write ``O``); one windowed on a
non-contracting dimension writes its ``2 / n`` slice of the output and copies it
into place (``X + 6 O / n`` per partial dot). ``X`` is the other operand's local
bytes, ``O`` the output's, as :mod:`aoizora.hlo.compute` counts the compiled
kernels. One more shard moves before the loop (``(n + 1) / n`` of the gathered bytes
in all). Against the compiled Wan steps these formulas are exact: 1.3B 480p
``data1.fsdp1.context8.tensor1/maxdiffusion/gather_kv`` on v5e:2x4 (2 trips; loop
HBM 107.61 GB per step on both sides, permutes 2.814 vs 2.816 GB) and 14B 720p
``data1.fsdp1.context16.tensor1/maxdiffusion/gather_kv`` on v5e:4x4 (4 trips;
775.23 vs 775.22 GB, 25.414 vs 25.417 GB).

Not modelled (``docs/stage1.md``): at ``n = 4`` libtpu unrolls the loop into another
form (Stage 1 prices it as one trip of the loop above); XLA also windows *within
device groups* after splitting on another dimension (e.g. ``data2`` meshes, or
``tensor`` > 1), which the shape rule above, over every device, does not see; and
the reduce-scatter form (``windowed_dot_general_body_rs``). Only ``n`` divisible by
4 is windowed here.

>>> from sim.compute import Matmul
>>> w = WindowedDot(gathered=1, at_contracting=True, partitions=8, other_bytes=10,
...                 gathered_bytes=8, out_bytes=100, matmul=Matmul(1, 4, 10, 10))
>>> w.iterations, w.permute_bytes, [(s.flops, s.hbm_bytes) for s in w.stages()]
(2, 1, [(200.0, 112), (200.0, 312)])
>>> keeps_window(compute_s=4.0, gather_s=1.0, partitions=8)  # compute hides the ring
True
>>> keeps_window(compute_s=0.1, gather_s=1.0, partitions=8)  # a tiny dot: plain gather
False
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from aoizora.stage1.program import Op, Sharding
from sim.compute import Matmul, Work

__all__ = ["DotTimes", "WindowedDot", "keeps_window", "window_shape"]


@dataclass(frozen=True)
class DotTimes:
    """How Stage 1 prices the two sides of XLA's cost rule on one chip.

    ``compute_s(work)`` is one kernel's time (the compute model), ``gather_s(group_size,
    bytes_per_device)`` one all-gather's (its output bytes per device).
    """

    compute_s: Callable[[Work], float]
    gather_s: Callable[[int, float], float]


@dataclass(frozen=True)
class WindowedDot:
    """A dot XLA runs as a windowed-einsum loop (module docstring), per device.

    ``gathered`` is the operand the loop passes around (0 = lhs, 1 = rhs);
    ``gathered_bytes`` its bytes once gathered, ``other_bytes`` the other
    operand's, ``out_bytes`` the result's; ``matmul`` the whole dot on one device.
    """

    gathered: int
    at_contracting: bool
    partitions: int
    other_bytes: int
    gathered_bytes: int
    out_bytes: int
    matmul: Matmul

    @property
    def flops(self) -> float:
        """The whole dot's FLOPs on one device."""
        return self.matmul.flops

    @property
    def work(self) -> Work:
        """The dot as one kernel: both operands read, the result written."""
        nbytes = self.other_bytes + self.gathered_bytes + self.out_bytes
        return Work(matmuls=(self.matmul,), hbm_bytes=nbytes)

    @property
    def iterations(self) -> int:
        """Loop trips: two shards each way per trip."""
        return self.partitions // 4

    @property
    def permute_bytes(self) -> int:
        """One shard of the gathered operand: the buffer of each of the loop's permutes."""
        return self.gathered_bytes // self.partitions

    def stages(self) -> list[Work]:
        """The two partial dots of one iteration: ``2 / n`` of the dot each, and their bytes."""
        n, x, o = self.partitions, self.other_bytes, self.out_bytes
        shards = 2 * self.gathered_bytes // n
        mm = self.matmul
        part_mm = (Matmul(mm.batch * 2 / n, mm.m, mm.k, mm.n),)
        if self.at_contracting:
            first, second = x + o + shards, x + 3 * o + shards
            return [Work(part_mm, hbm_bytes=first), Work(part_mm, hbm_bytes=second)]
        part = x + 6 * o // n + shards
        return [Work(part_mm, hbm_bytes=part), Work(part_mm, hbm_bytes=part)]


def keeps_window(*, compute_s: float, gather_s: float, partitions: int) -> bool:
    """XLA's cost rule: keep the loop unless ``max(c, g) + 2 g / n >= c + g``."""
    if gather_s <= 0.0 or partitions < 4 or partitions % 4:
        return False
    extra_s = 2.0 * gather_s / partitions
    return max(compute_s, gather_s) + extra_s < compute_s + gather_s


def window_shape(
    op: Op,
    *,
    sharding: Callable[[int], Sharding],
    gathered_from: Callable[[int], int | None],
    num_devices: int,
) -> tuple[int, bool] | None:
    """The shape rule: ``(gathered operand, windowed on contracting dims)`` or None.

    ``sharding(v)`` is a value's sharding; ``gathered_from(v)`` the value an
    ``sdy.all_gather`` made ``v`` from (None when ``v`` is not gathered).
    """
    if op.name != "stablehlo.dot_general" or len(op.operands) != 2 or num_devices < 4:
        return None
    contracting = (op.contracting_dims, op.rhs_contracting_dims)
    batch = (op.lhs_batch_dims, op.rhs_batch_dims)
    free = [
        [d for d in range(len(sharding(v).dims)) if d not in contracting[i] and d not in batch[i]]
        for i, v in enumerate(op.operands)
    ]
    for g in (1, 0):  # XLA tries the rhs first
        source = gathered_from(op.operands[g])
        if source is None or sharding(source).num_shards != num_devices:
            continue
        split = {d for d, axes in enumerate(sharding(source).dims) if axes}
        on_contracting = split <= set(contracting[g])
        if split & set(batch[g]) or not (on_contracting or split <= set(free[g])):
            continue
        other = 1 - g
        # Result dimensions: batch, then the lhs free dimensions, then the rhs free ones.
        start = len(batch[0]) + (len(free[0]) if other == 1 else 0)
        out_dims = sharding(op.results[0]).dims[start : start + len(free[other])]
        mine = [sharding(op.operands[other]).dims[d] for d in free[other]]
        # Split over every device on its free dimensions only, exactly as the result is.
        on_free = math.prod(a.size for axes in mine for a in axes)
        if on_free == num_devices and mine == list(out_dims):
            return g, on_contracting
    return None
