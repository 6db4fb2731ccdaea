"""What a compiled kernel's layouts and emitter say about the rate it runs at on the chip.

The compute model prices a kernel by its bytes and FLOPs (:mod:`aoizora.hlo.compute`);
some layouts run at rates of their own, measured on a v5e chip (docs/simulator.md, "Tile
gathers", "Kernels in VMEM and relayouts", "XLA attention"): a reshape gathering 8-row
tiles out of 2-row ones (:func:`tile_gather`), a relayout between 8-row tiles
(:func:`full_tiles`) or out of 2-row bf16 tiles into 8-row ones in HBM (:func:`retile`), and
a row max read as f32 rows by XLA's sublane emitter (:func:`sublane_f32_rows`). Each reads
only what the compiled HLO prints.
"""

from __future__ import annotations

import math
import re

from aoizora.hlo.shapes import ELEMENT_BITS, Shape
from aoizora.hlo.text import Computation, Instruction
from sim.tile_gather import Gather

__all__ = [
    "full_tiles",
    "lane_transpose_elements",
    "naive_window",
    "retile",
    "sublane_f32_rows",
    "sublane_reduce_fill",
    "tile_gather",
    "vreg_fill",
]


def tile_gather(comp: Computation, instr: Instruction, hbm_bytes: int) -> Gather | None:
    """(its source in VMEM, its source's minor dimension a multiple of 512 elements, its
    HBM bytes) when ``instr`` gathers 8-row tiles out of a bf16 array in 2-row tiles into
    HBM -- a decoder's up-sampling doubling its rows (:mod:`sim.tile_gather`) -- else None.

    >>> from aoizora.hlo.text import parse_module
    >>> m = parse_module(\'\'\'HloModule m
    ... ENTRY %e (p: bf16[4,60,2,104,384]) -> bf16[4,120,104,384] {
    ...   %p = bf16[4,60,2,104,384]{4,2,1,3,0:T(2,128)(2,1)S(1)} parameter(0)
    ...   ROOT %r = bf16[4,120,104,384]{3,1,2,0:T(8,128)(2,1)} reshape(%p)
    ... }\'\'\')
    >>> tile_gather(m.entry, m.entry.by_name["r"], 19169280)
    (True, False, 19169280)
    """
    source = comp.by_name[instr.operands[0]].shape
    out = instr.shape
    if (
        source.element_type != "bf16"
        or source.tile_rows != 2
        or out.tile_rows < 8
        or out.memory_space
    ):
        return None
    aligned = source.dims[source.tiling[0][0]] % 512 == 0
    return bool(source.memory_space), aligned, hbm_bytes


def full_tiles(source: Shape, result: Shape) -> bool:
    """Whether a relayout moves 8-row tiles into 8-row tiles: on v5e those ran at 2.0e12 B/s
    in VMEM wherever they were, the others at 0.7-1.3e12 (benchmarks/onchip_relayouts.py).

    >>> from aoizora.hlo.shapes import parse_shape
    >>> a = parse_shape("bf16[2,1024,768]{2,1,0:T(8,128)(2,1)}", 0)[0]
    >>> b = parse_shape("bf16[2,1024,768]{1,2,0:T(8,128)(2,1)}", 0)[0]
    >>> c = parse_shape("bf16[2,1024,768]{2,1,0:T(2,128)(2,1)}", 0)[0]
    >>> full_tiles(a, b), full_tiles(c, b)
    (True, False)
    """
    return source.tile_rows == result.tile_rows == 8


