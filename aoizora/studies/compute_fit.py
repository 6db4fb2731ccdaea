"""Fit a generation's ``[compute]`` table to kernel microbenchmarks and profiled steps.

Inputs: the samples of ``aoizora measure --kernels`` (:mod:`aoizora.measure.kernels`) and
device profiles of whole steps with the HLO that ran (``aoizora measure --profile``). Each
parameter of :class:`sim.compute.ComputeParams` is fitted to the measurements that
isolate it, in this order, each step holding the earlier ones fixed:

1. ``hbm_efficiency`` and ``kernel_overhead_s``: the ``stream`` kernels (an element-wise
   pass over 1 MiB to 1 GiB), least squares on ``t = bytes / (eta * B) + t0`` with relative
   weights (every size counts alike).
2. ``attention_efficiency.splash`` and ``attention_grid.splash``: the splash kernels of
   blocks below 512 (how the time grows with the grid) and every splash op of the profiled
   steps (block 512, as a plan's program runs it), least squares on ``t = padded FLOPs /
   (eta * P) + grid steps * s + q blocks * q`` (relative weights).
3. ``matmul_efficiency``: the matmul ops of the profiled steps bound by the MXU (their
   fused epilogues included), the ratio of their padded FLOPs at the peak to their
   measured time less the kernel overhead (a time-weighted mean).
   ``bare_matmul_efficiency``: the same ratio over the standalone matmul kernels of at
   least 16M outputs and a contraction of at least 1,024 (nothing fused: they run faster
   than the steps' fused matmuls, :meth:`sim.compute.ComputeModel.mxu_s`).
   ``matmul_fused_op_cost``: the same fused ops but those with spatial taps, what each
   element-wise op fused into them adds to the inverse of the bare efficiency
   (time-weighted, closed form).
4. ``hbm_read_efficiency``: the matmul ops of the profiled steps bound by HBM whose reads
   exceed their writes (at least 90 % of their bytes are reads beyond the writes: an
   attention-value product reading f32 probabilities, a projection to few channels):
   their reads beyond the writes over their measured time less the kernel overhead and
   the rest of their bytes at ``hbm_efficiency`` (a time-weighted mean).
5. ``hbm_retile_copy_efficiency``: the copies and transposes of the profiled steps out of
   2-row bf16 tiles into 8-row ones in HBM, their bytes over their measured time less the
   kernel overhead (summed over them), as a fraction of the HBM peak.
6. ``vmem_kernel_overhead_s``: the median time of the profiled steps' element-wise
   kernels that move no HBM byte and at most 64 KiB of VMEM (their bytes take under
   0.03 us at any on-chip rate above 2e12 B/s: what is left is the kernel's fixed cost).
7. ``onchip_full_tile_copy_bandwidth_bytes_per_s``: the profiled steps' copies and
   transposes between 8-row tiles that move no HBM byte, their bytes over their measured
   time less that fixed cost (summed over them).
8. ``onchip_bandwidth_bytes_per_s`` and ``onchip_copy_bandwidth_bytes_per_s``: the
   element-wise, copy and pad ops of the profiled steps, the pair on a log grid that
   minimises the mean absolute error of those categories' totals per step.

Every value carries a source naming the files, the device and what determined it.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from aoizora.errors import MeasureError
from aoizora.hlo.compute import CostModel
from aoizora.hlo.profile import DeviceProfile, load_profile, read_text_file
from aoizora.hlo.text import Computation, HloModule, Instruction, parse_module
from aoizora.studies.calibration import quote_key, refuse_shipped, toml_value
from aoizora.studies.explain import category_of, op_works
from sim.chips import Chip
from sim.compute import Attention, ComputeModel, ComputeParams, Matmul, Work
from sim.topology import topologies_dir

__all__ = [
    "ComputeFit",
    "FittedValue",
    "KernelSample",
    "ProfiledStep",
    "fit_compute",
    "load_profiled_steps",
    "read_kernels",
    "write_calibrated_compute",
]

# Attention kernels of blocks below a step's 512 pin how the time grows with the grid;
# at block 512 the steps' own splash ops decide: the bare block-512 kernels (batch 1) ran
# 3-10 % faster on TPU v5e than the same kernel vmapped over a step's CFG batch.
_KERNEL_BLOCK_MAX = 256
_ONCHIP_GRID = np.geomspace(2e11, 2e13, 61)  # bytes per second


@dataclass(frozen=True)
class KernelSample:
    """One kernel of ``aoizora measure --kernels``: kind, parameters, median seconds."""

    kind: str
    name: str
    params: Mapping[str, int]
    median_s: float
    ops_s: Mapping[str, float]


@dataclass(frozen=True)
class ProfiledStep:
    """A profiled step: its name (row id), the device's op times and the HLO that ran."""

    name: str
    profile: DeviceProfile
    module: HloModule


