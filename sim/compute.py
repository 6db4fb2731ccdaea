"""The compute model: how long one kernel runs on one TPU device. Q1 and Q2 both price work here.

A kernel's work is a :class:`Work`: the matrix multiplications it runs (:class:`Matmul`),
the fused attention it runs (:class:`Attention`), its other (element-wise) FLOPs and
the HBM bytes it moves. :meth:`ComputeModel.time_s` prices it with the device's
numbers and the generation's :class:`ComputeParams` (``topologies/<generation>.toml``,
table ``[compute]``):

* **MXU tile.** A TPU MXU is a ``T x T`` weight-stationary systolic array
  (Jouppi et al., "In-Datacenter Performance Analysis of a Tensor Processing Unit",
  ISCA 2017): the latched operand fills ``T`` rows with the contraction dimension
  and ``T`` columns with one free dimension, the other operand streams through.
  A matmul ``(m x k) @ (k x n)`` therefore keeps ``k / ceil(k/T)T`` of the rows
  busy, and the better of the two free dimensions (the kernel may latch either
  operand, the activations only if the weights stream half a tile of rows through
  them) ``f / ceil(f/T)T`` of the columns: :func:`mxu_utilisation`. ``T`` is
  jax's ``mxu_column_size`` (``jax/_src/pallas/mosaic/tpu_info.py``: 128 before
  v6e, 256 on v6e and TPU7x). Attention with ``head_dim = 128`` contracts 128 in
  ``Q.K^T``: half the rows of a 256-wide MXU.
* **Matmul efficiency** ``eta_mm``: the fraction of the peak a large, tile-aligned
  XLA matmul attains (a public microbenchmark per generation, or fitted).
* **Attention efficiency** ``eta_attn[kernel]``: the fraction of the *padded* MXU
  peak a fused attention kernel attains; it depends on the kernel's software (its
  softmax chain on the vector unit, its block sizes), so it is kept per kernel
  version and fitted to measured steps (``aoizora calibrate --steps``).
* **HBM efficiency** ``eta_hbm``: the fraction of the HBM bandwidth a streaming
  kernel attains (a public copy microbenchmark per generation). A matmul kernel that
  reads more than it writes (an attention-value product reading f32 probabilities, a
  projection of a long sequence to a few channels) streams the excess at
  ``hbm_read_efficiency`` where a chip measured it (v5e: 0.92 of the peak, against
  0.82 for an element-wise pass that reads and writes alike).

A kernel takes ``max(mxu_s + vector_s, hbm_s)`` (the roofline of Williams, Waterman &
Patterson, CACM 2009, with each roof at its achieved rate): ``mxu_s`` its padded
matmul and attention FLOPs at the achieved MXU rates, ``vector_s`` its other FLOPs
at the peak (they are a small part of a transformer step), ``hbm_s`` its bytes at
the achieved bandwidth. :data:`IDEAL` (no tile, every efficiency 1) is the bare peak
roofline.

>>> p = ComputeParams(mxu_tile=256, matmul_efficiency=0.9, hbm_efficiency=0.8,
...                   attention_efficiency=(("k1", 0.5),), attention_kernel="k1")
>>> model = ComputeModel(peak_flops_per_s=1e15, hbm_bandwidth_bytes_per_s=1e12, params=p)
>>> mm = Matmul(batch=1, m=4096, k=4096, n=4096)
>>> round(model.time_s(Work(matmuls=(mm,))) * 1e6, 1)  # 2*4096^3 / (1e15 * 0.9)
152.7
>>> att = Attention(lead=40, q_length=8192, kv_length=8192, head_dim=128, value_dim=128)
>>> round(model.time_s(Work(attention=(att,))) / (att.flops / 1e15), 3)  # 1.5x padded, at 0.5
3.0
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from sim.errors import TopologyError
from sim.matmul import Attention, Matmul, mxu_utilisation
from sim.splash_kernel import SplashKernel
from sim.splash_tiles import BASE_TILE, SplashTiles
from sim.tile_gather import Gather, TileGather

__all__ = [
    "IDEAL",
    "Attention",
    "ComputeModel",
    "ComputeParams",
    "Matmul",
    "Work",
    "compute_model_of",
    "mxu_utilisation",
]


def _either(a: bool | None, b: bool | None) -> bool | None:
    """Two kernels' ``Work.row_window_naive`` summed: True if either is, None if neither
    says."""
    if a is None or b is None:
        return b if a is None else a
    return a or b


@dataclass(frozen=True)
class Work:
    """What one kernel does on one device."""

    matmuls: tuple[Matmul, ...] = ()
    attention: tuple[Attention, ...] = ()
    other_flops: float = 0.0
    hbm_bytes: float = 0.0
    onchip_bytes: float = 0.0  # bytes read and written in the core's on-chip memory
    onchip_copy_bytes: float = 0.0  # the same, by a copy or transpose (a relayout)
    # Of onchip_copy_bytes, a relayout's between 8-row tiles on both sides: they move at
    # ComputeParams.onchip_full_tile_copy_bandwidth_bytes_per_s
    onchip_copy_full_tile_bytes: float = 0.0
    # Elements a relayout in VMEM passes through the transpose unit, where it moves another
    # dimension onto the lanes (the larger side's padded elements): they take
    # ComputeParams.lane_transpose_s_per_element each, a bound beside the on-chip bytes'
    lane_transpose_elements: float = 0.0
    # (row length, output elements) of each reduce-window spanning a whole row (a
    # softmax's row max as XLA lowers it; counted in other_flops as one op an element)
    row_windows: tuple[tuple[int, float], ...] = ()
    # Whether those windows read f32 rows from HBM with XLA's sublane emitter (a compiled
    # kernel's backend config says; True where unknown): alone in their kernel, only such
    # windows cost row_window_stream_s beyond their bytes
    row_window_f32_rows: bool = True
    # Whether those windows run XLA's naive emitter: True where the compiled kernel's
    # backend config has no cycle estimate (libtpu's cost model gave up on its window),
    # False where it has one, None where no compiled kernel says (before layout: the row
    # length decides, ComputeParams.row_window_slow_from)
    row_window_naive: bool | None = None
    # Of hbm_bytes, a matmul kernel's reads beyond its writes, each read once (its
    # pipelined operand windows): they stream at ComputeParams.hbm_read_efficiency
    hbm_read_excess_bytes: float = 0.0
    # Of hbm_bytes, a relayout's (copy, transpose) out of 2-row bf16 tiles into 8-row
    # tiles in HBM: they move at ComputeParams.hbm_retile_copy_efficiency
    hbm_retile_copy_bytes: float = 0.0
    # Of hbm_bytes, reshapes gathering 8-row tiles out of 2-row ones (sim.tile_gather):
    # they move at ComputeParams.tile_gather
    tile_gathers: tuple[Gather, ...] = ()
    # An asynchronous copy's wait (copy-done, slice-done): the bytes its DMA moves, and
    # the kernels issued between its start and its done, which it runs beside
    dma_bytes: float = 0.0
    beside: tuple[Work, ...] = ()
    # A matmul kernel with nothing fused but dtype conversions: at bare_matmul_efficiency
    bare_matmul: bool = False
    # The element-wise ops fused into a compiled matmul kernel without spatial taps, per
    # matmul (aoizora.hlo.fused.fused_ops; None: not known, or a convolution with taps):
    # each costs ComputeParams.matmul_fused_op_cost
    fused_vector_ops: float | None = None
    # The cycles the compiler's cost model estimates for a kernel whose convolution has a
    # window of its own (its backend config; 0: none, or another kernel): priced beside ours at
    # ComputeParams.compiler_cycle_s (ComputeModel.time_s)
    compiler_cycles: float = 0.0

    @property
    def flops(self) -> float:
        """Every FLOP, unpadded (what a FLOP count such as XLA's cost analysis reports)."""
        return (
            sum(m.flops for m in self.matmuls)
            + sum(a.flops for a in self.attention)
            + self.other_flops
        )

    def __add__(self, other: Work) -> Work:
        return Work(
            self.matmuls + other.matmuls,
            self.attention + other.attention,
            self.other_flops + other.other_flops,
            self.hbm_bytes + other.hbm_bytes,
            self.onchip_bytes + other.onchip_bytes,
            self.onchip_copy_bytes + other.onchip_copy_bytes,
            self.onchip_copy_full_tile_bytes + other.onchip_copy_full_tile_bytes,
            self.lane_transpose_elements + other.lane_transpose_elements,
            self.row_windows + other.row_windows,
            self.row_window_f32_rows or other.row_window_f32_rows,
            _either(self.row_window_naive, other.row_window_naive),
            self.hbm_read_excess_bytes + other.hbm_read_excess_bytes,
            self.hbm_retile_copy_bytes + other.hbm_retile_copy_bytes,
            self.tile_gathers + other.tile_gathers,
            self.dma_bytes + other.dma_bytes,
            self.beside + other.beside,
            self.bare_matmul and other.bare_matmul,
            None
            if self.fused_vector_ops is None or other.fused_vector_ops is None
            else self.fused_vector_ops + other.fused_vector_ops,
            self.compiler_cycles + other.compiler_cycles
            if self.compiler_cycles and other.compiler_cycles else 0.0,
        )  # fmt: skip


@dataclass(frozen=True)
class ComputeParams:
    """A generation's compute efficiencies (``[compute]`` of its topology file).

    ``attention_efficiency`` maps kernel versions to their efficiency;
    ``attention_kernel`` is the one a prediction uses (the generation's default, or
    the one a measurement or the user names: :meth:`with_kernel`).
    """

    mxu_tile: int = 1
    matmul_efficiency: float = 1.0
    hbm_efficiency: float = 1.0
    attention_efficiency: tuple[tuple[str, float], ...] = (("ideal", 1.0),)
    attention_kernel: str = "ideal"
    sources: tuple[tuple[str, str], ...] = field(default=(), compare=False, repr=False)
    # Measured on a chip where a table says so (absent: 0 / infinite, the bare roofline).
    kernel_overhead_s: float = 0.0
    # The fixed cost of a kernel without a matmul that moves no HBM byte (its operands and
    # result in VMEM): no DMA pipeline to fill and drain (None: unmeasured, kernel_overhead_s)
    vmem_kernel_overhead_s: float | None = None
    onchip_bandwidth_bytes_per_s: float = math.inf
    onchip_copy_bandwidth_bytes_per_s: float = math.inf
    # Relayouts between 8-row tiles (Work.onchip_copy_full_tile_bytes) at their own
    # measured rate (None: unmeasured, onchip_copy_bandwidth_bytes_per_s)
    onchip_full_tile_copy_bandwidth_bytes_per_s: float | None = None
    # Seconds a padded element of a relayout that moves another dimension onto the lanes
    # (Work.lane_transpose_elements) takes in the transpose unit (0: unmeasured)
    lane_transpose_s_per_element: float = 0.0
    # (kernel, seconds per grid step, seconds per q block) of blocked attention kernels
    attention_grid: tuple[tuple[str, float, float], ...] = ()
    # A generation's measured splash tiles (sim.splash_tiles): their rates and which compile
    splash_tiles: SplashTiles | None = None
    # The splash kernel's model (sim.splash_kernel): any tile's time and VMEM; where present
    # it prices tiles instead of the measured table, which it is fitted on
    splash_kernel: SplashKernel | None = None
    # A reduce-window over rows of at least row_window_slow_from elements runs XLA's
    # naive emitter: row_window_tap_s per output element and window tap at that length
    # (0: unmeasured), times (row / row_window_slow_from) ** row_window_tap_growth
    row_window_slow_from: float = math.inf
    row_window_tap_s: float = 0.0
    row_window_tap_growth: float = 0.0
    # Below it, such a window alone in its kernel (not fused into the matmul that makes its
    # rows) streams them from HBM at row_window_stream_s per output element (0: unmeasured)
    row_window_stream_s: float = 0.0
    # One call of a compiled program timed to its outputs' readiness, less the device's
    # busy time: the host's launch and wait, paid once a call (0: unmeasured)
    program_launch_s: float = 0.0
    # HBM passes over a convolution's bytes that XLA's relayouts around it add (pads and
    # copies into W tiles and back): what Stage 1, reading the program before layout
    # assignment, adds per convolution (0: unmeasured)
    conv_relayout_passes: float = 0.0
    # The fraction of the HBM bandwidth a matmul kernel's reads beyond its writes attain
    # (Work.hbm_read_excess_bytes; 0: unmeasured, they move at hbm_efficiency)
    hbm_read_efficiency: float = 0.0
    # The fraction of the HBM bandwidth a relayout out of 2-row bf16 tiles into 8-row ones
    # attains (Work.hbm_retile_copy_bytes; 0: unmeasured, they move at hbm_efficiency)
    hbm_retile_copy_efficiency: float = 0.0
    # The fraction of the peak a matmul kernel with nothing fused but dtype conversions
    # attains (Work.bare_matmul; 0: unmeasured, it runs at matmul_efficiency)
    bare_matmul_efficiency: float = 0.0
    # What each element-wise op fused into a matmul kernel adds to its inverse efficiency
    # (Work.fused_vector_ops; 0: unmeasured, such kernels run at matmul_efficiency)
    matmul_fused_op_cost: float = 0.0
    # Seconds per cycle of the compiler's estimate for a kernel whose convolution has a
    # window of its own (Work.compiler_cycles; 0: unmeasured, our price alone)
    compiler_cycle_s: float = 0.0
    tile_gather: TileGather | None = None  # None: a tile gather streams as any HBM pass
    # True once a measurement or the user named the kernel (with_kernel): it then prices
    # every attention call; else a call's own kernel family does, when it has an efficiency
    attention_kernel_pinned: bool = False

    @property
    def kernels(self) -> tuple[str, ...]:
        """The attention kernel versions with an efficiency, in file order."""
        return tuple(k for k, _ in self.attention_efficiency)

    @property
    def attention_eff(self) -> float:
        """The efficiency of the selected attention kernel."""
        return dict(self.attention_efficiency)[self.attention_kernel]

    def with_kernel(self, kernel: str | None) -> ComputeParams:
        """These parameters with attention kernel ``kernel`` selected (None: unchanged).

        >>> IDEAL.with_kernel("tokamax")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        sim.errors.TopologyError: attention kernel 'tokamax' has no efficiency here; ...
        """
        if kernel is None:
            return self
        if kernel not in self.kernels:
            raise TopologyError(
                f"attention kernel {kernel!r} has no efficiency here; known kernels: "
                f"{', '.join(self.kernels)} (add it under [compute.attention_efficiency] of "
                "the generation's topology file, or fit it with aoizora calibrate --steps)"
            )
        return replace(self, attention_kernel=kernel, attention_kernel_pinned=True)

    def kernel_for(self, attention: Attention) -> str:
        """The kernel version that prices ``attention``: the pinned one, else the call's own
        family when it has an efficiency here, else the generation's default.

        >>> p = ComputeParams(attention_efficiency=(("custom", 0.8), ("splash", 0.6)),
        ...                   attention_kernel="custom")
        >>> a = Attention(1, 512, 512, 128, 128, kernel="splash")
        >>> p.kernel_for(a), p.with_kernel("custom").kernel_for(a)
        ('splash', 'custom')
        """
        if not self.attention_kernel_pinned and attention.kernel in self.kernels:
            return attention.kernel
        return self.attention_kernel

    @property
    def tiled_kernel(self) -> str:
        """The attention kernel whose tiles are priced (splash): "" when the generation has
        neither the kernel's model nor a measured tile table."""
        if self.splash_kernel is not None:
            return "splash"
        return self.splash_tiles.kernel if self.splash_tiles is not None else ""

    def grid_overheads(self, kernel: str) -> tuple[float, float]:
        """(seconds per grid step, seconds per q block) of ``kernel`` (0, 0 if unmeasured)."""
        for name, step_s, q_block_s in self.attention_grid:
            if name == kernel:
                return step_s, q_block_s
        return 0.0, 0.0

    def with_efficiencies(self, values: Mapping[str, float]) -> ComputeParams:
        """These parameters with some attention efficiencies replaced (calibration)."""
        eff = dict(self.attention_efficiency)
        eff.update({k: float(v) for k, v in values.items()})
        return replace(self, attention_efficiency=tuple(eff.items()))

    def key(self) -> tuple[object, ...]:
        """Everything a predicted time depends on (cache keys): every field but ``sources``."""
        return tuple(getattr(self, f.name) for f in fields(self) if f.compare)


# The bare peak roofline: chips built without a [compute] table (synthetic test chips).
IDEAL = ComputeParams()


@dataclass(frozen=True)
class ComputeModel:
    """Prices :class:`Work` on one device (see the module docstring)."""

    peak_flops_per_s: float
    hbm_bandwidth_bytes_per_s: float
    params: ComputeParams = IDEAL

    def attention_s(self, attention: Attention) -> float:
        """One attention call: its padded FLOPs at its kernel's efficiency, plus the kernel's
        measured cost per grid step and per q block when its blocks are known. A call at a
        tile the generation measured (:mod:`sim.splash_tiles`) costs its price at the 512
        tile times the tile sweep's ratio of the two; a splash call over heads narrower
        than 128 lanes, times the kernel's ``narrow_head_factor``."""
        p = self.params
        kernel = p.kernel_for(attention)
        narrow = 1.0
        if kernel == p.tiled_kernel and p.splash_kernel is not None:
            narrow = p.splash_kernel.narrow_factor(attention.head_dim, attention.value_dim)
        if kernel == p.tiled_kernel and attention.block_q and attention.tile != BASE_TILE:
            scale = self._tile_scale(attention)
            if scale != 1.0:
                base = replace(attention, block_q=BASE_TILE[0], block_kv=BASE_TILE[1],
                               block_kv_compute=BASE_TILE[2])  # fmt: skip
                return self._blocked_s(base, kernel) * scale * narrow
        return self._blocked_s(attention, kernel) * narrow

    def _tile_scale(self, attention: Attention) -> float:
        """A call's price at its tile over its price at the 512 tile: ``1 - step_gain * (1 -
        t(tile) / t(512))``, ``t`` the kernel's model (:mod:`sim.splash_kernel`) where the
        generation has one, else its measured tile table (:mod:`sim.splash_tiles`)."""
        p, a = self.params, attention
        k = p.splash_kernel
        if k is None:
            tiles = p.splash_tiles
            return 1.0 if tiles is None else tiles.scale(a.lead, a.q_length, a.kv_length, a.tile)

        def t(tile: tuple[int, int, int]) -> float:
            return k.call_s(a.lead, a.q_length, a.kv_length, a.head_dim, a.value_dim, tile,
                            self.peak_flops_per_s, self.hbm_bandwidth_bytes_per_s)  # fmt: skip

        return 1.0 - k.step_gain * (1.0 - t(a.tile) / t(BASE_TILE))

    def _blocked_s(self, attention: Attention, kernel: str) -> float:
        p = self.params
        eff = dict(p.attention_efficiency)[kernel]
        seconds = attention.padded_flops(p.mxu_tile) / (self.peak_flops_per_s * eff)
        step_s, q_block_s = p.grid_overheads(kernel)
        if step_s or q_block_s:
            steps, q_blocks = attention.grid()
            seconds += steps * step_s + q_blocks * q_block_s
        return seconds

    def mxu_s(self, work: Work) -> float:
        """The time of ``work``'s matmuls and attention at their achieved MXU rates: a bare
        matmul kernel at ``bare_matmul_efficiency``, one with ``n`` element-wise ops fused
        (``Work.fused_vector_ops``) at ``1 / (1 / bare_matmul_efficiency + n *
        matmul_fused_op_cost)``, where measured; any other (before layout, a convolution
        with spatial taps) at ``matmul_efficiency`` (docs/simulator.md, "Bare and fused
        matmuls": v5e 0.973, 0.0116 and 0.903).

        >>> m = ComputeModel(100.0, 1.0, ComputeParams(matmul_efficiency=0.5,
        ...                  bare_matmul_efficiency=0.8, matmul_fused_op_cost=0.25))
        >>> mm = (Matmul(1, 10, 10, 4),)  # 800 FLOPs: 8 s at the peak
        >>> m.mxu_s(Work(matmuls=mm)), m.mxu_s(Work(matmuls=mm, bare_matmul=True))
        (16.0, 10.0)
        >>> round(m.mxu_s(Work(matmuls=mm, fused_vector_ops=2)), 9)  # 8 x (1.25 + 2 x 0.25)
        14.0
        """
        p = self.params
        mm = sum(m.padded_flops(p.mxu_tile) for m in work.matmuls)
        att = sum(self.attention_s(a) for a in work.attention)
        eff = p.matmul_efficiency
        if p.bare_matmul_efficiency and work.bare_matmul:
            eff = p.bare_matmul_efficiency
        elif p.bare_matmul_efficiency and p.matmul_fused_op_cost and work.fused_vector_ops:
            ops = work.fused_vector_ops
            eff = 1.0 / (1.0 / p.bare_matmul_efficiency + ops * p.matmul_fused_op_cost)
        return mm / (self.peak_flops_per_s * eff) + att

    def hbm_s(self, work: Work) -> float:
        """The time of ``work``'s HBM traffic at the achieved bandwidth: its reads beyond its
        writes at ``hbm_read_efficiency`` (where measured), the rest at ``hbm_efficiency``.
        A generation whose on-chip rates were never measured moves its on-chip bytes at
        the latter too (the model before on-chip memory was measured, which its other
        values were fitted with).

        >>> m = ComputeModel(1.0, 100.0, ComputeParams(hbm_efficiency=0.5,
        ...                  hbm_read_efficiency=0.8))
        >>> m.hbm_s(Work(hbm_bytes=100.0, hbm_read_excess_bytes=80.0))  # 20/50 + 80/80
        1.4
        """
        p = self.params
        nbytes, gather_s = work.hbm_bytes, 0.0
        rate = self.hbm_bandwidth_bytes_per_s
        if p.tile_gather is not None and work.tile_gathers:  # measured: their own rates
            nbytes -= sum(g[2] for g in work.tile_gathers)
            gather_s = p.tile_gather.seconds(work.tile_gathers)
        if p.hbm_retile_copy_efficiency and work.hbm_retile_copy_bytes:
            nbytes -= work.hbm_retile_copy_bytes
            gather_s += work.hbm_retile_copy_bytes / (rate * p.hbm_retile_copy_efficiency)
        if math.isinf(p.onchip_bandwidth_bytes_per_s):
            nbytes += work.onchip_bytes
        if math.isinf(p.onchip_copy_bandwidth_bytes_per_s):
            nbytes += work.onchip_copy_bytes
        if not p.hbm_read_efficiency:
            return gather_s + nbytes / (rate * p.hbm_efficiency)
        excess = min(work.hbm_read_excess_bytes, work.hbm_bytes)
        return (
            gather_s
            + (nbytes - excess) / (rate * p.hbm_efficiency)
            + excess / (rate * p.hbm_read_efficiency)
        )

    def onchip_s(self, work: Work) -> float:
        """The time of ``work``'s on-chip traffic: element-wise and copies at their measured
        rates (0 where unmeasured: :meth:`hbm_s` then counts them)."""
        p = self.params
        full_rate = p.onchip_full_tile_copy_bandwidth_bytes_per_s
        if full_rate is None:
            full_rate = p.onchip_copy_bandwidth_bytes_per_s
        full = work.onchip_copy_full_tile_bytes
        return (
            work.onchip_bytes / p.onchip_bandwidth_bytes_per_s
            + (work.onchip_copy_bytes - full) / p.onchip_copy_bandwidth_bytes_per_s
            + full / full_rate
        )

    def row_window_s(self, work: Work) -> float:
        """The time of ``work``'s whole-row reduce-windows beyond their one op an element.

        Where the compiled kernel says XLA's naive emitter runs (``Work.row_window_naive``;
        where none says, over rows of at least ``row_window_slow_from``, ``n0``):
        ``elements x (2n - 1) taps x row_window_tap_s x (n / n0) ** row_window_tap_growth``
        (a tap costs more the longer the row: 21.9, 22.8 and 24.8 fs at 6,144, 7,168 and
        8,192 on v5e). Below that, a window in a kernel
        without a matmul (its rows read from HBM, not made in place by the score matmul)
        that reads them as f32 with XLA's sublane emitter (``Work.row_window_f32_rows``)
        costs ``elements x row_window_stream_s``. v5e, measured: a softmax over rows of
        6,144 and 8,192 f32 took 269 and 406 ps an element; over rows of 3,072 to 5,120,
        alone in its kernel reading f32 rows, 17.4-18.1 ps; fused with its matmul, 3-6 ps,
        the HBM rate of the matmul's output; reading bf16 rows (the scores' convert fused
        in) or lane-reduced, the rate of its bytes (validation/README.md, sections 10, 18).

        >>> m = ComputeModel(1.0, 1.0, ComputeParams(row_window_slow_from=100,
        ...                  row_window_tap_s=1.0, row_window_stream_s=0.5))
        >>> m.row_window_s(Work(row_windows=((100, 2.0), (50, 4.0))))  # 2 x 199 + 4 x 0.5
        400.0
        >>> g = ComputeModel(1.0, 1.0, ComputeParams(row_window_slow_from=100,
        ...                  row_window_tap_s=1.0, row_window_tap_growth=1.0))
        >>> g.row_window_s(Work(row_windows=((200, 1.0),)))  # 399 taps at twice the cost
        798.0
        >>> m.row_window_s(Work(matmuls=(Matmul(1, 1, 1, 1),), row_windows=((50, 4.0),)))
        0.0
        >>> m.row_window_s(Work(row_windows=((50, 4.0),), row_window_f32_rows=False))
        0.0
        >>> m.row_window_s(Work(row_windows=((50, 1.0),), row_window_naive=True))  # 99 taps
        99.0
        >>> m.row_window_s(Work(row_windows=((100, 1.0),), row_window_naive=False))
        0.5
        """
        p = self.params
        total = 0.0
        for n, elements in work.row_windows:
            naive = work.row_window_naive
            if naive or (naive is None and n >= p.row_window_slow_from):
                growth = (n / p.row_window_slow_from) ** p.row_window_tap_growth
                total += elements * (2 * n - 1) * p.row_window_tap_s * growth
            elif not work.matmuls and work.row_window_f32_rows:
                total += elements * p.row_window_stream_s
        return total

    def time_s(self, work: Work) -> float:
        """``max(mxu_s + vector_s, hbm_s, onchip_s, transpose_s) + kernel overhead``: one
        kernel, bound by compute, HBM, on-chip memory or the transpose unit, plus its fixed
        cost; an async copy's wait.

        >>> m = ComputeModel(1.0, 1.0, ComputeParams(onchip_copy_bandwidth_bytes_per_s=4.0,
        ...                  lane_transpose_s_per_element=0.5))
        >>> m.time_s(Work(onchip_copy_bytes=8.0)), m.time_s(Work(onchip_copy_bytes=8.0,
        ...                                                     lane_transpose_elements=6.0))
        (2.0, 3.0)

        A kernel whose convolution has a window of its own, with the compiler's estimate where
        the generation measured its cycle: the geometric mean of our bound and it.

        >>> c = ComputeModel(1.0, 1.0, ComputeParams(compiler_cycle_s=0.5))
        >>> c.time_s(Work(other_flops=2.0, compiler_cycles=16.0))  # sqrt(2 x 16 x 0.5)
        4.0
        """
        if work.dma_bytes:
            return self.dma_wait_s(work)
        vector_s = work.other_flops / self.peak_flops_per_s + self.row_window_s(work)
        transpose_s = work.lane_transpose_elements * self.params.lane_transpose_s_per_element
        bound = max(self.mxu_s(work) + vector_s, self.hbm_s(work), self.onchip_s(work),
                    transpose_s)  # fmt: skip
        if work.compiler_cycles and self.params.compiler_cycle_s:
            # docs/simulator.md, "Convolutions with a window of their own": the geometric mean
            # of our bound and the compiler's estimate (it knows the emitter's MXU tiling,
            # we the efficiencies and the overlap the chip attains); the fixed cost is ours
            bound = math.sqrt(bound * work.compiler_cycles * self.params.compiler_cycle_s)
        return bound + self.overhead_s(work)

    def overhead_s(self, work: Work) -> float:
        """``work``'s fixed cost as a kernel: ``vmem_kernel_overhead_s`` where it moves on-chip
        bytes, no HBM byte and has no matmul (where measured), else ``kernel_overhead_s``.
        The latter is the intercept of HBM streams (filling and draining their DMA
        pipeline); a kernel in VMEM has none: on v5e the smallest such element-wise kernels
        ran in 0.02 us against the 0.71 us (docs/simulator.md, "Kernels in VMEM and
        relayouts").

        >>> m = ComputeModel(1.0, 1.0, ComputeParams(kernel_overhead_s=0.7,
        ...                  vmem_kernel_overhead_s=0.1))
        >>> vmem, both = Work(onchip_bytes=8.0), Work(hbm_bytes=8.0, onchip_bytes=8.0)
        >>> m.overhead_s(vmem), m.overhead_s(both)
        (0.1, 0.7)
        """
        p = self.params
        if (p.vmem_kernel_overhead_s is not None and work.hbm_bytes <= 0
                and not work.matmuls and not work.attention
                and work.onchip_bytes + work.onchip_copy_bytes > 0):  # fmt: skip
            return p.vmem_kernel_overhead_s
        return p.kernel_overhead_s

    def dma_wait_s(self, work: Work) -> float:
        """What a ``copy-done`` or ``slice-done`` waits: its DMA streams at the HBM peak in the
        time the kernels beside it leave HBM idle (beyond their HBM traffic's), the done waits
        for the rest (docs/simulator.md, "Async copies": 70 v5e profiles, 404 vs 339 ms).

        >>> m = ComputeModel(10.0, 100.0, ComputeParams(hbm_efficiency=0.5))
        >>> busy = Work(other_flops=30.0, hbm_bytes=50.0)  # 3 s, HBM 1 s: idle 2 s
        >>> m.dma_wait_s(Work(dma_bytes=500.0, beside=(busy,)))  # 5 s of DMA - 2 s
        3.0
        """
        idle = sum(max(0.0, self.time_s(w) - self.hbm_s(w)) for w in work.beside)
        return max(0.0, work.dma_bytes / self.hbm_bandwidth_bytes_per_s - idle)


def compute_model_of(chip: Any) -> ComputeModel:
    """The compute model of a chip-like value (``bf16_flops_per_s``,
    ``hbm_bandwidth_bytes_per_s`` and, when it has them, ``compute`` parameters;
    without them: the bare roofline, :data:`IDEAL`).

    >>> from types import SimpleNamespace
    >>> m = compute_model_of(SimpleNamespace(bf16_flops_per_s=2.0, hbm_bandwidth_bytes_per_s=1.0))
    >>> m.params == IDEAL, m.time_s(Work(other_flops=4.0, hbm_bytes=1.0))
    (True, 2.0)
    """
    params = getattr(chip, "compute", IDEAL)
    return ComputeModel(chip.bf16_flops_per_s, chip.hbm_bandwidth_bytes_per_s, params)
