"""Compute cost of HLO instructions from their shapes: flops and HBM bytes.

What is counted (per device, one execution):

- ``dot``: ``2 * prod(result dims) * prod(lhs contracting dim sizes)`` — each
  output element is a length-K multiply-add chain (XLA ``HloCostAnalysis``
  ``HandleDot`` counts the same ``2*M*N*K``).
- ``convolution`` (TPU prints most matmuls as convolutions, ``dim_labels=bf_io->bf``):
  ``2 * prod(result dims) * prod(kernel dims except the output feature 'o')``;
  the kernel's ``i`` dimension is already the per-group input feature count, so
  ``feature_group_count``/``batch_group_count`` need no extra factor
  (``HloCostAnalysis::HandleConvolution``).
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
    >>> costs.instruction(m.entry, m.entry.root)
    (1024.0, 896)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from aoizora.hlo.text import Computation, HloModule, Instruction

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


@dataclass(frozen=True)
class FusionSummary:
    """What a fused computation does: flops, HBM traffic and what it contains."""

    flops: float
    param_read_bytes: tuple[int, ...]
    output_bytes: int
    collectives: tuple[tuple[Computation, Instruction], ...]
    markers: frozenset[str]
    custom_calls: tuple[Instruction, ...]


class CostModel:
    """Flops and bytes of instructions of one module, with per-computation caches."""

    def __init__(self, module: HloModule) -> None:
        self.module = module
        self._fusions: dict[str, FusionSummary] = {}

    def flops(self, comp: Computation, instr: Instruction) -> float:
        """Flops of one instruction (a fusion: of its whole fused computation)."""
        op = instr.opcode
        if op == "fusion":
            return self.fusion(instr).flops
        if op == "dot":
            lhs = comp.by_name[instr.operands[0]].shape
            k = math.prod(lhs.dims[d] for d in _dims_attr(instr, "lhs_contracting_dims"))
            return 2.0 * instr.shape.num_elements * k
        if op == "convolution":
            labels = instr.attrs.get("dim_labels", "")
            kernel = comp.by_name[instr.operands[1]].shape
            rhs_labels = labels.split("_", 1)[1].split("->", 1)[0] if "_" in labels else ""
            if len(rhs_labels) == len(kernel.dims):
                k = math.prod(d for d, c in zip(kernel.dims, rhs_labels, strict=True) if c != "o")
            else:  # no labels: treat as a plain matmul over the kernel's first dim
                k = kernel.dims[0] if kernel.dims else 1
            return 2.0 * instr.shape.num_elements * k
        if op in _ELEMENTWISE:
            return float(instr.shape.num_elements)
        if op == "reduce":
            half = max(1, len(instr.operands) // 2)
            return float(sum(comp.by_name[o].shape.num_elements for o in instr.operands[:half]))
        if op == "reduce-window":
            m = _WINDOW_SIZE_RE.search(instr.attrs.get("window", ""))
            window = math.prod(int(v) for v in m.group(1).split("x")) if m else 1
            return float(instr.shape.num_elements * window)
        return 0.0

    def instruction(self, comp: Computation, instr: Instruction) -> tuple[float, int]:
        """``(flops, hbm_bytes)`` of a top-level (non-fused) instruction."""
        op = instr.opcode
        if op == "fusion":
            summary = self.fusion(instr)
            return summary.flops, sum(summary.param_read_bytes) + summary.output_bytes
        flops = self.flops(comp, instr)
        if op in _FREE or collective_base(op) is not None:
            return flops, 0
        if op in _SLICERS:
            return flops, 2 * instr.shape.size_bytes
        if op == "dynamic-update-slice":
            return flops, 2 * comp.by_name[instr.operands[1]].shape.size_bytes
        read = sum(comp.by_name[o].shape.size_bytes for o in instr.operands)
        return flops, read + instr.shape.size_bytes

    def fusion(self, instr: Instruction) -> FusionSummary:
        """Summary of the computation a fusion instruction calls (cached)."""
        name = instr.attrs.get("calls", "").strip().lstrip("%")
        cached = self._fusions.get(name)
        if cached is None:
            cached = self._summarise(self.module.computations[name])
            self._fusions[name] = cached
        return cached

    def _summarise(self, comp: Computation) -> FusionSummary:
        flops = 0.0
        collectives: list[tuple[Computation, Instruction]] = []
        markers: set[str] = set()
        custom: list[Instruction] = []
        users: dict[str, list[Instruction]] = {}
        for instr in comp.instructions:
            for operand in instr.operands:
                users.setdefault(operand, []).append(instr)
            if instr.opcode == "fusion":
                inner = self.fusion(instr)
                flops += inner.flops
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
                flops += self.flops(comp, instr)
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
            flops=flops,
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
