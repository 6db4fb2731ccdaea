"""The HBM traffic of a compiled matmul kernel that re-reads its operands, tile by tile.

libtpu compiles a matmul fusion as a loop over a grid of tiles and prints the grid in the
fusion's ``backend_config`` (``window_config``: ``iteration_bounds``, and the
``input_window_bounds``, ``kernel_window_bounds`` and ``output_window_bounds`` of one
iteration, in units of the (8, 128) tile over the two most minor dimensions). Each
iteration fetches its input (lhs) window and its kernel (rhs) window into the core's
vector memory. So the lhs, with whatever its fused prologue reads (a layer norm's
per-token f32 scale and shift), is read once per output-column tile, and the kernel once
per row tile when the contraction is split over iterations (the last bound; with the whole
contraction in one iteration the kernel window stays put while the rows go by). A kernel
that reads its operands once (:class:`aoizora.hlo.compute.FusionSummary`) undercounts that.

Measured on a TPU v5e chip (docs/simulator.md, "Compute model"): TI2V-5B's MLP
up-projection (``bf16[2,2420,3072] @ [3072,14336]`` with the per-token modulation fused in
front, a 7 x 5 x 2 x 8 grid of 488 x 384 x 2048 windows) took 2.755 ms a call; priced by
its FLOPs it was 2.45 ms (-11 %), by its operand windows' bytes at the fitted HBM rate
2.80 ms (+1.7 %). Wan 2.1's and the DiTs' projections stay MXU-bound: their windows' bytes
take less time than their FLOPs.

Only the grids whose window layout is checked here are priced this way (the emitter
``EmitAllBatchInSublanes`` over a plain matmul: one convolution without spatial taps,
features the most minor dimension of its input and output, the kernel's output features
its most minor); any other kernel keeps its read-once bytes.

>>> from aoizora.hlo.text import parse_module
>>> from aoizora.hlo.compute import CostModel  # the pricing this module serves
>>> grid = ('{"convolution_algorithm_config":{"emitter":"EmitAllBatchInSublanes"},'
...         '"window_config":{"iteration_bounds":["4","8","2"],'
...         '"input_window_bounds":["64","4"],"kernel_window_bounds":["64","8"]}}')
>>> m = parse_module(f'''HloModule m
... %f (p0: bf16[4096,1024], p1: bf16[1024,4096]) -> bf16[4096,4096] {{
...   %p0 = bf16[4096,1024]{{1,0}} parameter(0)
...   %p1 = bf16[1024,4096]{{1,0}} parameter(1)
...   ROOT %c = bf16[4096,4096]{{1,0}} convolution(%p0, %p1), dim_labels=bf_io->bf
... }}
... ENTRY %e (a: bf16[4096,1024], b: bf16[1024,4096]) -> bf16[4096,4096] {{
...   %a = bf16[4096,1024]{{1,0}} parameter(0)
...   %b = bf16[1024,4096]{{1,0}} parameter(1)
...   ROOT %x = bf16[4096,4096]{{1,0}} fusion(%a, %b), kind=kOutput, calls=%f, backend_config={grid}
... }}''')
>>> x = m.entry.root
>>> s = CostModel(m).fusion(x)
>>> s.work.hbm_bytes  # each operand once, the output once
50331648
>>> window_traffic_bytes(m, x, param_read_bytes=s.param_read_bytes,  # lhs 4 times (4
...     output_bytes=s.output_bytes, once_bytes=s.work.hbm_bytes)  # columns), kernel 8 (rows)
134217728
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from aoizora.hlo.fused import has_spatial_taps
from aoizora.hlo.text import Computation, HloModule, Instruction

__all__ = ["window_traffic_bytes"]

# The emitter whose window layout (rows and contraction of the input, contraction and
# output features of the kernel) was checked against compiled Wan and DiT steps.
_EMITTER = "EmitAllBatchInSublanes"
_LANES = 128  # a window's most minor bound counts tiles of 128 lanes
_WINDOW_RE = re.compile(r'"window_config":(\{[^{}]*\})')
_EMITTER_RE = re.compile(r'"emitter":"([^"]*)"')


def _grid(instr: Instruction) -> dict[str, list[int]] | None:
    """The fusion's ``window_config`` bounds, or None when it has none or another emitter."""
    config = instr.attrs.get("backend_config", "")
    emitter = _EMITTER_RE.search(config)
    window = _WINDOW_RE.search(config)
    if emitter is None or emitter.group(1) != _EMITTER or window is None:
        return None
    try:
        data: dict[str, Any] = json.loads(window.group(1))
        # the iterations and the kernel window's output features are all the count needs
        grid = {k: [int(v) for v in data[k]] for k in ("iteration_bounds", "kernel_window_bounds")}
    except (KeyError, TypeError, ValueError):
        return None
    return grid if grid["iteration_bounds"] and grid["kernel_window_bounds"] else None


