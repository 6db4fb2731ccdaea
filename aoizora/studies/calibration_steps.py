"""Fit a generation's attention-kernel efficiencies to measured steps, and write them down.

A step row is predicted by compiling its sharding and replaying it (the planner's
Q2, :func:`aoizora.studies.validation.predict_step`); the compute model prices each
fused attention kernel at ``eta_attn[kernel]`` of the padded MXU peak
(:mod:`sim.compute`). Every other compute parameter has a public source
(``topologies/<gen>.toml``, ``[compute]``); the attention efficiency of a kernel
version is what no microbenchmark publishes, so it is fitted here:

    eta_k = argmin  sum over the gated step rows i of kernel k on the generation
                    ( (predicted_i(eta_k) - measured_i) / measured_i )^2

one kernel version at a time (a row names the kernel that ran, ``attention_kernel``;
empty: the generation's default), by bounded scalar minimisation
(``scipy.optimize.minimize_scalar``, method ``bounded`` on ``[0.05, 2]``): the
predicted step falls monotonically with ``eta`` and is nearly ``a + b / eta``, so the
optimum is unique. History and excluded rows are not used. A kernel is fitted only
from two rows or more (never tuned to a single row); one with fewer keeps its
shipped value and is listed as skipped.

Which rows determine each efficiency: a row's share is its squared relative
sensitivity ``(d predicted_i / d eta / measured_i)^2`` over the sum for its kernel
(the rows' shares of the fit's Fisher information, as for the collective fit,
:func:`aoizora.studies.calibration.information_shares`).

The result is written beside the shipped file, ``topologies/calibrated/<gen>.<tag>.toml``,
with the fitted efficiencies in ``[compute.attention_efficiency]`` (each citing its
rows) and every residual under ``[step_calibration]``.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scipy.optimize import minimize_scalar  # type: ignore[import-untyped]

from aoizora.studies.calibration import CalibrationError, quote_key, refuse_shipped, toml_value
from aoizora.studies.validation import Measurement, predict_step, row_slice
from sim.compute import ComputeParams
from sim.topology import load_chip, topologies_dir

__all__ = [
    "MIN_ROWS",
    "StepFit",
    "StepResidual",
    "calibrate_steps",
    "step_rows",
    "write_calibrated_steps",
]

# A kernel's efficiency is fitted from at least this many rows.
MIN_ROWS = 2
_BOUNDS = (0.05, 2.0)
_FORMAT = "aoizora.step-calibration/1"
# Relative step of the sensitivity's finite difference.
_DELTA = 0.01

StepPredictor = Callable[[Measurement, ComputeParams], float]


@dataclass(frozen=True)
class StepResidual:
    """One step row after the fit."""

    row_id: str
    kernel: str
    measured_s: float
    fitted_s: float
    share: float  # of its kernel's information

    @property
    def error_percent(self) -> float:
        return 100.0 * (self.fitted_s - self.measured_s) / self.measured_s


@dataclass(frozen=True)
class StepFit:
    """Fitted attention efficiencies of one generation and the rows behind them."""

    generation: str
    efficiencies: tuple[tuple[str, float], ...]
    shipped: tuple[tuple[str, float], ...]
    residuals: tuple[StepResidual, ...]
    skipped: tuple[tuple[str, str], ...]  # (row id or kernel, why)
    source_name: str = ""
    source_sha256: str = ""

    @property
    def mape_percent(self) -> float:
        rs = self.residuals
        return 100.0 * sum(abs(r.fitted_s / r.measured_s - 1.0) for r in rs) / max(1, len(rs))

    def cited_rows(self, kernel: str) -> str:
        """The rows that determine ``kernel``'s efficiency with their share, e.g. ``"a (60%)"``."""
        rows = sorted(
            (r for r in self.residuals if r.kernel == kernel), key=lambda r: (-r.share, r.row_id)
        )
        return ", ".join(f"{r.row_id} ({100 * r.share:.0f}%)" for r in rows) or "-"


def step_rows(
    rows: Sequence[Measurement], generation: str
) -> tuple[list[tuple[Measurement, str]], list[tuple[str, str]]]:
    """The gated step rows of ``generation`` with the kernel each names, and the rest (why)."""
    use: list[tuple[Measurement, str]] = []
    skipped: list[tuple[str, str]] = []
    for row in rows:
        if row.step is None:
            continue
        chip = row_slice(row).chip
        if chip.generation != generation:
            continue
        if not row.gated:
            skipped.append((row.row_id, f"status {row.status}"))
            continue
        use.append((row, row.step.attention_kernel or chip.compute.attention_kernel))
    return use, skipped