@dataclass(frozen=True)
class FittedValue:
    """One fitted parameter: its ``[compute]`` key, value and source text."""

    key: str
    value: float
    source: str


@dataclass(frozen=True)
class ComputeFit:
    """The fitted parameters, the compute params they make, and what the fit saw."""

    params: ComputeParams
    values: tuple[FittedValue, ...]
    device: str
    notes: tuple[str, ...]

    def value(self, key: str) -> float:
        for v in self.values:
            if v.key == key:
                return v.value
        raise KeyError(key)

    def compute_table(self, shipped: Mapping[str, Any]) -> dict[str, Any]:
        """The shipped ``[compute]`` table with the fitted values and their sources."""
        table = dict(shipped)
        eff = dict(table.get("attention_efficiency", {}))
        grid = dict(table.get("attention_grid", {}))
        for v in self.values:
            entry = {"value": v.value, "source": v.source}
            if v.key.startswith("attention_efficiency."):
                eff[v.key.split(".", 1)[1]] = entry
            elif v.key.startswith("attention_grid."):
                kernel, part = v.key.split(".")[1:]
                grid.setdefault(kernel, {"source": v.source})[part] = v.value
            else:
                table[v.key] = entry
        table["attention_efficiency"] = eff
        if grid:
            table["attention_grid"] = grid
        return table


def read_kernels(path: str | Path) -> tuple[dict[str, Any], tuple[KernelSample, ...]]:
    """(provenance, samples) of a ``kernels.json`` written by ``aoizora measure --kernels``;
    failed kernels are left out."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        samples = tuple(
            KernelSample(
                k["kind"],
                k["name"],
                dict(k["params"]),
                float(k["median_s"]),
                dict(k.get("ops_s") or {}),
            )  # fmt: skip
            for k in data["kernels"]
            if not k.get("error")  # a kernel that failed to run has no time
        )
        return dict(data.get("provenance", {})), samples
    except (OSError, KeyError, TypeError, ValueError) as exc:
        raise MeasureError(
            f"{path}: not a kernels file of aoizora measure --kernels ({type(exc).__name__}: "
            f"{exc}); make one with aoizora measure --kernels --out kernels.json"
        ) from None


def _lstsq(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with relative weights (each sample's error as a fraction of it)."""
    w = 1.0 / y
    solution, *_ = np.linalg.lstsq(a * w[:, None], y * w, rcond=None)
    return np.asarray(solution)


def _fit_stream(chip: Chip, kernels: Sequence[KernelSample]) -> tuple[float, float, int]:
    rows = [k for k in kernels if k.kind == "stream"]
    if len(rows) < 2:
        raise MeasureError("the kernels file holds fewer than 2 stream kernels: cannot fit HBM")
    a = np.array(
        [[2.0 * k.params["size_bytes"] / chip.hbm_bandwidth_bytes_per_s, 1.0] for k in rows]
    )
    inv_eta, t0 = _lstsq(a, np.array([k.median_s for k in rows]))
    return 1.0 / inv_eta, max(0.0, float(t0)), len(rows)


def _kernel_attention(k: KernelSample) -> tuple[Attention, float] | None:
    p = k.params
    if max(p["block_q"], p["block_kv"]) > _KERNEL_BLOCK_MAX:
        return None
    q = math.ceil(p["q_length"] / p["block_q"]) * p["block_q"]
    kv = math.ceil(p["kv_length"] / p["block_kv"]) * p["block_kv"]
    att = Attention(p["heads"], q, kv, 128, 128, p["block_q"], p["block_kv"], "splash")
    own = [s for name, s in k.ops_s.items() if "splash" in name]
    return att, (own[0] if own else k.median_s)