def _plain_matmul(comp: Computation) -> Instruction | None:
    """The fused computation's one convolution, when it is a plain matmul with features
    the most minor dimension of its input and output (``...f_...io->...f``)."""
    convs = [i for i in comp.instructions if i.opcode == "convolution"]
    if len(convs) != 1:
        return None
    conv = convs[0]
    # spatial dimensions (digits in the labels) are windows of one tap: set them aside
    labels = re.sub(r"\d", "", conv.attrs.get("dim_labels", ""))
    parts = re.fullmatch(r"([a-z]+)_([a-z]+)->([a-z]+)", labels)
    if parts is None or not (parts[1].endswith("f") and parts[2].endswith("io")):
        return None
    if not parts[3].endswith("f") or has_spatial_taps(conv):
        return None
    return conv


def _feeds(comp: Computation, start: str) -> set[str]:
    """Names of the parameters of ``comp`` that ``start`` is computed from."""
    seen: set[str] = set()
    stack = [start]
    params: set[str] = set()
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        instr = comp.by_name[name]
        if instr.opcode == "parameter":
            params.add(name)
        stack.extend(instr.operands)
    return params


def window_traffic_bytes(
    module: HloModule,
    instr: Instruction,
    *,
    param_read_bytes: tuple[int, ...],
    output_bytes: int,
    once_bytes: int,
) -> int:
    """HBM bytes of the matmul fusion ``instr`` with its operand windows read once per grid
    iteration (module docstring), given the HBM bytes it reads of each parameter once
    (``param_read_bytes``) and writes (``output_bytes``); ``once_bytes`` where its grid
    is not one this module knows, and never less."""
    grid = _grid(instr)
    comp = module.computations.get(instr.attrs.get("calls", "").strip().lstrip("%"))
    conv = _plain_matmul(comp) if comp is not None and grid is not None else None
    if grid is None or comp is None or conv is None:
        return once_bytes
    number = {p.name: k for k in range(len(param_read_bytes)) if (p := comp.parameter(k))}
    lhs = _feeds(comp, conv.operands[0])
    rhs = _feeds(comp, conv.operands[1]) - lhs
    read = param_read_bytes
    lhs_bytes = sum(read[number[p]] for p in lhs if p in number)
    rhs_bytes = sum(read[number[p]] for p in rhs if p in number)
    rest = sum(read) - lhs_bytes - rhs_bytes
    steps = math.prod(grid["iteration_bounds"])
    depth = grid["iteration_bounds"][-1]  # contraction steps: more than 1, the kernel moves
    columns = -(-conv.shape.dims[-1] // (grid["kernel_window_bounds"][-1] * _LANES))
    rows = max(1, steps // (columns * depth))
    # each lhs element is fetched once per column tile, unless one window holds the whole
    # lhs (one row tile, the contraction unsplit): a window whose place does not change
    # between iterations is not fetched again; each kernel element once per row tile when
    # the contraction is split (else its window stays put over the rows)
    lhs_reads = columns if rows * depth > 1 else 1
    rhs_reads = rows if depth > 1 else 1
    traffic = lhs_bytes * lhs_reads + rhs_bytes * rhs_reads + rest + output_bytes
    return max(once_bytes, round(traffic))
