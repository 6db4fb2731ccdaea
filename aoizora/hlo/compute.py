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
  window size. Data movement (copy, slice, transpose, broadcast, ...) has 0 flops.
  These are approximations; dots and convolutions carry nearly all flops of a
  transformer step.
- HBM bytes of a top-level instruction: operands read plus result written.
  A fusion reads each parameter once, except that a parameter only sliced
  (``dynamic-slice``/``slice``/``gather``) costs the slice, a parameter only
  passed through to the output or into a collective costs nothing, and an
  output produced by ``dynamic-update-slice`` costs the update (in place).
  Without this, a ``scan`` over 40 stacked layer weights would "read" all 40
  layers in every iteration. Bookkeeping ops (``parameter``, ``constant``,
  ``tuple``, ``get-tuple-element``, ``bitcast``, ``copy-start``/``copy-done``
  DMAs, control flow) cost 0 here.

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
from dataclasses import dataclass

from aoizora.hlo.text import Computation, HloModule, Instruction
from sim.compute import Matmul, Work
from sim.costs import ConvDim, conv_matmul

__all__ = ["COLLECTIVE_OPCODES", "CostModel", "FusionSummary", "collective_base"]

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
        "async-done", "domain", "iota",
    }
)  # fmt: skip
_SLICERS = frozenset({"dynamic-slice", "slice", "gather"})
_MARKER_TARGETS = frozenset({"AsyncCollectiveStart", "AsyncCollectiveDone"})
_WINDOW_SIZE_RE = re.compile(r"size=([\dx]+)")


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
    """What a fused computation does: its work, HBM traffic and what it contains."""

    matmuls: tuple[Matmul, ...]
    other_flops: float
    param_read_bytes: tuple[int, ...]
    output_bytes: int
    collectives: tuple[tuple[Computation, Instruction], ...]
    markers: frozenset[str]
    custom_calls: tuple[Instruction, ...]

    @property
    def flops(self) -> float:
        return sum(m.flops for m in self.matmuls) + self.other_flops

    @property
    def work(self) -> Work:
        """The fusion as one kernel: its matmuls, other FLOPs and HBM bytes."""
        hbm = sum(self.param_read_bytes) + self.output_bytes
        return Work(matmuls=self.matmuls, other_flops=self.other_flops, hbm_bytes=hbm)


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
            m = _WINDOW_SIZE_RE.search(instr.attrs.get("window", ""))
            window = math.prod(int(v) for v in m.group(1).split("x")) if m else 1
            return (), float(instr.shape.num_elements * window)
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
            return self.fusion(instr).work
        matmuls, other = self._own(comp, instr)
        if op in _FREE or collective_base(op) is not None:
            nbytes = 0
        elif op in _SLICERS:
            nbytes = 2 * instr.shape.size_bytes
        elif op == "dynamic-update-slice":
            nbytes = 2 * comp.by_name[instr.operands[1]].shape.size_bytes
        else:
            nbytes = sum(comp.by_name[o].shape.size_bytes for o in instr.operands)
            nbytes += instr.shape.size_bytes
        return Work(matmuls=matmuls, other_flops=other, hbm_bytes=nbytes)

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
        users: dict[str, list[Instruction]] = {}
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
        root = comp.root
        params: list[int] = []
        index = 0
        while True:
            param = comp.parameter(index)
            if param is None:
                break
            params.append(self._param_read(param, users, root))
            index += 1
        return FusionSummary(
            matmuls=tuple(matmuls),
            other_flops=other,
            param_read_bytes=tuple(params),
            output_bytes=self._output_bytes(comp, root),
            collectives=tuple(collectives),
            markers=frozenset(markers),
            custom_calls=tuple(custom),
        )

    def _param_read(
        self, param: Instruction, users: dict[str, list[Instruction]], root: Instruction
    ) -> int:
        total = 0
        for user in users.get(param.name, []):
            if user is root and user.opcode == "tuple":
                continue  # passed through unchanged
            base = collective_base(user.opcode)
            target = user.attrs.get("custom_call_target", "").strip('"')
            if base is not None or target in _MARKER_TARGETS:
                continue  # the collective moves it, the core does not read it
            if user.opcode in _SLICERS and user.operands[0] == param.name:
                total += user.shape.size_bytes
            elif user.opcode == "dynamic-update-slice" and user.operands[0] == param.name:
                continue  # updated in place; the update operand is read instead
            elif user.opcode == "bitcast":
                total += self._param_read(user, users, root)
            else:
                return param.shape.size_bytes
        return min(total, param.shape.size_bytes)

    def _output_bytes(self, comp: Computation, root: Instruction) -> int:
        elements = [comp.by_name[o] for o in root.operands] if root.opcode == "tuple" else [root]
        total = 0
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
                total += comp.by_name[producer.operands[1]].shape.size_bytes
            else:
                total += producer.shape.size_bytes
        return total
