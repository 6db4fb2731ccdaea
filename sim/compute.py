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
  operand) ``f / ceil(f/T)T`` of the columns: :func:`mxu_utilisation`. ``T`` is
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
  kernel attains (a public copy microbenchmark per generation).

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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sim.errors import TopologyError

__all__ = [
    "IDEAL",
    "Attention",
    "ComputeModel",
    "ComputeParams",
    "Matmul",
    "Work",
    "compute_model_of",
    "mxu_utilisation",
    "parse_compute_params",
    "sourced_value",
]


def _pad(n: float, tile: int) -> float:
    return math.ceil(n / tile) * tile if n > 0 else 0.0


def mxu_utilisation(*, m: float, k: float, n: float, tile: int) -> float:
    """The fraction of a ``tile x tile`` MXU a ``(m x k) @ (k x n)`` matmul keeps busy.

    The contraction ``k`` fills the rows; the better free dimension (``m`` or ``n``,
    whichever operand is latched) fills the columns.

    >>> mxu_utilisation(m=9472, k=128, n=2048, tile=256)  # Q.K^T, head_dim 128
    0.5
    >>> mxu_utilisation(m=9472, k=2048, n=128, tile=256)  # P.V: latch P, stream V
    1.0
    >>> mxu_utilisation(m=100, k=100, n=100, tile=128), mxu_utilisation(m=8, k=8, n=8, tile=1)
    (0.6103515625, 1.0)
    """
    if tile <= 1 or min(m, k, n) <= 0:
        return 1.0
    rows = k / _pad(k, tile)
    cols = max(m / _pad(m, tile), n / _pad(n, tile))
    return rows * cols


@dataclass(frozen=True)
class Matmul:
    """``batch`` independent ``(m x k) @ (k x n)`` products (a convolution: one per tap).

    ``batch`` may be fractional: a windowed-einsum stage runs part of a dot.
    """

    batch: float
    m: int
    k: int
    n: int

    @property
    def flops(self) -> float:
        """``2 * batch * m * k * n`` (one multiply-add per term)."""
        return 2.0 * self.batch * self.m * self.k * self.n

    def padded_flops(self, tile: int) -> float:
        """The FLOPs the MXU spends on it, padding included (:func:`mxu_utilisation`)."""
        return self.flops / mxu_utilisation(m=self.m, k=self.k, n=self.n, tile=tile)


@dataclass(frozen=True)
class Attention:
    """One fused attention kernel call: ``lead`` (batch x heads) softmax(Q.K^T).V products.

    ``Q.K^T`` is ``(S_q x D) @ (D x S_kv)`` and ``P.V`` is ``(S_q x S_kv) @ (S_kv x D_v)``
    per leading index (FlashAttention, Dao et al. 2022, sec. 3.1; no mask sparsity).
    """

    lead: float
    q_length: int
    kv_length: int
    head_dim: int
    value_dim: int

    @property
    def matmuls(self) -> tuple[Matmul, Matmul]:
        s_q, s_kv = self.q_length, self.kv_length
        return (
            Matmul(self.lead, s_q, self.head_dim, s_kv),
            Matmul(self.lead, s_q, s_kv, self.value_dim),
        )

    @property
    def flops(self) -> float:
        return sum(mm.flops for mm in self.matmuls)

    def padded_flops(self, tile: int) -> float:
        return sum(mm.padded_flops(tile) for mm in self.matmuls)


@dataclass(frozen=True)
class Work:
    """What one kernel does on one device."""

    matmuls: tuple[Matmul, ...] = ()
    attention: tuple[Attention, ...] = ()
    other_flops: float = 0.0
    hbm_bytes: float = 0.0

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
        )


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
        if kernel is None or kernel == self.attention_kernel:
            return self
        if kernel not in self.kernels:
            raise TopologyError(
                f"attention kernel {kernel!r} has no efficiency here; known kernels: "
                f"{', '.join(self.kernels)} (add it under [compute.attention_efficiency] of "
                "the generation's topology file, or fit it with aoizora calibrate --steps)"
            )
        return replace(self, attention_kernel=kernel)

    def with_efficiencies(self, values: Mapping[str, float]) -> ComputeParams:
        """These parameters with some attention efficiencies replaced (calibration)."""
        eff = dict(self.attention_efficiency)
        eff.update({k: float(v) for k, v in values.items()})
        return replace(self, attention_efficiency=tuple(eff.items()))

    def key(self) -> tuple[object, ...]:
        """Everything a predicted time depends on (cache keys)."""
        return (
            self.mxu_tile,
            self.matmul_efficiency,
            self.hbm_efficiency,
            self.attention_efficiency,
            self.attention_kernel,
        )