@dataclass(frozen=True)
class _Op:
    step: str
    category: str
    work: Work
    count: float  # executions per step
    seconds: float  # measured, per execution


def _step_ops(steps: Sequence[ProfiledStep]) -> list[_Op]:
    """Every priced op of the profiled steps with its measured time per execution."""
    out = []
    for step in steps:
        works = op_works(step.module)
        index: dict[str, tuple[Computation, Instruction]] = {}
        for comp in step.module.computations.values():
            for instr in comp.instructions:
                index.setdefault(instr.name, (comp, instr))
        costs = CostModel(step.module)
        for op in step.profile.ops:
            if op.name not in works or op.count_per_step <= 0:
                continue
            category = category_of(*index[op.name], costs)
            seconds = op.per_step_s / op.count_per_step
            out.append(_Op(step.name, category, works[op.name][0], op.count_per_step, seconds))
    return out


def _fit_attention(
    peak: float, tile: int, kernels: Sequence[KernelSample], ops: Sequence[_Op]
) -> tuple[float, float, float, int, int]:
    """(efficiency, seconds per grid step, seconds per q block, kernels, step ops)."""
    samples = [x for x in (_kernel_attention(k) for k in kernels if k.kind == "attention") if x]
    n_kernels = len(samples)
    for op in ops:
        for att in op.work.attention:
            if att.kernel == "splash" and att.block_q and len(op.work.attention) == 1:
                samples.append((att, op.seconds))
    if len(samples) < 3:
        raise MeasureError(f"{len(samples)} attention samples: need 3 to fit the kernel")
    a = np.array([[att.padded_flops(tile) / peak, *att.grid()] for att, _ in samples])
    inv_eta, step_s, q_block_s = _lstsq(a, np.array([t for _, t in samples]))
    return 1.0 / inv_eta, max(0.0, step_s), max(0.0, q_block_s), n_kernels, len(samples) - n_kernels


def _hbm_only_s(model: ComputeModel, work: Work) -> float:
    """``work``'s HBM bytes alone at the achieved bandwidth (on-chip bytes are fitted apart),
    a relayout's into 8-row tiles out of 2-row ones at their own (where fitted)."""
    p = model.params
    rate = model.hbm_bandwidth_bytes_per_s
    retile = work.hbm_retile_copy_bytes if p.hbm_retile_copy_efficiency else 0.0
    seconds = (work.hbm_bytes - retile) / (rate * p.hbm_efficiency)
    return seconds + (retile / (rate * p.hbm_retile_copy_efficiency) if retile else 0.0)


def _copy_rate(
    model: ComputeModel, ops: Sequence[_Op], moved: Callable[[Work], float], what: str
) -> tuple[float, int]:
    """(bytes a second, how many) of the steps' copies and transposes that move
    ``moved(work)`` > 0 bytes of a kind: those bytes over their measured time less their
    fixed cost as a kernel, summed over them; ``what`` names the kind in the error."""
    total = seconds = 0.0
    n = 0
    for op in ops:
        nbytes = moved(op.work) if op.category == "copy/transpose" else 0.0
        if nbytes <= 0:
            continue
        total += nbytes * op.count
        seconds += (op.seconds - model.overhead_s(op.work)) * op.count
        n += 1
    if n == 0 or seconds <= 0:
        raise MeasureError(f"the profiled steps hold no copy {what}: cannot fit its rate")
    return total / seconds, n


def _fit_retile(model: ComputeModel, ops: Sequence[_Op]) -> tuple[float, int]:
    """(the HBM efficiency of the steps' relayouts out of 2-row bf16 tiles into 8-row ones
    in HBM, how many): module docstring, step 5."""
    rate, n = _copy_rate(model, ops, lambda w: w.hbm_retile_copy_bytes,
                         "out of 2-row bf16 tiles into 8-row ones in HBM")  # fmt: skip
    return rate / model.hbm_bandwidth_bytes_per_s, n