def _fit_kernel(
    rows: Sequence[Measurement], kernel: str, base: ComputeParams, predict: StepPredictor
) -> tuple[float, list[StepResidual]]:
    def predicted(eta: float) -> list[float]:
        params = base.with_efficiencies({kernel: eta})
        return [predict(r, params) for r in rows]

    def loss(eta: float) -> float:
        return sum((p / r.measured_s - 1.0) ** 2 for p, r in zip(predicted(eta), rows, strict=True))

    best = minimize_scalar(loss, bounds=_BOUNDS, method="bounded", options={"xatol": 1e-5})
    eta = float(round(best.x, 4))
    at, up = predicted(eta), predicted(eta * (1 + _DELTA))
    sens = [
        ((u - a) / (eta * _DELTA) / r.measured_s) ** 2 for a, u, r in zip(at, up, rows, strict=True)
    ]
    total = sum(sens) or 1.0
    return eta, [
        StepResidual(r.row_id, kernel, r.measured_s, p, s / total)
        for r, p, s in zip(rows, at, sens, strict=True)
    ]


def calibrate_steps(
    rows: Sequence[Measurement],
    *,
    generation: str,
    cache_dir: str | None = None,
    predict: StepPredictor | None = None,
    source_name: str = "",
    source_sha256: str = "",
) -> StepFit:
    """Fit each attention kernel's efficiency on ``generation`` (module docstring).

    ``predict(row, params)`` defaults to :func:`~aoizora.studies.validation.predict_step`
    with ``compute=params`` (compiles go to ``cache_dir``'s ``compiled/`` cache).
    Raises :class:`~aoizora.studies.calibration.CalibrationError` when no kernel
    has enough rows.
    """
    base = load_chip(generation).compute
    use, skipped = step_rows(rows, generation)
    if predict is None:

        def predict(row: Measurement, params: ComputeParams) -> float:
            return predict_step(row, cache_dir=cache_dir, compute=params)

    by_kernel: dict[str, list[Measurement]] = {}
    for row, kernel in use:
        by_kernel.setdefault(kernel, []).append(row)
    fitted: dict[str, float] = {}
    residuals: list[StepResidual] = []
    for kernel in sorted(by_kernel):
        krows = by_kernel[kernel]
        base.with_kernel(kernel)  # an unknown kernel fails here, naming the known ones
        if len(krows) < MIN_ROWS:
            skipped.append((kernel, f"{len(krows)} row(s); a kernel needs {MIN_ROWS} or more"))
            continue
        fitted[kernel], rs = _fit_kernel(krows, kernel, base, predict)
        residuals.extend(rs)
    if not fitted:
        raise CalibrationError(
            f"no attention kernel of {generation} has {MIN_ROWS} or more gated step rows "
            f"(found {sum(len(v) for v in by_kernel.values())}); add step rows "
            "(docs/validation.md) or fit another --generation"
        )
    return StepFit(
        generation=generation,
        efficiencies=tuple(sorted(fitted.items())),
        shipped=base.attention_efficiency,
        residuals=tuple(residuals),
        skipped=tuple(skipped),
        source_name=source_name,
        source_sha256=source_sha256,
    )


def _compute_table(fit: StepFit, shipped: dict[str, Any]) -> dict[str, Any]:
    compute = dict(shipped.get("compute", {}))
    table = dict(compute.get("attention_efficiency", {}))
    name = fit.source_name or "measurements"
    for kernel, eta in fit.efficiencies:
        table[kernel] = {
            "value": eta,
            "source": f"fitted by 'aoizora calibrate {name} --generation {fit.generation} "
            f"--steps' (sha256 {fit.source_sha256[:16] or '-'}); determined by rows "
            f"{fit.cited_rows(kernel)}",
        }
    compute["attention_efficiency"] = table
    return compute


def write_calibrated_steps(fit: StepFit, path: str | Path, *, force: bool = False) -> Path:
    """Write the shipped ``<gen>.toml`` with the fitted efficiencies and every residual."""
    out = refuse_shipped(Path(path), fit.generation, force=force)
    with (topologies_dir(fit.generation) / f"{fit.generation}.toml").open("rb") as fh:
        shipped = tomllib.load(fh)
    shipped["compute"] = _compute_table(fit, shipped)
    lines = [
        f"# Calibrated {fit.generation} topology, written by `aoizora calibrate --steps`. The",
        f"# shipped defaults stay in topologies/{fit.generation}.toml; only attention efficiencies",
        "# differ here.",
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
    lines += ["", "[step_calibration]", f"format = {toml_value(_FORMAT)}"]
    lines += [f"measurement_file = {toml_value(fit.source_name)}"]
    lines += [f"measurement_sha256 = {toml_value(fit.source_sha256)}"]
    lines += [f"mape_percent = {toml_value(fit.mape_percent)}"]
    for r in fit.residuals:
        lines += ["", "[[step_calibration.residuals]]", f"row_id = {toml_value(r.row_id)}"]
        lines += [f"kernel = {toml_value(r.kernel)}", f"share = {toml_value(r.share)}"]
        lines += [
            f"measured_s = {toml_value(r.measured_s)}",
            f"fitted_s = {toml_value(r.fitted_s)}",
        ]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out
