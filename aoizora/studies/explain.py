"""A step explained op by op: what the device measured beside what the compute model predicts.

:func:`op_prices` prices every instruction the replay prices -- the kernels of the
collective graph's compute segments and its opaque calls (:mod:`aoizora.hlo.graph`),
each at the device's compute model, times its executions per step -- so their sum is the
step's compute as the plan predicts it. :func:`explain` joins them with a device profile
(:mod:`aoizora.hlo.profile`) of the *same* compiled module by instruction name and
sums both per category (:data:`CATEGORIES`).

Control-flow ops (``while``, ``call``, ``conditional``) appear in a profile spanning
their bodies: they are left out of every sum, so the sum of device ops is the time the
core spent in instructions, to hold against the measured step. Collectives are timed
on the device but simulated on the network (their predicted time is not a per-op
figure): their rows carry a measured time and no prediction.

    >>> rows = (OpRow("fusion.1", "matmul", 1.0, 0.010, 0.011, 2e9, 1e6),
    ...         OpRow("copy.2", "copy/transpose", 1.0, 0.002, 0.001, 0.0, 4e6))
    >>> e = Explanation(module="jit_step", device="/device:TPU:0", step_s=0.0121,
    ...                 rows=rows, unmatched=())
    >>> round(e.device_ops_s, 4), round(e.predicted_s, 4)
    (0.012, 0.012)
    >>> [(c.category, round(c.error_percent, 1)) for c in e.categories()]
    [('matmul', 10.0), ('copy/transpose', -50.0)]
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aoizora.hlo.compute import CostModel, collective_base
from aoizora.hlo.graph import BOOKKEEPING_CALLS, build_graph
from aoizora.hlo.nodes import CollectiveGraph, ComputeSegment, OpaqueCall
from aoizora.hlo.profile import DeviceProfile
from aoizora.hlo.text import Computation, HloModule, Instruction
from aoizora.replay import is_attention_call, opaque_work
from sim.chips import Chip
from sim.compute import Work

__all__ = [
    "CATEGORIES",
    "CATEGORY_FLOOR_S",
    "category_of",
    "CategoryRow",
    "explain",
    "Explanation",
    "instructions_by_name",
    "op_prices",
    "op_works",
    "OpPrice",
    "OpRow",
]

# The categories of the table, in print order.
CATEGORIES = (
    "matmul",
    "attention",
    "elementwise/reduce",
    "copy/transpose",
    "pad",
    "async",
    "collectives",
    "custom calls",
    "other",
)
# Under a microsecond a step, measured and predicted, a category holds no kernel: the
# smallest thing the compute model prices is one kernel's launch (0.71 us on v5e,
# topologies/v5e.toml); the profiles' compiler bookkeeping (custom calls that launch
# nothing) sums to nanoseconds, which a percentage would only magnify.
CATEGORY_FLOOR_S = 1e-6
_CONTROL = frozenset({"while", "call", "conditional"})
_COPY = frozenset({"copy", "transpose"})
_ASYNC = frozenset(
    {"copy-start", "copy-done", "slice-start", "slice-done", "async-start", "async-update",
     "async-done", "send", "send-done", "recv", "recv-done"}
)  # fmt: skip


@dataclass(frozen=True)
class OpPrice:
    """The model's price of one instruction per step: its executions and their total."""

    name: str
    opcode: str
    category: str
    count_per_step: float
    predicted_s: float
    flops: float
    hbm_bytes: float


@dataclass(frozen=True)
class OpRow:
    """One instruction: measured and predicted seconds per step (None: not predicted)."""

    name: str
    category: str
    count_per_step: float
    measured_s: float
    predicted_s: float | None
    flops: float
    hbm_bytes: float

    @property
    def error_percent(self) -> float | None:
        if self.predicted_s is None or self.measured_s <= 0:
            return None
        return 100.0 * (self.predicted_s - self.measured_s) / self.measured_s


@dataclass(frozen=True)
class CategoryRow:
    """One category's sums per step."""

    category: str
    ops: int
    measured_s: float
    predicted_s: float

    @property
    def error_percent(self) -> float:
        """Predicted over measured, in percent; NaN (JSON null, ``-`` in the table) when
        both are under :data:`CATEGORY_FLOOR_S`: bookkeeping the device times in
        nanoseconds (an ``AllocateBuffer`` custom call), no kernel to compare."""
        if max(self.measured_s, self.predicted_s) < CATEGORY_FLOOR_S:
            return math.nan
        if self.measured_s <= 0:
            return math.inf if self.predicted_s > 0 else 0.0
        return 100.0 * (self.predicted_s - self.measured_s) / self.measured_s