def _fit_matmul(model: ComputeModel, ops: Sequence[_Op]) -> tuple[float, int]:
    """Time-weighted MXU efficiency of the steps' fused matmul ops that the MXU bounds."""
    p = model.params
    flops = seconds = 0.0
    n = 0
    for op in ops:
        w = op.work
        if op.category != "matmul" or not w.matmuls or w.attention or w.bare_matmul:
            continue  # a bare matmul kernel has its own rate (_fit_bare_matmul)
        padded = sum(m.padded_flops(p.mxu_tile) for m in w.matmuls)
        at_peak = padded / model.peak_flops_per_s
        if at_peak < _hbm_only_s(model, w):
            continue  # memory bound: says nothing of the MXU
        flops += at_peak * op.count
        seconds += (op.seconds - p.kernel_overhead_s) * op.count
        n += 1
    if n == 0 or seconds <= 0:
        raise MeasureError("the profiled steps hold no MXU-bound matmul op: cannot fit matmuls")
    return flops / seconds, n


def _fit_bare_matmul(model: ComputeModel, kernels: Sequence[KernelSample]) -> tuple[float, str]:
    """(time-weighted MXU efficiency, what it rests on) of the standalone matmul kernels of
    at least 16M outputs and a contraction of at least 1,024: each bound by the MXU, with
    nothing fused (module docstring, step 3)."""
    at_peak = seconds = 0.0
    each = []
    for k in kernels:
        m, n, depth = (k.params.get(x, 0) for x in ("m", "n", "k"))
        if k.kind != "matmul" or m * n < 1 << 24 or depth < 1024:
            continue
        kernel_at_peak = Matmul(1, m, depth, n).padded_flops(model.params.mxu_tile)
        kernel_at_peak /= model.peak_flops_per_s
        kernel_s = k.median_s - model.params.kernel_overhead_s
        at_peak += kernel_at_peak
        seconds += kernel_s
        each.append(kernel_at_peak / kernel_s)
    if not each or seconds <= 0:
        raise MeasureError(
            "the kernels file holds no matmul kernel of >= 16M outputs and k >= 1024: cannot "
            "fit bare matmuls (aoizora measure --kernels times them)"
        )
    said = (f"{len(each)} standalone matmul kernels of >= 16M outputs and k >= 1024, nothing "
            f"fused (each {_fmt(min(each))}-{_fmt(max(each))} of the peak)")  # fmt: skip
    return at_peak / seconds, said


def _fit_fused_op_cost(
    eta_bare: float, model: ComputeModel, ops: Sequence[_Op]
) -> tuple[float, int]:
    """(what each element-wise op fused into a matmul kernel adds to its inverse
    efficiency, how many ops): over the steps' MXU-bound fused matmul ops without spatial
    taps, ``sum(t - overhead) = sum(at_peak x (1 / eta_bare + n x cost))`` time-weighted,
    ``n`` each op's ``Work.fused_vector_ops`` (module docstring, step 3)."""
    p = model.params
    excess = weighted = 0.0
    n = 0
    for op in ops:
        w = op.work
        if op.category != "matmul" or w.attention or w.bare_matmul or not w.fused_vector_ops:
            continue
        at_peak = sum(m.padded_flops(p.mxu_tile) for m in w.matmuls) / model.peak_flops_per_s
        if at_peak < _hbm_only_s(model, w):
            continue  # memory bound: says nothing of the MXU
        excess += (op.seconds - p.kernel_overhead_s - at_peak / eta_bare) * op.count
        weighted += at_peak * w.fused_vector_ops * op.count
        n += 1
    if n == 0 or excess <= 0:
        raise MeasureError(
            "the profiled steps hold no MXU-bound fused matmul op slower than bare kernels: "
            "cannot fit the cost of fused ops"
        )
    return excess / weighted, n


def _fit_read(model: ComputeModel, ops: Sequence[_Op]) -> tuple[float, int]:
    """Time-weighted HBM efficiency of the reads beyond the writes of the steps' matmul
    ops that HBM bounds and that mostly read (module docstring, step 4)."""
    p = model.params
    rate = model.hbm_bandwidth_bytes_per_s
    moved = seconds = 0.0
    n = 0
    for op in ops:
        w = op.work
        excess = w.hbm_read_excess_bytes
        if op.category != "matmul" or w.attention or excess < _READ_SHARE * w.hbm_bytes:
            continue
        if _hbm_only_s(model, w) < _HBM_BOUND * model.mxu_s(w):
            continue  # the MXU may bound it: says nothing of the reads
        rest_s = (w.hbm_bytes - excess) / (rate * p.hbm_efficiency)
        left_s = op.seconds - p.kernel_overhead_s - rest_s
        if left_s <= 0:
            continue
        moved += excess / rate * op.count
        seconds += left_s * op.count
        n += 1
    if n == 0:
        raise MeasureError(
            "the profiled steps hold no HBM-bound matmul op that mostly reads: cannot fit "
            "hbm_read_efficiency (profile a step with an output projection or a long "
            "attention-value product)"
        )
    return moved / seconds, n