def lane_transpose_elements(comp: Computation, instr: Instruction) -> int:
    """The elements a relayout in VMEM passes through the chip's transpose unit one partial
    block at a time: the larger of its operand's and its result's padded elements (each
    tiled dimension padded to its tile), where both live in VMEM, the result puts another
    dimension on the 128 lanes than the operand, and one of the two lane dimensions is
    narrower than 128 (every tile part padding); 0 for any other instruction. A
    ``transpose`` compares the operand dimension each result dimension reads (its
    ``dimensions``).

    On v5e such copies ran at 3-6 ps a padded element of the larger side, f32 and bf16
    alike, a median 1.9x what their bytes at the relayout rate priced; those between whole
    128-lane blocks ran at 1.5-2.5 ps and their bytes price them within 10 % (the zoo's fit
    halves, the Wan and workload profiles; validation/README.md, section 20).

    >>> from aoizora.hlo.text import parse_module
    >>> m = parse_module('''HloModule m
    ... ENTRY %e (p: f32[128,32,64]) -> f32[128,32,64] {
    ...   %p = f32[128,32,64]{0,2,1:T(8,128)S(1)} parameter(0)
    ...   %t = f32[128,32,64]{2,0,1:T(8,128)S(1)} copy(%p)
    ...   ROOT %c = f32[128,32,64]{0,1,2:T(8,128)S(1)} copy(%p)
    ... }''')
    >>> lane_transpose_elements(m.entry, m.entry.by_name["t"])  # 64 on the lanes: padded
    524288
    >>> lane_transpose_elements(m.entry, m.entry.by_name["c"])  # 128 stays on the lanes
    0
    >>> w = parse_module('''HloModule m
    ... ENTRY %e (p: f32[256,32,128]) -> f32[256,32,128] {
    ...   %p = f32[256,32,128]{0,2,1:T(8,128)S(1)} parameter(0)
    ...   ROOT %t = f32[256,32,128]{2,0,1:T(8,128)S(1)} copy(%p)
    ... }''')
    >>> lane_transpose_elements(w.entry, w.entry.by_name["t"])  # whole blocks: 256 to 128
    0
    """
    if instr.opcode not in ("copy", "transpose") or not instr.operands:
        return 0
    source, result = comp.by_name[instr.operands[0]].shape, instr.shape
    shapes = (source, result)
    if any(s.is_tuple or not s.memory_space or len(s.tiling) < 2 for s in shapes):
        return 0
    lane = result.tiling[0][0]
    if instr.opcode == "transpose":
        order = [int(d) for d in re.findall(r"\d+", instr.attrs.get("dimensions", ""))]
        if len(order) != len(result.dims):
            return 0
        lane = order[lane]
    if lane == source.tiling[0][0]:
        return 0
    lanes = (source.dims[source.tiling[0][0]], result.dims[result.tiling[0][0]])
    if min(lanes) >= _LANES:
        return 0  # whole 128-lane blocks (but a tail): their bytes at the relayout rate
    return max(source.stored_elements, result.stored_elements)


def vreg_fill(shape: Shape) -> int:
    """How many times its bytes a 32-bit array in VMEM in tiles of fewer than 8 rows takes
    in vregs: ``8 / rows`` (each 8-sublane vreg holds one tile, ``rows`` of its sublanes
    filled); 1 for any other array.

    >>> from aoizora.hlo.shapes import parse_shape
    >>> vreg_fill(parse_shape("f32[4,4096,32,2]{1,3,2,0:T(2,128)S(1)}", 0)[0])
    4
    >>> vreg_fill(parse_shape("f32[4,4096,32,2]{1,3,2,0:T(2,128)}", 0)[0])  # in HBM
    1
    """
    rows = shape.tile_rows
    if (shape.is_tuple or not shape.memory_space or rows not in (1, 2, 4)
            or ELEMENT_BITS.get(shape.element_type) != 32):  # fmt: skip
        return 1
    return _SUBLANES // rows


def sublane_reduce_fill(comp: Computation, instr: Instruction) -> int:
    """How many times its bytes a ``reduce`` moves through the vector unit: its first
    operand's :func:`vreg_fill` where the reduction runs over that operand's tiled row
    dimension; 1 otherwise. A GroupNorm's statistics over ``[B, HW, 32, C/32]`` with 2
    channels a group: 8.0 ps an element on v5e against 1.2-2.0 at 8, 1.3-2 ns a vreg at
    every tile height (validation/README.md, section 20).

    >>> from aoizora.hlo.text import parse_module
    >>> m = parse_module('''HloModule m
    ... %add (a: f32[], b: f32[]) -> f32[] {
    ...   %a = f32[] parameter(0)
    ...   %b = f32[] parameter(1)
    ...   ROOT %s = f32[] add(%a, %b)
    ... }
    ... ENTRY %e (p: f32[4,4096,32,2]) -> f32[4,32] {
    ...   %p = f32[4,4096,32,2]{1,3,2,0:T(2,128)S(1)} parameter(0)
    ...   %z = f32[] constant(0)
    ...   %r = f32[4,32]{1,0:T(4,128)} reduce(%p, %z), dimensions={1,3}, to_apply=%add
    ...   ROOT %k = f32[4,2]{1,0:T(4,128)} reduce(%p, %z), dimensions={1,2}, to_apply=%add
    ... }''')
    >>> sublane_reduce_fill(m.entry, m.entry.by_name["r"])  # over the 2-row tiles' rows
    4
    >>> sublane_reduce_fill(m.entry, m.entry.by_name["k"])  # the rows are kept
    1
    """
    if instr.opcode != "reduce" or not instr.operands:
        return 1
    source = comp.by_name[instr.operands[0]].shape
    fill = vreg_fill(source)
    if fill == 1:
        return 1
    reduced = {int(d) for d in re.findall(r"\d+", instr.attrs.get("dimensions", ""))}
    return fill if source.tiling[1][0] in reduced else 1