# The bare peak roofline: chips built without a [compute] table (synthetic test chips).
IDEAL = ComputeParams()


@dataclass(frozen=True)
class ComputeModel:
    """Prices :class:`Work` on one device (see the module docstring)."""

    peak_flops_per_s: float
    hbm_bandwidth_bytes_per_s: float
    params: ComputeParams = IDEAL

    def mxu_s(self, work: Work) -> float:
        """The time of ``work``'s matmuls and attention at their achieved MXU rates."""
        p = self.params
        mm = sum(m.padded_flops(p.mxu_tile) for m in work.matmuls)
        att = sum(a.padded_flops(p.mxu_tile) for a in work.attention)
        peak = self.peak_flops_per_s
        return mm / (peak * p.matmul_efficiency) + att / (peak * p.attention_eff)

    def hbm_s(self, work: Work) -> float:
        """The time of ``work``'s HBM traffic at the achieved bandwidth."""
        return work.hbm_bytes / (self.hbm_bandwidth_bytes_per_s * self.params.hbm_efficiency)

    def time_s(self, work: Work) -> float:
        """``max(mxu_s + vector_s, hbm_s)``: one kernel, compute or memory bound."""
        vector_s = work.other_flops / self.peak_flops_per_s
        return max(self.mxu_s(work) + vector_s, self.hbm_s(work))


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


def sourced_value(
    data: Mapping[str, Any], key: str, path: Path, *, table: str = ""
) -> tuple[Any, str]:
    """(value, source) of a topology file's ``key = { value = ..., source = "..." }``."""
    entry = data.get(key)
    if not isinstance(entry, dict) or "value" not in entry or "source" not in entry:
        where = f"[{table}] " if table else ""
        raise TopologyError(
            f"{path}: {where}'{key}' must be an inline table with a value and its source, "
            f'e.g. {key} = {{ value = 0.9, source = "https://..." }}'
        )
    return entry["value"], str(entry["source"])


def _entry(data: Mapping[str, Any], key: str, path: Path) -> tuple[Any, str]:
    return sourced_value(data, key, path, table="compute")


def _fraction(value: Any, key: str, path: Path) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TopologyError(f"{path}: [compute] {key} must be a number, got {value!r}")
    if not 0 < float(value) <= 2:
        raise TopologyError(
            f"{path}: [compute] {key} = {value!r} must be an efficiency in (0, 2], e.g. 0.9"
        )
    return float(value)


def parse_compute_params(data: Mapping[str, Any] | None, path: Path) -> ComputeParams:
    """The ``[compute]`` table of a topology file (None: the bare roofline, :data:`IDEAL`).

    Every number is an inline table with its ``source``; the attention kernels are
    a sub-table ``[compute.attention_efficiency]`` of the same form.
    """
    if data is None:
        return IDEAL
    if not isinstance(data, dict):
        raise TopologyError(f"{path}: [compute] must be a table")
    sources: list[tuple[str, str]] = []

    def value(key: str) -> Any:
        v, s = _entry(data, key, path)
        sources.append((f"compute.{key}", s))
        return v

    tile = value("mxu_tile")
    if isinstance(tile, bool) or not isinstance(tile, int) or tile < 1:
        raise TopologyError(f"{path}: [compute] mxu_tile must be a positive integer, e.g. 256")
    mm = _fraction(value("matmul_efficiency"), "matmul_efficiency", path)
    hbm = _fraction(value("hbm_efficiency"), "hbm_efficiency", path)
    kernel = str(value("attention_kernel"))
    table = data.get("attention_efficiency")
    if not isinstance(table, dict) or not table:
        raise TopologyError(
            f"{path}: [compute.attention_efficiency] must list kernel versions, e.g. "
            'custom = { value = 0.8, source = "..." }'
        )
    eff: list[tuple[str, float]] = []
    for name in table:
        v, s = _entry(table, name, path)
        eff.append((str(name), _fraction(v, f"attention_efficiency.{name}", path)))
        sources.append((f"compute.attention_efficiency.{name}", s))
    if kernel not in dict(eff):
        raise TopologyError(
            f"{path}: [compute] attention_kernel = {kernel!r} is not listed under "
            f"[compute.attention_efficiency] (listed: {', '.join(k for k, _ in eff)})"
        )
    return ComputeParams(tile, mm, hbm, tuple(eff), kernel, tuple(sources))