def _fit_vmem_overhead(ops: Sequence[_Op]) -> tuple[float, int]:
    """(the median time of the steps' smallest element-wise kernels in VMEM, how many):
    module docstring, step 6."""
    times = [
        op.seconds for op in ops
        if op.category == "elementwise/reduce" and op.work.hbm_bytes <= 0 and not op.work.matmuls
        and 0 < op.work.onchip_bytes + op.work.onchip_copy_bytes <= _VMEM_SMALL_BYTES
    ]  # fmt: skip
    if not times:
        raise MeasureError(
            "the profiled steps hold no element-wise kernel in VMEM of at most "
            f"{_VMEM_SMALL_BYTES} bytes: cannot fit vmem_kernel_overhead_s"
        )
    return float(np.median(times)), len(times)


def _fit_full_tile_copies(model: ComputeModel, ops: Sequence[_Op]) -> tuple[float, int]:
    """(the rate of the steps' relayouts between 8-row tiles in VMEM, how many): module
    docstring, step 7."""
    return _copy_rate(
        model, ops, lambda w: 0.0 if w.hbm_bytes > 0 else w.onchip_copy_full_tile_bytes,
        "between 8-row tiles in VMEM",
    )  # fmt: skip


_VMEM_SMALL_BYTES = 64 << 10
_READ_SHARE = 0.9  # of an op's HBM bytes, read beyond its writes, for the read fit
_HBM_BOUND = 1.5  # an op's HBM time over its MXU time for it to count as HBM-bound
_MEMORY_CATEGORIES = ("elementwise/reduce", "copy/transpose", "pad")


def _fit_onchip(model: ComputeModel, ops: Sequence[_Op]) -> tuple[float, float, float]:
    """(element-wise rate, copy rate, mean |error| of the categories' step totals)."""
    chosen = [op for op in ops if op.category in _MEMORY_CATEGORIES]
    if not chosen:
        raise MeasureError("the profiled steps hold no element-wise, copy or pad op")
    keys = sorted({(op.step, op.category) for op in chosen})
    group = np.array([keys.index((op.step, op.category)) for op in chosen])
    count = np.array([op.count for op in chosen])
    measured = np.bincount(group, weights=np.array([op.seconds for op in chosen]) * count)
    fixed = np.array([max(_hbm_only_s(model, op.work), model.mxu_s(op.work)) for op in chosen])
    overhead = np.array([model.overhead_s(op.work) for op in chosen])
    onchip = np.array([op.work.onchip_bytes for op in chosen])
    full = np.array([op.work.onchip_copy_full_tile_bytes for op in chosen])
    relayout = np.array([op.work.onchip_copy_bytes for op in chosen]) - full
    full_rate = model.params.onchip_full_tile_copy_bandwidth_bytes_per_s
    full_s = full / full_rate if full_rate else np.zeros_like(full)
    best = (math.inf, 0.0, 0.0)
    for rate in _ONCHIP_GRID:
        for copy_rate in _ONCHIP_GRID:
            t = np.maximum(fixed, onchip / rate + relayout / copy_rate + full_s)
            t = (t + overhead) * count
            err = float(np.mean(np.abs(np.bincount(group, weights=t) / measured - 1.0)))
            if err < best[0]:
                best = (err, float(rate), float(copy_rate))
    return best[1], best[2], best[0]


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def _fit_memory(
    chip: Chip, params: ComputeParams, ops: Sequence[_Op]
) -> tuple[ComputeParams, dict[str, tuple[float, str]]]:
    """Steps 5-8 of the module docstring, each holding the earlier ones fixed: ``params``
    with them, and per key its value and what determined it."""
    peak, bandwidth = chip.bf16_flops_per_s, chip.hbm_bandwidth_bytes_per_s
    eta_retile, n_retile = _fit_retile(ComputeModel(peak, bandwidth, params), ops)
    vmem_s, n_vmem = _fit_vmem_overhead(ops)
    params = replace(params, hbm_retile_copy_efficiency=eta_retile, vmem_kernel_overhead_s=vmem_s)
    full_rate, n_full = _fit_full_tile_copies(ComputeModel(peak, bandwidth, params), ops)
    params = replace(params, onchip_full_tile_copy_bandwidth_bytes_per_s=full_rate)
    rate, copy_rate, err = _fit_onchip(ComputeModel(peak, bandwidth, params), ops)
    params = replace(params, onchip_bandwidth_bytes_per_s=rate,
                     onchip_copy_bandwidth_bytes_per_s=copy_rate)  # fmt: skip
    return params, {
        "hbm_retile_copy_efficiency": (eta_retile, f"{n_retile} copies of the steps out of "
            "2-row bf16 tiles into 8-row ones in HBM, their bytes over their time less "
            "kernel_overhead_s"),
        "vmem_kernel_overhead_s": (vmem_s, f"the median time of {n_vmem} element-wise "
            "kernels of the steps that move no HBM byte and at most "
            f"{_VMEM_SMALL_BYTES // 1024} KiB of VMEM"),
        "onchip_full_tile_copy_bandwidth_bytes_per_s": (full_rate, f"{n_full} copies and "
            "transposes of the steps between 8-row tiles in VMEM, their bytes over their "
            "time less vmem_kernel_overhead_s"),
        "onchip_bandwidth_bytes_per_s": (rate, "element-wise, copy and pad ops of the steps "
            f"(mean category error {100 * err:.1f} %)"),
        "onchip_copy_bandwidth_bytes_per_s": (copy_rate, "the same on-chip fit"),
    }  # fmt: skip


