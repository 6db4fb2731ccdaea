"""The cost of work on one chip and of one uncontended collective: the formulas Q1 and Q2 share.

Stage 1 (``aoizora.stage1``, before compiling) and the replay of a compiled step
(``aoizora.replay``) price the same classes of work with these functions, so the
two scores differ only in what the compiler changes (fusion, the schedule, the
real collectives and their placement):

* :func:`roofline_s` -- one kernel takes ``max(flops / peak, hbm_bytes / bandwidth)``
  (Williams, Waterman & Patterson, "Roofline", CACM 2009; the TPU form in the
  jax-ml scaling-book "roofline" chapter). Kernels run back to back.
* :func:`matmul_flops`, :func:`conv_flops` -- ``2`` FLOPs per multiply-add, a
  convolution counting only the taps that meet real input
  (:func:`window_positions`), as XLA's ``HloCostAnalysis`` counts
  ``HandleDot``/``HandleConvolution``; :func:`conv_matmul` -- the shape a convolution
  has on the MXU (:class:`sim.compute.Matmul`).
* :func:`attention_flops` -- a fused attention kernel (FlashAttention, Dao et al.
  2022, sec. 3.1): ``2*S_q*S_kv*D`` for ``Q.K^T`` plus ``2*S_q*S_kv*D_v`` for
  ``P.V`` per (batch x head) index, no mask sparsity; it runs at the chip's peak
  (:func:`roofline_s`), the one efficiency assumption, stated here once.
* :func:`collective_time_s` -- one collective over a group of ``n`` chips laid out
  on a ring (a cycle of neighbour links) or a line, alone on its links, for the
  algorithms the simulator runs by default (:mod:`sim.collectives`:
  bidirectional ring for all-gather / reduce-scatter / all-reduce, pairwise
  all-to-all, direct permute). On a ring these are the simulator's own times
  exactly (``tests/sim/test_costs.py`` replays them); on a line they are the
  no-wrap-around ideal of the scaling-book (an axis of ``n`` chips:
  ``(n-1) * (V/n) / W`` per all-gather).
* :func:`best_box` -- the best box of ``n`` chips a slice offers a group, and
  whether a ring fits in it: what a placement-oblivious estimate may assume.

>>> from sim.topology import load_chip, load_slice
>>> round(roofline_s(1.97e12, 8.1e8, chip=load_chip("v5e")) * 1e3, 3)  # compute-bound: 10 ms
10.0
>>> best_box(8, load_slice("v5e:2x4"))
GroupBox(shape=(2, 4), wraparound=(False, False), ring=True)
>>> t = collective_time_s("all-gather", group_size=8, bytes_per_device=8e6, ring=True,
...                       link_bandwidth_bytes_per_s=45e9, hop_latency_s=1e-6)
>>> round(t * 1e6, 2)  # 7 steps of (1 us + 8 MB / 16 / 45 GB/s)
84.78
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Protocol

from sim.compute import Matmul
from sim.errors import CollectiveError
from sim.routing import route
from sim.topology import Slice, make_slice

__all__ = [
    "COLLECTIVE_KINDS",
    "GroupBox",
    "RooflineChip",
    "all_to_all_link_load",
    "attention_flops",
    "collective_time_s",
    "conv_flops",
    "best_box",
    "matmul_flops",
    "roofline_s",
    "window_positions",
]

COLLECTIVE_KINDS = (
    "all-gather",
    "reduce-scatter",
    "all-reduce",
    "all-to-all",
    "collective-permute",
)


class RooflineChip(Protocol):
    """What :func:`roofline_s` needs (``sim.topology.Chip`` has it)."""

    @property
    def bf16_flops_per_s(self) -> float: ...
    @property
    def hbm_bandwidth_bytes_per_s(self) -> float: ...


def roofline_s(flops: float, hbm_bytes: float, *, chip: RooflineChip) -> float:
    """Time of one kernel: bound by its FLOPs at peak or its HBM traffic at full bandwidth.

    >>> from types import SimpleNamespace
    >>> c = SimpleNamespace(bf16_flops_per_s=100.0, hbm_bandwidth_bytes_per_s=10.0)
    >>> roofline_s(200.0, 10.0, chip=c), roofline_s(100.0, 50.0, chip=c)
    (2.0, 5.0)
    """
    return max(
        float(flops) / float(chip.bf16_flops_per_s),
        float(hbm_bytes) / float(chip.hbm_bandwidth_bytes_per_s),
    )


def matmul_flops(result_elements: float, contracting_elements: float) -> float:
    """``2 * result elements * contracted length`` (one multiply-add per term).

    >>> matmul_flops(8 * 4, 16)  # (8x16) @ (16x4)
    1024.0
    """
    return 2.0 * float(result_elements) * float(contracting_elements)


def window_positions(
    input_size: int,
    output_size: int,
    window_size: int,
    *,
    stride: int = 1,
    padding_low: int = 0,
    lhs_dilation: int = 1,
    rhs_dilation: int = 1,
) -> int:
    """(output index, window index) pairs of one spatial dimension that touch real input.

    A tap whose input index falls in the padding, or between the holes of a
    dilated input, multiplies a zero and costs nothing: XLA's
    ``HloCostAnalysis::HandleConvolution`` counts only the valid pairs, and so do
    we. XLA writes many dots as convolutions padded so that a window of ``n``
    taps meets the input once (``window={size=8 pad=7_7}``): one valid tap per
    output position, not eight.

    >>> window_positions(1, 8, 8, padding_low=7)  # a dot written as a padded convolution
    8
    >>> window_positions(6, 4, 3)  # a plain valid convolution: every tap counts
    12
    """
    input_limit = lhs_dilation * (input_size - 1) + 1
    valid = 0
    for k in range(window_size):
        offset = k * rhs_dilation - padding_low
        for o in range(output_size):
            i = o * stride + offset
            if 0 <= i < input_limit and i % lhs_dilation == 0:
                valid += 1
    return valid


def conv_flops(
    *, batch: int, input_features: int, output_features: int, positions: Sequence[int]
) -> float:
    """A convolution: one multiply-add per (batch, input feature, output feature, valid
    tap) -- ``positions`` are :func:`window_positions` per spatial dimension (empty for
    a convolution without spatial dimensions: a matmul). ``input_features`` is the
    kernel's input-feature size (per feature group).

    >>> conv_flops(batch=2048, input_features=1024, output_features=128, positions=(8,))
    4294967296.0
    """
    return matmul_flops(batch * output_features * math.prod(positions), input_features)


@dataclass(frozen=True)
class ConvDim:
    """One spatial dimension of a convolution: input, output and window sizes and how the
    window moves (XLA's ``window={size=.. stride=.. pad=.. lhs_dilate=.. rhs_dilate=..}``)."""

    input_size: int
    output_size: int
    window_size: int
    stride: int = 1
    padding_low: int = 0
    lhs_dilation: int = 1
    rhs_dilation: int = 1

    @property
    def slides(self) -> bool:
        """A window sliding over real input: not XLA's dot written as a convolution, whose
        window stands for a free dimension (a size-1 input padded so each window meets it
        once, or a dilated input)."""
        return (
            self.input_size > 1
            and self.lhs_dilation == 1
            and self.window_size <= (self.input_size + 2 * self.padding_low)
        )

    @property
    def contracts(self) -> bool:
        """A window that covers its whole input once (one output, no padding or
        dilation): a contraction written as a window, which the MXU accumulates with the
        input features (``blhd,hde->ble`` prints as a window over the heads)."""
        return (
            self.input_size > 1
            and self.output_size == 1
            and self.window_size == self.input_size
            and self.padding_low == 0
            and self.lhs_dilation == 1
            and self.rhs_dilation == 1
        )


def conv_matmul(
    *, batch: int, input_features: int, output_features: int, dims: Sequence[ConvDim]
) -> Matmul:
    """A convolution as MXU matmuls: for each kernel tap, every output position along the
    dimensions its window slides over (:attr:`ConvDim.slides`), times the batch, streams
    ``(positions x input features) @ (input features x output features)`` -- so the
    positions fill the MXU's free dimension, as an im2col matmul per tap would; the
    ``batch`` of the record is the valid taps per such position (only taps meeting real
    input count, :func:`window_positions`). Dimensions that do not slide stay taps of a
    batch of ``batch x i`` products. A window covering its whole input
    (:attr:`ConvDim.contracts`) joins the contraction: ``k`` = its size x the input
    features (on a v5e chip the output projection of 16 heads of 64, such a window, ran
    at 0.82 of the peak, not the 0.5 that 64-deep taps would fill; validation/README.md,
    section 10). FLOPs are :func:`conv_flops` either way.

    >>> same = (ConvDim(90, 90, 3, padding_low=1), ConvDim(160, 160, 3, padding_low=1))
    >>> mm = conv_matmul(batch=1, input_features=96, output_features=96, dims=same)
    >>> mm.m, round(mm.batch, 2), mm.flops == conv_flops(
    ...     batch=1, input_features=96, output_features=96, positions=(268, 478))
    (14400, 8.9, True)
    >>> conv_matmul(batch=8, input_features=128, output_features=64,
    ...             dims=(ConvDim(1, 8, 8, padding_low=7),))  # a dot written as a conv
    Matmul(batch=8, m=8, k=128, n=64)
    >>> conv_matmul(batch=2048, input_features=64, output_features=1024,
    ...             dims=(ConvDim(4, 4, 1), ConvDim(16, 1, 16)))  # heads x 64 -> embed
    Matmul(batch=1.0, m=8192, k=1024, n=1024)
    """
    positions = [
        window_positions(
            d.input_size, d.output_size, d.window_size, stride=d.stride,
            padding_low=d.padding_low, lhs_dilation=d.lhs_dilation,
            rhs_dilation=d.rhs_dilation,
        )
        for d in dims
    ]  # fmt: skip
    rows = math.prod(d.output_size for d in dims if d.slides)
    merged = math.prod(d.window_size for d in dims if d.contracts)
    taps = math.prod(positions) // merged  # a covering window meets its input size times
    return Matmul(
        batch=taps if rows == 1 else taps / rows,
        m=batch * rows,
        k=input_features * merged,
        n=output_features,
    )


def attention_flops(
    *, lead: float, q_length: int, kv_length: int, head_dim: int, value_dim: int
) -> float:
    """FLOPs of one attention kernel call: ``2*S_q*S_kv*(D + D_v)`` per leading index.

    ``lead`` is the product of the leading (batch x head) dimensions.

    >>> attention_flops(lead=12, q_length=4096, kv_length=4096, head_dim=128, value_dim=128)
    103079215104.0
    """
    return 2.0 * float(lead) * q_length * kv_length * (head_dim + value_dim)


@dataclass(frozen=True)
class GroupBox:
    """The box of chips a group of ``n`` occupies and whether a ring of neighbours fits."""

    shape: tuple[int, ...]
    wraparound: tuple[bool, ...]
    ring: bool


def _has_ring(shape: Sequence[int], wrap: Sequence[bool]) -> bool:
    """A cycle through every chip of the box using only neighbour links (n >= 3).

    A grid ``p x q`` (``p, q >= 2``) has a Hamiltonian cycle iff ``p*q`` is even;
    a wrapped dimension is a cycle by itself.
    """
    used = [(s, w) for s, w in zip(shape, wrap, strict=True) if s > 1]
    n = math.prod(s for s, _ in used)
    if n < 3:
        return False
    if len(used) == 1:
        return used[0][1]
    return n % 2 == 0 or any(w for _, w in used)


@cache
def _layout(n: int, shape: tuple[int, ...], wrap: tuple[bool, ...]) -> GroupBox:
    best: tuple[tuple[int, int, int], GroupBox] | None = None
    ranges = [[d for d in range(1, s + 1) if n % d == 0] for s in shape]
    for dims in itertools.product(*ranges):
        if math.prod(dims) != n:
            continue
        # A dimension wraps for the group only when the group spans all of it.
        w = tuple(bool(wr and d == s) for d, s, wr in zip(dims, shape, wrap, strict=True))
        ring = _has_ring(dims, w)
        diameter = sum((d // 2) if wr else (d - 1) for d, wr in zip(dims, w, strict=True))
        key = (0 if ring else 1, diameter, -max(dims))
        if best is None or key < best[0]:
            best = (key, GroupBox(tuple(dims), w, ring))
    if best is None:  # no box of n chips: a snake through the slice is a line
        return GroupBox((n,), (False,), False)
    return best[1]


def best_box(group_size: int, slice_: Slice) -> GroupBox:
    """The most favourable box of ``group_size`` chips in ``slice_``.

    Prefers a box with a ring, then the smallest diameter. Placement-oblivious:
    every group of a program is assumed to get its best box, without contention.

    >>> from sim.topology import load_slice
    >>> best_box(4, load_slice("v5e:4x4")), best_box(2, load_slice("v5e:4x4")).ring
    (GroupBox(shape=(2, 2), wraparound=(False, False), ring=True), False)
    """
    if group_size < 1 or group_size > slice_.num_chips:
        raise CollectiveError(
            f"a group of {group_size} chips does not fit {slice_.name} ({slice_.num_chips} chips)"
        )
    return _layout(int(group_size), tuple(slice_.shape), tuple(slice_.wraparound))


def _axis_load(size: int, wrap: bool) -> tuple[int, int]:
    """(chunks on the busiest directed link, longest route in hops) of a pairwise
    all-to-all along one axis of ``size`` chips, routed as :func:`sim.routing.route`
    routes (the shorter way round a wrapped axis, ties the positive way)."""
    if size < 2:
        return 0, 0
    if not wrap:  # the link x -> x+1 carries the (x+1) * (size-1-x) pairs across it
        return (size // 2) * ((size + 1) // 2), size - 1
    ring = make_slice([size], wraparound=[True], link_bandwidth_bytes_per_s=1.0,
                      hop_latency_s=0.0)  # fmt: skip
    load: dict[object, int] = {}
    longest = 0
    for a in range(size):
        for b in range(size):
            links = route(ring, (a,), (b,))
            longest = max(longest, len(links))
            for link in links:
                load[link] = load.get(link, 0) + 1
    return max(load.values(), default=0), longest


@cache
def all_to_all_link_load(shape: tuple[int, ...], wraparound: tuple[bool, ...]) -> tuple[int, int]:
    """(chunks on the busiest directed link, longest route in hops) of a pairwise all-to-all.

    Every chip of the box sends one chunk to every other, routed dimension by
    dimension as the simulator routes (:func:`sim.routing.route`). A route crosses a
    link of dimension ``d`` (at the other coordinates ``c``) on its ``d`` leg, when the
    dimensions routed before ``d`` are the destination's and those after are the
    source's: so the pairs crossing it are the pairs of its axis that cross it, times
    every choice of the source's earlier and the destination's later coordinates --
    the axis's load times the other dimensions' sizes. Counted per axis, not per pair:
    a 1,024-chip line or an 8x8x16 box is priced in microseconds, where routing every
    pair took minutes and gigabytes.

    >>> all_to_all_link_load((8,), (False,))  # the middle link of a line carries 4 x 4 chunks
    (16, 7)
    >>> all_to_all_link_load((4, 4), (True, True))  # each ring's busiest link, 4 rows of it
    (12, 4)
    """
    total = math.prod(shape)
    load, longest = 0, 0
    for size, wrap in zip(shape, wraparound, strict=True):
        axis_load, axis_longest = _axis_load(size, wrap)
        load = max(load, axis_load * (total // size))
        longest += axis_longest
    return load, longest


def collective_time_s(
    kind: str,
    *,
    group_size: int,
    bytes_per_device: float,
    link_bandwidth_bytes_per_s: float,
    hop_latency_s: float,
    ring: bool,
    box: tuple[tuple[int, ...], tuple[bool, ...]] | None = None,
) -> float:
    """Time of one collective over ``group_size`` chips, alone on its links.

    ``V = bytes_per_device`` in the HLO convention (all-gather: output;
    reduce-scatter: input; all-reduce, all-to-all, collective-permute: the
    buffer), ``n = group_size``, ``W`` one-way link bandwidth, ``h`` latency per hop.

    * all-gather / reduce-scatter, bidirectional ring: ``n-1`` steps, each chip
      sends ``V/(2n)`` to both neighbours: ``(n-1) * (h + V/(2n)/W)``. Two chips
      share one link both ways round: ``h + V/(2W)``. On a line (no ring):
      ``(n-1) * (V/n) / W + (n-1) * h``.
    * all-reduce: twice that (reduce-scatter then all-gather, ``2(n-1)`` steps).
    * all-to-all, pairwise: every chip sends ``V/n`` to every other at once; the
      busiest link of ``box`` (default: a line of ``n``) drains its chunks:
      ``load * (V/n) / W + h`` (the simulator's time on 2x2, 2x4, 4x4 and lines;
      the flows of longer routes finish before the busiest link drains).
    * collective-permute: a shift to a neighbour, ``V/W + h``.

    >>> kw = dict(bytes_per_device=8.0, link_bandwidth_bytes_per_s=1.0, hop_latency_s=0.0)
    >>> [collective_time_s(k, group_size=4, ring=True, **kw)
    ...  for k in ("all-gather", "all-reduce", "all-to-all", "collective-permute")]
    [3.0, 6.0, 8.0, 8.0]
    >>> collective_time_s("all-gather", group_size=4, ring=False, **kw)
    6.0
    """
    n = int(group_size)
    if kind not in COLLECTIVE_KINDS:
        raise CollectiveError(f"unknown collective {kind!r}; expected one of {COLLECTIVE_KINDS}")
    if n <= 1 or bytes_per_device <= 0:
        return 0.0
    v, w, h = float(bytes_per_device), float(link_bandwidth_bytes_per_s), float(hop_latency_s)
    if kind == "collective-permute":
        return v / w + h
    if kind == "all-to-all":
        shape, wrap = box if box is not None else ((n,), (False,))
        load, _ = all_to_all_link_load(tuple(shape), tuple(wrap))
        return load * (v / n) / w + h
    passes = 2 if kind == "all-reduce" else 1
    if n == 2:
        one = h + v / (2 * w)
    elif ring:
        one = (n - 1) * (h + v / (2 * n) / w)
    else:
        one = (n - 1) * (v / n) / w + (n - 1) * h
    return passes * one
