"""Compute cost of HLO instructions from their shapes: the :class:`sim.compute.Work` of a kernel.

What is counted (per device, one execution); :mod:`sim.compute` prices it:

- ``dot``: a :class:`sim.compute.Matmul` per batch index, ``(M x K) @ (K x N)``
  with ``M``/``N`` the free dims of the lhs/rhs and ``K`` the contracting ones:
  ``2*M*N*K`` FLOPs each (XLA ``HloCostAnalysis`` ``HandleDot`` counts the same),
  the shape is what the MXU tile pads.
- ``convolution`` (TPU prints most matmuls as convolutions, ``dim_labels=bf_io->bf``):
  ``2 * batch * output features * input features * valid window taps``, where a
  tap counts only if it meets real input (padding and dilation holes do not;
  ``HloCostAnalysis::HandleConvolution``); :func:`sim.costs.conv_flops`, the
  same count Stage 1 uses. As a :class:`~sim.compute.Matmul`, one product
  ``(batch x i) @ (i x o)`` per valid tap. The kernel's ``i`` dimension is already
  the per-group input feature count, so ``feature_group_count`` needs no extra factor.
- element-wise arithmetic and transcendental ops: one flop per output element;
  ``reduce``: one per input element; ``reduce-window``: output elements times
  window size (a window spanning a whole dimension counts 1 there: :func:`window_taps`).
  Data movement (copy, slice, transpose, broadcast, ...) has 0 flops.
  These are approximations; dots and convolutions carry nearly all flops of a
  transformer step.
- HBM bytes of a top-level instruction: operands read plus result written.
  A fusion reads each parameter once, except that a parameter only sliced
  (``dynamic-slice``/``slice``/``gather``) costs the slice, a parameter only
  passed through to the output or into a collective costs nothing, and an
  output produced by ``dynamic-update-slice`` costs the update (in place).
  Without this, a ``scan`` over 40 stacked layer weights would "read" all 40
  layers in every iteration. A parameter passed on to a nested fusion costs what
  that fusion reads of it (a layer's ``dynamic-slice`` often sits one fusion
  deeper: counting the whole stacked operand there priced every layer's FFN as
  reading all layers' weights, measured +251 ms of a 406 ms TI2V-5B step on v5e).
  A static ``slice`` of a tiled array reads the whole tiles its window touches
  (:func:`slice_read_bytes`): frames 6-7 of 8 frames tiled by 8 fetch all 8, measured 2.5x
  the window's bytes on a v5e VAE decode's causal-cache slices.
  Bookkeeping ops (``parameter``, ``constant``, ``tuple``, ``get-tuple-element``,
  ``bitcast``, ``copy-start``/``copy-done`` and ``slice-start``/``slice-done``
  DMAs, control flow) cost 0 here: the DMAs run beside the cores (a profile of
  the v5e step shows ``slice-done`` waits of ~0).
- Arrays in an on-chip memory space (``S(1)``, the TPU core's VMEM; ``S(2)``)
  are not HBM traffic: an operand or result there costs no HBM bytes
  (:data:`ON_CHIP_MEMORY_SPACES`).

Example:
    >>> from aoizora.hlo.text import parse_module
    >>> m = parse_module('''HloModule m
    ... ENTRY %e (a: f32[8,16], b: f32[16,4]) -> f32[8,4] {
    ...   %a = f32[8,16]{1,0} parameter(0)
    ...   %b = f32[16,4]{1,0} parameter(1)
    ...   ROOT %d = f32[8,4]{1,0} dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
    ... }''')
    >>> costs = CostModel(m)
    >>> w = costs.instruction(m.entry, m.entry.root)
    >>> w.matmuls, w.flops, w.hbm_bytes
    ((Matmul(batch=1, m=8, k=16, n=4),), 1024.0, 896)
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from aoizora.hlo.fused import compiler_cycles, fused_ops, has_own_window, has_spatial_taps
from aoizora.hlo.layouts import (
    full_tiles,
    lane_transpose_elements,
    naive_window,
    retile,
    sublane_f32_rows,
    sublane_reduce_fill,
    tile_gather,
    vreg_fill,
)
from aoizora.hlo.shapes import Shape
from aoizora.hlo.text import Computation, HloModule, Instruction
from aoizora.hlo.windows import window_traffic_bytes
from sim.compute import Matmul, Work
from sim.costs import ConvDim, conv_matmul

__all__ = [
    "COLLECTIVE_OPCODES",
    "ON_CHIP_MEMORY_SPACES",
    "CostModel",
    "FusionSummary",
    "collective_base",
    "hbm_size_bytes",
    "read_excess_bytes",
    "slice_read_bytes",
]

# Collective opcodes without their -start/-done suffix (hlo_opcode.h).
COLLECTIVE_OPCODES = frozenset(
    {
        "all-gather",
        "all-reduce",
        "reduce-scatter",
        "all-to-all",
        "ragged-all-to-all",
        "collective-permute",
        "collective-broadcast",
        "send",
        "recv",
    }
)

_ELEMENTWISE = frozenset(
    {
        "abs", "add", "and", "atan2", "cbrt", "ceil", "clamp", "compare", "complex", "convert",
        "cos", "divide", "erf", "exp", "exponential", "exponential-minus-one", "expm1", "floor",
        "imag", "is-finite", "log", "log-plus-one", "log1p", "logistic", "maximum", "minimum",
        "multiply", "negate", "not", "or", "popcnt", "power", "real", "reduce-precision",
        "remainder", "round-nearest-afz", "round-nearest-even", "rsqrt", "select",
        "shift-left", "shift-right-arithmetic", "shift-right-logical", "sign", "sin", "sqrt",
        "stochastic-convert", "subtract", "tan", "tanh", "xor", "clz",
    }
)  # fmt: skip
# Ops that move no HBM data of their own in this model.
_FREE = frozenset(
    {
        "parameter", "constant", "tuple", "get-tuple-element", "bitcast", "after-all",
        "partition-id", "replica-id", "opt-barrier", "add-dependency", "copy-start",
        "copy-done", "while", "call", "conditional", "async-start", "async-update",
        "async-done", "domain", "iota", "slice-start", "slice-done",
    }
)  # fmt: skip
# Memory spaces on the chip, not in HBM: XLA's TPU memory-space assignment prints
# VMEM (the vector memory beside each core) as S(1); S(2) holds the DMAs' scalar
# sync flags (``u32[]{:S(2)}`` beside every copy-start). HBM is the default, S(0).
ON_CHIP_MEMORY_SPACES = frozenset({1, 2})
_SLICERS = frozenset({"dynamic-slice", "slice", "gather"})
# Ops that change an array's layout: on chip they run at their own, slower rate
# (docs/simulator.md, "On-chip memory").
_RELAYOUTS = frozenset({"copy", "transpose"})
# Data movement whose arrays in VMEM move as whole vregs, each holding one tile: a reshape
# or broadcast into or out of tiles of fewer than 8 rows (validation/README.md, section 20)
_VREG_MOVES = frozenset({"reshape", "broadcast"})
_MARKER_TARGETS = frozenset({"AsyncCollectiveStart", "AsyncCollectiveDone"})


def hbm_size_bytes(shape: Shape) -> int:
    """The bytes of ``shape`` that live in HBM: its tiled footprint
    (:attr:`~aoizora.hlo.shapes.Shape.stored_bytes`), less leaves held on chip.

    >>> from aoizora.hlo.shapes import parse_shape
    >>> hbm_size_bytes(parse_shape("(f32[8]{0:S(1)}, f32[8]{0})", 0)[0])
    32
    >>> hbm_size_bytes(parse_shape("f32[8,96]{1,0:T(8,128)}", 0)[0])  # 96 lanes of 128
    4096
    """
    return sum(
        leaf.stored_bytes
        for leaf in shape.leaves()
        if leaf.memory_space not in ON_CHIP_MEMORY_SPACES
    )


def collective_base(opcode: str) -> str | None:
    """The collective kind of an opcode (``all-gather-start`` → ``all-gather``), else None."""
    for suffix in ("-start", "-done"):
        if opcode.endswith(suffix):
            base = opcode[: -len(suffix)]
            return base if base in COLLECTIVE_OPCODES else None
    return opcode if opcode in COLLECTIVE_OPCODES else None


def _dims_attr(instr: Instruction, key: str) -> tuple[int, ...]:
    value = instr.attrs.get(key, "").strip().strip("{}")
    return tuple(int(v) for v in value.split(",") if v.strip())


_WINDOW_PART_RE = re.compile(r"(size|stride|pad|lhs_dilate|rhs_dilate)=([\d_x-]+)")


def _window(instr: Instruction, rank: int) -> dict[str, list[int]]:
    """``window={size=8 pad=7_7 stride=...}`` per spatial dimension (defaults filled in)."""
    out = {"size": [1] * rank, "stride": [1] * rank, "pad": [0] * rank,
           "lhs_dilate": [1] * rank, "rhs_dilate": [1] * rank}  # fmt: skip
    for key, value in _WINDOW_PART_RE.findall(instr.attrs.get("window", "")):
        parts = value.split("x")
        if key == "pad":
            out["pad"] = [int(p.split("_")[0]) for p in parts]  # the low padding
        else:
            out[key] = [int(p) for p in parts]
    return out


def window_taps(instr: Instruction) -> int:
    """Operations per output element of a ``reduce-window``: its window's size, but a
    window spanning a whole dimension (size ``2n-1``, ``n-1`` padded low, stride 1 over a
    dimension of ``n``: every output sees the whole row) counts 1 there -- XLA's TPU
    emitter reduces such a row once and broadcasts it (how it lowers a softmax's
    ``max(x, axis, keepdims=True)``: the whole softmax fusion -- that reduce-window, the
    subtract, exp and sum -- over 2x12x4096x4096 f32 took 7.0 ms on a v5e chip
    (validation/v5e/workloads/profiles/m-6204a10677-winner), where 8,191 taps an element
    are 3.3 PFLOP, 17 ms at the chip's peak).

    >>> from aoizora.hlo.shapes import Shape
    >>> rw = Instruction("rw", "reduce-window", Shape("f32", (2, 4096)), (),
    ...                  {"window": "{size=1x8191 pad=0_0x4095_4095}"}, 1)
    >>> window_taps(rw), window_taps(Instruction("p", "reduce-window", Shape("f32", (8, 8)),
    ...                                          (), {"window": "{size=1x3 pad=0_0x1_1}"}, 1))
    (1, 3)
    """
    dims = instr.shape.dims
    win = _window(instr, len(dims))
    taps = 1
    for n, size, low, stride in zip(dims, win["size"], win["pad"], win["stride"], strict=True):
        whole_row = n > 1 and size == 2 * n - 1 and low == n - 1 and stride == 1
        taps *= 1 if whole_row else size
    return taps


def row_windows(instr: Instruction) -> tuple[tuple[int, float], ...]:
    """``((row length, output elements),)`` of a reduce-window spanning a whole row (see
    :func:`window_taps`), else ``()``: what :meth:`sim.compute.ComputeModel.row_window_s`
    prices where XLA's emitter is slow."""
    if instr.opcode != "reduce-window":
        return ()
    dims = instr.shape.dims
    win = _window(instr, len(dims))
    rows = [n for n, size, low, stride in zip(dims, win["size"], win["pad"], win["stride"],
                                               strict=True)
            if n > 1 and size == 2 * n - 1 and low == n - 1 and stride == 1]  # fmt: skip
    return ((max(rows), float(instr.shape.num_elements)),) if rows else ()


def _conv_matmul(comp: Computation, instr: Instruction) -> Matmul:
    """A convolution as matmuls (:func:`sim.costs.conv_matmul`): per tap meeting real
    input, the output positions its window slides over times the batch as rows.

    TPU prints most matmuls as convolutions (``dim_labels=bf_io->bf``), some with a
    padded window standing for a batch dimension (``window={size=8 pad=7_7}``):
    :func:`sim.costs.window_positions` keeps those from counting eight times, as
    XLA's ``HloCostAnalysis::HandleConvolution`` counts only the valid taps, and
    such windows do not slide, so they stay a batch of ``(batch x i) @ (i x o)``.
    """
    labels = instr.attrs.get("dim_labels", "")
    lhs_shape = comp.by_name[instr.operands[0]].shape.dims
    kernel = comp.by_name[instr.operands[1]].shape.dims
    m = re.fullmatch(r"(\w+)_(\w+)->(\w+)", labels)
    if m is None or len(m.group(2)) != len(kernel):  # no labels: a plain matmul
        k = kernel[0] if kernel else 1
        n = kernel[-1] if len(kernel) > 1 else 1
        return Matmul(1, max(1, instr.shape.num_elements // max(n, 1)), k, n)
    lhs, rhs, out = m.groups()
    spatial = sorted(c for c in out if c.isdigit())
    win = _window(instr, len(spatial))
    dims = [
        ConvDim(
            lhs_shape[lhs.index(c)], instr.shape.dims[out.index(c)], kernel[rhs.index(c)],
            stride=win["stride"][d], padding_low=win["pad"][d],
            lhs_dilation=win["lhs_dilate"][d], rhs_dilation=win["rhs_dilate"][d],
        )
        for d, c in enumerate(spatial)
    ]  # fmt: skip
    return conv_matmul(
        batch=instr.shape.dims[out.index("b")],
        input_features=kernel[rhs.index("i")],
        output_features=kernel[rhs.index("o")],
        dims=dims,
    )


def _dot_matmul(comp: Computation, instr: Instruction) -> Matmul:
    """A ``dot`` as ``batch`` products ``(M x K) @ (K x N)`` (batch, contracting and free dims)."""
    lhs = comp.by_name[instr.operands[0]].shape.dims
    rhs = comp.by_name[instr.operands[1]].shape.dims
    lc, rc = _dims_attr(instr, "lhs_contracting_dims"), _dims_attr(instr, "rhs_contracting_dims")
    lb, rb = _dims_attr(instr, "lhs_batch_dims"), _dims_attr(instr, "rhs_batch_dims")
    batch = math.prod(lhs[d] for d in lb)
    k = math.prod(lhs[d] for d in lc)
    m = math.prod(v for d, v in enumerate(lhs) if d not in lc and d not in lb)
    n = math.prod(v for d, v in enumerate(rhs) if d not in rc and d not in rb)
    return Matmul(batch, m, k, n)


@dataclass(frozen=True)
class FusionSummary:
    """What a fused computation does: its work, memory traffic and what it contains.

    Bytes are per parameter and for the outputs, split by where they live: HBM
    (``param_read_bytes``, ``output_bytes``) or on chip (``param_onchip_bytes``,
    ``output_onchip_bytes``); ``param_logical_bytes`` is what is read of each
    parameter wherever it lives (a nested fusion's caller adds it up).
    """

    matmuls: tuple[Matmul, ...]
    other_flops: float
    param_read_bytes: tuple[int, ...]
    output_bytes: int
    collectives: tuple[tuple[Computation, Instruction], ...]
    markers: frozenset[str]
    custom_calls: tuple[Instruction, ...]
    param_onchip_bytes: tuple[int, ...] = ()
    output_onchip_bytes: int = 0
    param_logical_bytes: tuple[int, ...] = ()
    row_windows: tuple[tuple[int, float], ...] = ()  # sim.compute.Work.row_windows
    reduces: bool = False  # a reduce in it or a nested fusion: a reduction kernel
    # an element-wise op, reduce or window in it or a nested fusion other than a dtype
    # conversion: with matmuls, not a bare matmul kernel (sim.compute.Work.bare_matmul)
    vector_ops: bool = False
    # the elements of each element-wise instruction in it or a nested fusion other than a
    # dtype conversion
    vector_op_elements: tuple[float, ...] = ()
    # a convolution with spatial taps in it or a nested fusion (its own emitters: such a
    # kernel keeps the one fused rate, sim.compute.ComputeModel.mxu_s)
    spatial_taps: bool = False
    # of those, one whose window is its own (aoizora.hlo.fused.has_own_window):
    # the compiler's cycle estimate prices it beside ours (sim.compute.Work.compiler_cycles)
    own_window: bool = False

    @property
    def flops(self) -> float:
        return sum(m.flops for m in self.matmuls) + self.other_flops

    @property
    def work(self) -> Work:
        """The fusion as one kernel: its matmuls, other FLOPs, HBM and on-chip bytes; a
        matmul or reduction kernel's reads beyond its writes apart (they stream faster on
        the chip: :attr:`sim.compute.Work.hbm_read_excess_bytes`)."""
        read = sum(self.param_read_bytes)
        onchip = sum(self.param_onchip_bytes) + self.output_onchip_bytes
        return Work(
            matmuls=self.matmuls, other_flops=self.other_flops,
            hbm_bytes=read + self.output_bytes, onchip_bytes=onchip,
            row_windows=self.row_windows,
            hbm_read_excess_bytes=read_excess_bytes(
                read, self.output_bytes, self.matmuls, reduces=self.reduces
            ),
            bare_matmul=bool(self.matmuls) and not self.vector_ops,
            fused_vector_ops=fused_ops(self.vector_op_elements, self.matmuls)
            if self.matmuls and not self.spatial_taps else None,
        )  # fmt: skip


_SLICE_RE = re.compile(r"\[(\d+):(\d+)(?::(\d+))?\]")


def read_excess_bytes(
    read: int, written: int, matmuls: Sequence[Matmul], *, reduces: bool = False
) -> int:
    """A matmul or reduction kernel's HBM reads beyond its writes (:attr:`sim.compute.
    Work.hbm_read_excess_bytes`; 0 for any other kernel: element-wise passes keep the
    read-and-write rate). A kernel that ``reduces`` (a ``reduce`` in it) streams its
    input as a matmul streams its operand: the program zoo's fit half, docs/simulator.md.

    >>> read_excess_bytes(900, 100, [Matmul(1, 8, 8, 8)]), read_excess_bytes(900, 100, [])
    (800, 0)
    >>> read_excess_bytes(900, 100, [], reduces=True)
    800
    """
    return max(0, read - written) if matmuls or reduces else 0


def slice_read_bytes(source: Shape, instr: Instruction) -> int:
    """Payload bytes of ``source`` a slicing ``instr`` reads, as :func:`_split` takes them.

    A static ``slice`` of a tiled array fetches every tile its window touches, whole
    (openxla.org/xla/tiled_layout: a tile is the unit of storage): along a tiled dimension
    the window is rounded out to tile boundaries. Returned as the payload share of
    ``source`` whose footprint is those tiles, so ``_split(source, ...)`` gives their bytes.
    Other slicers (``dynamic-slice``, ``gather``: offsets unknown here) read their result's
    payload.

    >>> from aoizora.hlo.text import parse_module
    >>> m = parse_module('''HloModule m
    ... ENTRY %e (a: bf16[8,96]) -> bf16[2,96] {
    ...   %a = bf16[8,96]{1,0:T(8,128)(2,1)} parameter(0)
    ...   ROOT %s = bf16[2,96]{1,0:T(2,128)(2,1)} slice(%a), slice={[6:8], [0:96]}
    ... }''')
    >>> a, s = m.entry.instructions
    >>> slice_read_bytes(a.shape, s), s.shape.size_bytes  # all 8 rows of the tile
    (1536, 384)
    """
    nbytes = instr.shape.size_bytes
    if instr.opcode != "slice" or not source.tiling or not source.stored_elements:
        return nbytes
    bounds = _SLICE_RE.findall(instr.attrs.get("slice", ""))
    if len(bounds) != len(source.dims) or any(step not in ("", "1") for _, _, step in bounds):
        return nbytes
    extent = [int(hi) - int(lo) for lo, hi, _ in bounds]
    for d, tile in source.tiling:
        lo, hi = int(bounds[d][0]), int(bounds[d][1])
        extent[d] = -(-hi // tile) * tile - lo // tile * tile
    stored = math.prod(extent) * source.stored_bytes // source.stored_elements
    return max(nbytes, stored * source.size_bytes // source.stored_bytes)


def _split(shape: Shape, nbytes: int) -> tuple[int, int]:
    """``nbytes`` of the payload of an array of ``shape`` as the (HBM, on chip) bytes a
    kernel moves: the tiled footprint of that part (``stored_bytes / size_bytes`` of it;
    96 channels move as 128 lanes), by where its leaves live."""
    if shape.size_bytes == 0 or nbytes == 0:
        return 0, 0
    total = shape.stored_bytes
    nbytes = round(nbytes * total / shape.size_bytes)
    hbm = hbm_size_bytes(shape)
    if hbm == total:
        return nbytes, 0
    if hbm == 0:
        return 0, nbytes
    part = round(nbytes * hbm / total)  # a tuple with leaves in both places
    return part, nbytes - part


class CostModel:
    """Flops and bytes of instructions of one module, with per-computation caches."""

    def __init__(self, module: HloModule) -> None:
        self.module = module
        self._fusions: dict[str, FusionSummary] = {}

    def _own(self, comp: Computation, instr: Instruction) -> tuple[tuple[Matmul, ...], float]:
        """(matmuls, other FLOPs) of one non-fusion instruction."""
        op = instr.opcode
        if op == "dot":
            return (_dot_matmul(comp, instr),), 0.0
        if op == "convolution":
            return (_conv_matmul(comp, instr),), 0.0
        if op in _ELEMENTWISE:
            return (), float(instr.shape.num_elements)
        if op == "reduce":
            half = max(1, len(instr.operands) // 2)
            return (), float(sum(comp.by_name[o].shape.num_elements for o in instr.operands[:half]))
        if op == "reduce-window":
            return (), float(instr.shape.num_elements * window_taps(instr))
        return (), 0.0

    def flops(self, comp: Computation, instr: Instruction) -> float:
        """Flops of one instruction (a fusion: of its whole fused computation)."""
        if instr.opcode == "fusion":
            return self.fusion(instr).flops
        matmuls, other = self._own(comp, instr)
        return sum(m.flops for m in matmuls) + other

    def instruction(self, comp: Computation, instr: Instruction) -> Work:
        """The :class:`~sim.compute.Work` of a top-level (non-fused) instruction."""
        op = instr.opcode
        if op == "fusion":
            return self.fusion_work(instr)
        matmuls, other = self._own(comp, instr)
        parts: list[tuple[int, int]] = []  # (HBM, on chip) of each array read or written
        if op in _FREE or collective_base(op) is not None:
            pass
        elif op in _SLICERS:
            # the slice is read where its operand lives, and written where it goes
            source = comp.by_name[instr.operands[0]].shape
            parts = [
                _split(source, slice_read_bytes(source, instr)),
                _split(instr.shape, instr.shape.size_bytes),
            ]
        elif op == "dynamic-update-slice":
            update = comp.by_name[instr.operands[1]].shape
            parts = [_split(update, update.size_bytes), _split(instr.shape, update.size_bytes)]
        else:
            shapes = [comp.by_name[o].shape for o in instr.operands] + [instr.shape]
            parts = [_split(s, s.size_bytes) for s in shapes]
            if op == "reduce":  # partly filled vregs reduced over their sublanes
                fill = sublane_reduce_fill(comp, instr)
                parts = [(h, c * fill) for h, c in parts[:-1]] + parts[-1:]
            elif op in _VREG_MOVES:  # partly filled vregs read or written whole
                parts = [(h, c * vreg_fill(sh)) for (h, c), sh in zip(parts, shapes, strict=True)]
        onchip, hbm = sum(c for _, c in parts), sum(h for h, _ in parts)
        relayout = op in _RELAYOUTS  # a copy's on-chip bytes move at the relayout rate
        read, written = sum(h for h, _ in parts[:-1]), (parts[-1][0] if parts else 0)
        gather = tile_gather(comp, instr, hbm) if op == "reshape" else None
        moved = comp.by_name[instr.operands[0]].shape if relayout else None
        full = moved is not None and full_tiles(moved, instr.shape)
        retiled = moved is not None and retile(moved, instr.shape)
        return Work(
            matmuls=matmuls, other_flops=other, hbm_bytes=hbm,
            onchip_bytes=0 if relayout else onchip, onchip_copy_bytes=onchip if relayout else 0,
            onchip_copy_full_tile_bytes=onchip if full else 0,
            lane_transpose_elements=lane_transpose_elements(comp, instr) if relayout else 0,
            hbm_retile_copy_bytes=hbm if retiled else 0,
            row_windows=row_windows(instr),
            hbm_read_excess_bytes=read_excess_bytes(read, written, matmuls,
                                                    reduces=op == "reduce"),
            tile_gathers=() if gather is None else (gather,),
            bare_matmul=bool(matmuls),  # a dot or convolution alone in its kernel
            fused_vector_ops=0.0 if matmuls and not has_spatial_taps(instr) else None,
            compiler_cycles=compiler_cycles(instr.attrs.get("backend_config", ""))
            if has_own_window(instr) else 0.0,
        )  # fmt: skip

    def fusion_work(self, instr: Instruction) -> Work:
        """The :class:`~sim.compute.Work` of a fusion instruction: its summary's, with a
        matmul kernel's operand windows read over its grid (:mod:`aoizora.hlo.windows`)."""
        summary = self.fusion(instr)
        work = summary.work
        if summary.own_window:
            cycles = compiler_cycles(instr.attrs.get("backend_config", ""))
            work = replace(work, compiler_cycles=cycles)
        traffic = window_traffic_bytes(
            self.module, instr, param_read_bytes=summary.param_read_bytes,
            output_bytes=summary.output_bytes, once_bytes=int(work.hbm_bytes),
        )  # fmt: skip
        if work.row_windows:
            comp = self.module.computations[instr.attrs.get("calls", "").strip().lstrip("%")]
            outputs = max(e for _, e in work.row_windows)
            row = max(n for n, _ in work.row_windows)
            config = instr.attrs.get("backend_config", "")
            work = replace(work, row_window_f32_rows=sublane_f32_rows(comp, config, outputs),
                           row_window_naive=naive_window(config, row))  # fmt: skip
        return work if traffic <= work.hbm_bytes else replace(work, hbm_bytes=traffic)

    def fusion(self, instr: Instruction) -> FusionSummary:
        """Summary of the computation a fusion instruction calls (cached)."""
        name = instr.attrs.get("calls", "").strip().lstrip("%")
        cached = self._fusions.get(name)
        if cached is None:
            cached = self._summarise(self.module.computations[name])
            self._fusions[name] = cached
        return cached

    def _summarise(self, comp: Computation) -> FusionSummary:
        matmuls: list[Matmul] = []
        other = 0.0
        collectives: list[tuple[Computation, Instruction]] = []
        markers: set[str] = set()
        custom: list[Instruction] = []
        rows: list[tuple[int, float]] = []
        users: dict[str, list[Instruction]] = {}
        reduces = vector = spatial = windowed = False
        vector_elements: list[float] = []
        for instr in comp.instructions:
            for operand in instr.operands:
                users.setdefault(operand, []).append(instr)
            if instr.opcode == "fusion":
                inner = self.fusion(instr)
                matmuls.extend(inner.matmuls)
                other += inner.other_flops
                collectives.extend(inner.collectives)
                markers |= inner.markers
                custom.extend(inner.custom_calls)
                rows.extend(inner.row_windows)
                reduces = reduces or inner.reduces
                vector = vector or inner.vector_ops
                vector_elements.extend(inner.vector_op_elements)
                spatial = spatial or inner.spatial_taps
                windowed = windowed or inner.own_window
            elif collective_base(instr.opcode) is not None:
                collectives.append((comp, instr))
            elif instr.opcode == "custom-call":
                target = instr.attrs.get("custom_call_target", "").strip('"')
                if target in _MARKER_TARGETS:
                    markers.add(target)
                else:
                    custom.append(instr)
            else:
                own, flops = self._own(comp, instr)
                matmuls.extend(own)
                other += flops
                rows.extend(row_windows(instr))
                reduces = reduces or instr.opcode == "reduce"
                vector = vector or (flops > 0 and instr.opcode != "convert")
                if instr.opcode in _ELEMENTWISE and instr.opcode != "convert":
                    vector_elements.append(flops)
                spatial = spatial or has_spatial_taps(instr)
                windowed = windowed or has_own_window(instr)
        root = comp.root
        logical: list[int] = []
        split: list[tuple[int, int]] = []
        index = 0
        while True:
            param = comp.parameter(index)
            if param is None:
                break
            logical.append(self._param_read(param, users, root))
            split.append(_split(param.shape, logical[-1]))
            index += 1
        out_hbm, out_onchip = self._output_bytes(comp, root)
        return FusionSummary(
            matmuls=tuple(matmuls),
            other_flops=other,
            param_read_bytes=tuple(h for h, _ in split),
            output_bytes=out_hbm,
            collectives=tuple(collectives),
            markers=frozenset(markers),
            custom_calls=tuple(custom),
            param_onchip_bytes=tuple(c for _, c in split),
            output_onchip_bytes=out_onchip,
            param_logical_bytes=tuple(logical),
            row_windows=tuple(rows),
            reduces=reduces,
            vector_ops=vector,
            vector_op_elements=tuple(vector_elements),
            spatial_taps=spatial,
            own_window=windowed,
        )

    def _param_read(
        self, param: Instruction, users: dict[str, list[Instruction]], root: Instruction
    ) -> int:
        """Bytes a fusion reads of one parameter, wherever it lives (module docstring)."""
        size = param.shape.size_bytes
        total = 0
        for user in users.get(param.name, []):
            if user is root and user.opcode == "tuple":
                continue  # passed through unchanged
            base = collective_base(user.opcode)
            target = user.attrs.get("custom_call_target", "").strip('"')
            if base is not None or target in _MARKER_TARGETS:
                continue  # the collective moves it, the core does not read it
            if user.opcode in _SLICERS and user.operands[0] == param.name:
                total += slice_read_bytes(param.shape, user)
            elif user.opcode == "dynamic-update-slice" and user.operands[0] == param.name:
                continue  # updated in place; the update operand is read instead
            elif user.opcode == "bitcast":
                # a bitcast the fusion returns (a nested fusion's view of the operand)
                # is read whole by the outer consumer; otherwise its users say
                total += size if user is root else self._param_read(user, users, root)
            elif user.opcode == "fusion":
                # a nested fusion reads what its own parameters read of it
                inner = self.fusion(user).param_logical_bytes
                uses = [i for i, o in enumerate(user.operands) if o == param.name]
                total += sum(inner[i] for i in uses if i < len(inner))
            else:
                return size
        return min(total, size)

    def _output_bytes(self, comp: Computation, root: Instruction) -> tuple[int, int]:
        """(HBM, on chip) bytes the fusion writes."""
        elements = [comp.by_name[o] for o in root.operands] if root.opcode == "tuple" else [root]
        hbm = onchip = 0
        for producer in elements:
            if producer.opcode in ("parameter", "get-tuple-element", "constant"):
                continue
            if collective_base(producer.opcode) is not None:
                continue
            if producer.opcode == "custom-call":
                target = producer.attrs.get("custom_call_target", "").strip('"')
                if target in _MARKER_TARGETS:
                    continue
            if producer.opcode == "dynamic-update-slice":
                written = comp.by_name[producer.operands[1]].shape.size_bytes
            else:
                written = producer.shape.size_bytes
            h, c = _split(producer.shape, written)
            hbm += h
            onchip += c
        return hbm, onchip