def fit_compute(
    chip: Chip,
    kernels: Sequence[KernelSample],
    steps: Sequence[ProfiledStep],
    *,
    provenance: Mapping[str, Any],
    kernels_file: str,
) -> ComputeFit:
    """Fit ``chip``'s compute parameters (module docstring). ``chip`` gives the peaks, the
    MXU tile and the kernels' names; its other compute values are replaced."""
    device = (
        f"{provenance.get('device_kind', '?')} (jax {provenance.get('jax', '?')}, libtpu "
        f"{provenance.get('libtpu', '?')}, {provenance.get('date', '?')})"
    )
    names = ", ".join(s.name for s in steps)
    where = (
        f"on {device}; fitted by 'aoizora calibrate --compute {kernels_file}' with steps {names}"
    )
    base = replace(chip.compute, attention_kernel_pinned=False)
    eta_hbm, overhead_s, n_stream = _fit_stream(chip, kernels)
    params = replace(base, hbm_efficiency=eta_hbm, kernel_overhead_s=overhead_s)
    ops = _step_ops(steps)
    peak = chip.bf16_flops_per_s
    eta_att, step_s, q_block_s, n_k, n_ops = _fit_attention(peak, params.mxu_tile, kernels, ops)
    params = replace(params, attention_grid=(("splash", step_s, q_block_s),))
    params = params.with_efficiencies({"splash": eta_att})
    params = replace(params, attention_kernel_pinned=False)
    model = ComputeModel(peak, chip.hbm_bandwidth_bytes_per_s, params)
    eta_mm, n_mm = _fit_matmul(model, ops)
    params = replace(params, matmul_efficiency=eta_mm)
    model = ComputeModel(peak, chip.hbm_bandwidth_bytes_per_s, params)
    eta_read, n_read = _fit_read(model, ops)
    params, memory = _fit_memory(chip, replace(params, hbm_read_efficiency=eta_read), ops)
    eta_bare, bare_said = _fit_bare_matmul(model, kernels)
    params = replace(params, bare_matmul_efficiency=eta_bare)
    op_cost, n_fused = _fit_fused_op_cost(eta_bare, model, ops)
    params = replace(params, matmul_fused_op_cost=op_cost)
    said = {
        "hbm_efficiency": f"{n_stream} stream kernels (1 MiB-1 GiB)",
        "kernel_overhead_s": f"the intercept of the same {n_stream} stream kernels",
        "attention_efficiency.splash": f"{n_k} splash kernels (blocks < 512) and {n_ops} "
        "splash ops of the steps",
        "attention_grid.splash.step_overhead_s": "the same splash fit",
        "attention_grid.splash.q_block_overhead_s": "the same splash fit",
        "matmul_efficiency": f"{n_mm} MXU-bound fused matmul ops of the steps",
        "bare_matmul_efficiency": bare_said,
        "matmul_fused_op_cost": f"{n_fused} MXU-bound fused matmul ops of the steps without "
        "spatial taps, against bare_matmul_efficiency and their fused element-wise ops",
        "hbm_read_efficiency": f"{n_read} HBM-bound matmul ops of the steps whose reads "
        "beyond their writes are >= 90 % of their bytes (the rest at hbm_efficiency)",
        **{key: said for key, (_, said) in memory.items()},
    }
    fitted = {
        "hbm_efficiency": eta_hbm, "kernel_overhead_s": overhead_s,
        "attention_efficiency.splash": eta_att, "attention_grid.splash.step_overhead_s": step_s,
        "attention_grid.splash.q_block_overhead_s": q_block_s, "matmul_efficiency": eta_mm,
        "bare_matmul_efficiency": eta_bare, "matmul_fused_op_cost": op_cost,
        "hbm_read_efficiency": eta_read,
        **{key: value for key, (value, _) in memory.items()},
    }  # fmt: skip
    values = tuple(FittedValue(k, float(v), f"{said[k]} {where}") for k, v in fitted.items())
    notes = (f"{len(ops)} priced ops in {len(steps)} steps", f"{len(kernels)} kernels")
    return ComputeFit(params, values, device, notes)