def retile(source: Shape, result: Shape) -> bool:
    """Whether a relayout writes 8-row tiles into HBM out of 2-row bf16 ones: on v5e those
    ran at 0.43-0.48e12 B/s in the Wan steps, not the stream's 0.67e12 (docs/simulator.md,
    "Kernels in VMEM and relayouts").

    >>> from aoizora.hlo.shapes import parse_shape
    >>> a = parse_shape("bf16[8,1024,40]{2,1,0:T(2,128)(2,1)}", 0)[0]
    >>> b = parse_shape("bf16[8,1024,40]{1,2,0:T(8,128)(2,1)}", 0)[0]
    >>> retile(a, b), retile(b, a)
    (True, False)
    """
    return (source.element_type == "bf16" and source.tile_rows == 2 and result.tile_rows == 8
            and not result.memory_space)  # fmt: skip


_SUBLANES = 8  # a vreg's sublanes: 8 rows of 32-bit words
_NO_ESTIMATE = '"estimated_cycles":"9223372036854775807"'  # INT64_MAX: no estimate
_KERNEL_WINDOW = re.compile(r'"kernel_window_bounds":\[([^\]]*)\]')
_LANES = 128  # a vreg's lanes: a kernel window counts a row in tiles of 128 elements


def naive_window(backend_config: str, row: int) -> bool | None:
    """Whether a compiled fusion with a whole-row reduce-window over rows of ``row``
    elements runs it with XLA's naive emitter: its backend config names a reduce-window
    emitter and, for the sublane emitter, its kernel window (``kernel_window_bounds``, in
    tiles of 128) holds less than the row, so the kernel steps over the row once for every
    output tile (a grid of (row / 128)^2); where the config gives no such window (or names
    the lane emitter), libtpu's cost model having no cycle estimate for it (INT64_MAX).
    None where the config names no such emitter (a program before layout, another
    backend). On v5e (libtpu 0.0.42.1) the window held the row up to 5,376 elements (16.5
    MB of scoped VMEM) and every such kernel ran at the rate of its bytes; from 5,632 it
    held one tile and ran 15-23x slower an element. The cycle estimate alone misread one
    kernel: at 5,376 it had none and ran at its bytes' rate (validation/README.md, "The
    program zoo").

    >>> cfg = ('{"emitter":"EmitReduceWindowSublane"},"estimated_cycles":"%s",'
    ...        '"kernel_window_bounds":["1","1","%d"]')
    >>> naive_window(cfg % ("9223372036854775807", 1), 5632)
    True
    >>> naive_window(cfg % ("9223372036854775807", 42), 5376)  # no estimate, whole row
    False
    >>> naive_window('{"emitter":"EmitReduceWindowSublane"},"estimated_cycles":"502825"', 4096)
    False
    >>> naive_window('{"emitter":"EmitMatmul"}', 4096) is None
    True
    """
    if "EmitReduceWindow" not in backend_config:
        return None
    window = _KERNEL_WINDOW.search(backend_config)
    if window is None or "EmitReduceWindowSublane" not in backend_config:
        # the lane emitter's window counts its row otherwise (4 for 1,024 f32 elements):
        # measured with an estimate and at its bytes' rate every time, the estimate decides
        return _NO_ESTIMATE in backend_config
    tiles = math.prod(int(b.strip().strip('"')) for b in window.group(1).split(",") if b.strip())
    return tiles * _LANES < row


def sublane_f32_rows(comp: Computation, backend_config: str, outputs: float) -> bool:
    """Whether a fusion (calling ``comp``) with a whole-row reduce-window of ``outputs``
    elements reads its rows as f32 from HBM with XLA's sublane emitter: its backend config
    names ``EmitReduceWindowSublane`` and ``comp`` takes an f32 parameter in HBM at least
    as large. On v5e only those ran slower than their bytes (17.4-18.1 ps an element over
    rows of 3,072 to 5,120); with bf16 rows (the scores' convert fused in) or the lane
    emitter, at the rate of their bytes (validation/README.md, section 18).

    >>> from aoizora.hlo.text import parse_module
    >>> m = parse_module('''HloModule m
    ... %w (p: f32[8,64,64]) -> f32[8,64,64] {
    ...   %p = f32[8,64,64]{1,2,0:T(8,128)} parameter(0)
    ...   %z = f32[] constant(0)
    ...   ROOT %r = f32[8,64,64]{1,2,0:T(8,128)} add(%p, %p)
    ... }
    ... ENTRY %e (s: f32[8,64,64]) -> f32[8,64,64] {
    ...   ROOT %s = f32[8,64,64]{1,2,0:T(8,128)} parameter(0)
    ... }''')
    >>> sublane = '{"emitter":"EmitReduceWindowSublane"}'
    >>> sublane_f32_rows(m.computations["w"], sublane, 32768.0)
    True
    >>> sublane_f32_rows(m.computations["w"], sublane.replace("Sublane", "Lane"), 32768.0)
    False
    """
    if "EmitReduceWindowSublane" not in backend_config:
        return False
    return any(
        i.opcode == "parameter" and i.shape.element_type == "f32" and not i.shape.memory_space
        and i.shape.num_elements >= outputs
        for i in comp.instructions
    )  # fmt: skip