@dataclass(frozen=True)
class Explanation:
    """A profiled step beside its prediction (module docstring)."""

    module: str
    device: str
    step_s: float
    rows: tuple[OpRow, ...]
    unmatched: tuple[str, ...]

    @property
    def device_ops_s(self) -> float:
        """The sum of the device's op times per step (control flow left out)."""
        return sum(r.measured_s for r in self.rows)

    @property
    def predicted_s(self) -> float:
        """The sum of the predicted op times per step (the step's compute as priced)."""
        return sum(r.predicted_s or 0.0 for r in self.rows)

    def categories(self) -> tuple[CategoryRow, ...]:
        """Per-category sums, in :data:`CATEGORIES` order, empty categories left out."""
        out = []
        for cat in CATEGORIES:
            rows = [r for r in self.rows if r.category == cat]
            if rows:
                measured = sum(r.measured_s for r in rows)
                predicted = sum(r.predicted_s or 0.0 for r in rows)
                out.append(CategoryRow(cat, len(rows), measured, predicted))
        return tuple(out)

    def to_json_dict(self, *, top: int | None = None) -> dict[str, Any]:
        """JSON fields: ``module``, ``device``, ``step_s`` (measured), ``device_ops_s``,
        ``predicted_s``, ``categories`` and ``ops`` (by measured time, ``top`` first)."""
        rows = sorted(self.rows, key=lambda r: (-r.measured_s, r.name))
        return {
            "module": self.module,
            "device": self.device,
            "step_s": self.step_s,
            "device_ops_s": self.device_ops_s,
            "predicted_s": self.predicted_s,
            "categories": [
                {
                    "category": c.category,
                    "ops": c.ops,
                    "measured_s": c.measured_s,
                    "predicted_s": c.predicted_s,
                    "error_percent": _finite(c.error_percent),
                }
                for c in self.categories()
            ],  # fmt: skip
            "ops": [
                {
                    "name": r.name,
                    "category": r.category,
                    "count_per_step": r.count_per_step,
                    "measured_s": r.measured_s,
                    "predicted_s": r.predicted_s,
                    "error_percent": r.error_percent,
                    "flops": r.flops,
                    "hbm_bytes": r.hbm_bytes,
                }
                for r in rows[:top]
            ],  # fmt: skip
            "unmatched": list(self.unmatched),
        }


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def category_of(comp: Computation, instr: Instruction, costs: CostModel) -> str:
    """The category of one top-level instruction of ``comp`` (:data:`CATEGORIES`)."""
    op = instr.opcode
    if collective_base(op) is not None:
        return "collectives"
    if op in _ASYNC:
        return "async"
    if op == "custom-call":
        label = f"{instr.name} {instr.attrs.get('metadata', '')}"
        return "attention" if is_attention_call(label) else "custom calls"
    if op == "fusion":
        summary = costs.fusion(instr)
        if summary.collectives or summary.markers:
            return "collectives"
        if summary.matmuls:
            return "matmul"
        # a kernel of its own inside; not the compiler's bookkeeping (an AllocateBuffer
        # that a dynamic-update-slice fills is a data movement, not a custom call)
        targets = {c.attrs.get("custom_call_target", "").strip('"') for c in summary.custom_calls}
        if targets - BOOKKEEPING_CALLS:
            return "custom calls"
        return "elementwise/reduce"
    if op in ("dot", "convolution"):
        return "matmul"
    if op in _COPY:
        return "copy/transpose"
    if op == "pad":
        return "pad"
    if op in ("reduce", "reduce-window", "select-and-scatter") or costs.flops(comp, instr):
        return "elementwise/reduce"
    return "other"


def instructions_by_name(module: HloModule) -> dict[str, tuple[Computation, Instruction]]:
    out: dict[str, tuple[Computation, Instruction]] = {}
    for comp in module.computations.values():
        for instr in comp.instructions:
            out.setdefault(instr.name, (comp, instr))
    return out


def op_works(
    module: HloModule, *, graph: CollectiveGraph | None = None
) -> dict[str, tuple[Work, float]]:
    """Every kernel the replay prices: instruction name -> (its work, executions per step).
    A name met in several places (a computation called twice) keeps its first work."""
    graph = build_graph(module) if graph is None else graph
    out: dict[str, tuple[Work, float]] = {}

    def add(name: str, work: Work, count: float) -> None:
        old = out.get(name)
        out[name] = (work, count) if old is None else (old[0], old[1] + count)

    for region in graph.regions:
        for step in region.steps:
            if isinstance(step, ComputeSegment):
                for name, work in zip(step.names, step.kernels, strict=True):
                    add(name, work, region.count)
            elif isinstance(step, OpaqueCall):
                node = graph.opaques[step.opaque]
                add(node.name, opaque_work(node), node.count)
    return out


def op_prices(
    module: HloModule, chip: Chip, *, graph: CollectiveGraph | None = None
) -> dict[str, OpPrice]:
    """Every instruction the replay prices, with its price per step on ``chip`` (one device)."""
    model = chip.per_device().compute_model()
    by_name = instructions_by_name(module)
    costs = CostModel(module)
    out = {}
    for name, (work, count) in op_works(module, graph=graph).items():
        found = by_name.get(name)
        opcode = found[1].opcode if found is not None else "?"
        category = category_of(*found, costs) if found is not None else "other"
        out[name] = OpPrice(
            name, opcode, category, count, model.time_s(work) * count, work.flops * count,
            work.hbm_bytes * count,
        )  # fmt: skip
    return out


def explain(
    profile: DeviceProfile, module: HloModule, prices: Mapping[str, OpPrice]
) -> Explanation:
    """Join ``profile`` (measured, per op) with ``prices`` (:func:`op_prices` of ``module``,
    the module that ran) by instruction name."""
    by_name = instructions_by_name(module)
    costs = CostModel(module)
    rows: list[OpRow] = []
    unmatched: list[str] = []
    for op in profile.ops:
        found = by_name.get(op.name)
        if found is None:
            unmatched.append(op.name)
            continue
        if found[1].opcode in _CONTROL:
            continue
        price = prices.get(op.name)
        category = price.category if price is not None else category_of(*found, costs)
        predicted = None if category == "collectives" else (price.predicted_s if price else 0.0)
        rows.append(
            OpRow(
                op.name, category, op.count_per_step, op.per_step_s, predicted,
                price.flops if price else 0.0, price.hbm_bytes if price else 0.0,
            )
        )  # fmt: skip
    seen = {r.name for r in rows}
    for name, price in prices.items():  # priced but never seen on the device
        if name not in seen and price.predicted_s > 0:
            rows.append(OpRow(name, price.category, 0.0, 0.0, price.predicted_s, price.flops,
                              price.hbm_bytes))  # fmt: skip
    return Explanation(profile.module, profile.device, profile.step_s, tuple(rows),
                       tuple(sorted(unmatched)))  # fmt: skip