def load_profiled_steps(
    folder: str | Path, *, rows: Sequence[str] | None = None
) -> tuple[ProfiledStep, ...]:
    """The profiled steps saved in ``folder``: each ``<row>.ops.json[.gz]`` or
    ``<row>.xplane.pb[.gz]`` with its ``<row>.hlo.txt[.gz]`` (``aoizora measure --profile``
    writes the latter two). ``rows`` picks some, by row id."""
    where = Path(folder)
    found: dict[str, Path] = {}
    for suffix in (".xplane.pb", ".xplane.pb.gz", ".ops.json", ".ops.json.gz"):
        for path in sorted(where.glob(f"*{suffix}")):
            found[path.name[: -len(suffix)]] = path  # an op table (read last) wins: smaller
    wanted = sorted(found) if rows is None else list(rows)
    missing = [r for r in wanted if r not in found]
    if missing or not wanted:
        raise MeasureError(
            f"{folder}: no profile of rows {missing or '(any)'}; profiles there: "
            f"{', '.join(sorted(found)) or 'none'} (write them with aoizora measure --profile)"
        )
    out = []
    for row in wanted:
        hlo = next((where / f"{row}{s}" for s in (".hlo.txt", ".hlo.txt.gz")
                    if (where / f"{row}{s}").exists()), None)  # fmt: skip
        if hlo is None:
            raise MeasureError(f"{folder}: profile {found[row].name} has no {row}.hlo.txt[.gz]")
        module = parse_module(read_text_file(hlo))
        out.append(ProfiledStep(row, load_profile(found[row], module=module.name), module))
    return tuple(out)


def write_calibrated_compute(
    fit: ComputeFit, generation: str, path: str | Path, *, force: bool = False
) -> Path:
    """Write the shipped ``<generation>.toml`` with the fitted ``[compute]`` table."""
    out = refuse_shipped(Path(path), generation, force=force)
    with (topologies_dir(generation) / f"{generation}.toml").open("rb") as fh:
        shipped = tomllib.load(fh)
    shipped["compute"] = fit.compute_table(shipped.get("compute", {}))
    lines = [
        f"# Calibrated {generation} topology, written by `aoizora calibrate --compute` on",
        f"# {fit.device}. The shipped defaults stay in topologies/{generation}.toml.",
    ]
    tables: list[tuple[str, dict[str, Any]]] = []
    for key, value in shipped.items():
        if isinstance(value, dict) and not ("value" in value and "source" in value):
            tables.append((key, value))
        else:
            lines.append(f"{quote_key(key)} = {toml_value(value)}")
    for name, table in tables:
        lines += ["", f"[{quote_key(name)}]"]
        lines.extend(f"{quote_key(k)} = {toml_value(v)}" for k, v in table.items())
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out
