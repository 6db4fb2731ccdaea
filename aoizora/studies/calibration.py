"""Fit a chip generation's effective link numbers to measurements, and write them down.

The simulator predicts a collective row's latency ``T(B, L)`` from the one-way
link bandwidth ``B`` and the per-hop latency ``L`` of ``topologies/<gen>.toml``.
A measured latency also carries a fixed software cost per collective launch
(``c_k`` for collective kind ``k``) that the simulator does not model. The fit
is

    measured_i  ~  a_i * (1 / B)  +  h_i * L  +  c_{kind(i)}

with two features per row read off the simulator itself:

- ``a_i = T(B0, L=0) * B0`` -- the bytes on the bandwidth-critical path. The
  fluid engine is scale-free in bandwidth (every rate scales with ``B``), so
  ``T(B, 0) = a_i / B`` exactly.
- ``h_i = T(B=inf, L=1 s)`` -- the hops on the latency-critical path.

Each row is weighted by ``1 / measured_i`` (relative residuals). Solving is
linear least squares (``numpy.linalg.lstsq``): the model is linear
in ``(1/B, L, c)``, so the optimum is closed-form, deterministic and needs no
starting point or iteration. If a parameter comes out negative (unphysical),
the problem is re-solved with the bounds ``>= 0`` by
``scipy.optimize.lsq_linear`` (bounded-variable least squares, also exact).
``T = a/B + h L`` is exact when no two flows with different hop counts share a
link (rings on wrapped axes, the ``dimwise`` phases on a torus); on plain mesh
lines, latency shifts when flows start draining and the form is approximate.
``refine=True`` then minimises the residuals of the simulator itself with
``scipy.optimize.least_squares`` (trust-region, finite differences), starting
from the linear answer.

The result is written *beside* the shipped file, as
``topologies/calibrated/<gen>.<tag>.toml``; :func:`write_calibrated_topology`
refuses to overwrite ``topologies/<gen>.toml``.

>>> from aoizora.studies.validation import parse_measurements, predict_collective
>>> rows = parse_measurements(
...     "row_id,kind,slice,collective,groups,size_bytes,measured_s,spread_kind,source\\n"
...     "a,collective,v5e:2x2,all-gather,ids:0 1,1000000,1.2e-05,unreported,x\\n"
...     "b,collective,v5e:2x2,all-gather,ids:0 1,4000000,4.5e-05,unreported,x\\n")
>>> fit = calibrate(rows, generation="v5e", fit_latency=False, overhead="none")
>>> round(fit.link_bandwidth_bytes_per_s / 1e9, 3), fit.hop_latency_s
(45.455, 1e-06)
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from aoizora.errors import AoizoraError, ValidationError
from aoizora.studies.validation import Measurement, predict_collective, row_slice
from sim.topology import (
    Slice,
    load_chip,
    load_slice,
    make_slice,
    shipped_topologies_dir,
    topologies_dir,
)

__all__ = [
    "OVERHEAD_MODES",
    "WEIGHT_MODES",
    "CalibrationError",
    "CalibrationFit",
    "RowResidual",
    "calibrate",
    "calibrated_slice",
    "cited_rows",
    "collective_features",
    "default_output_path",
    "file_sha256",
    "information_shares",
    "load_calibration",
    "quote_key",
    "refuse_shipped",
    "row_sigma_s",
    "toml_value",
    "write_calibrated_topology",
]

# "per-kind": one launch cost per collective kind; "shared": one for all;
# "none": no constant term.
OVERHEAD_MODES: tuple[str, ...] = ("per-kind", "shared", "none")
# How rows are weighted: relative to the measurement, or to its stated spread.
WEIGHT_MODES: tuple[str, ...] = ("relative", "spread")
# Reference bandwidth for the bandwidth feature (any positive value gives the
# same a_i, by scale invariance) and an "infinite" one for the hop feature.
_B_REF = 1e10
_B_INF = 1e30
_FORMAT = "aoizora.calibration/1"
_TAG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_\-]*$")


class CalibrationError(AoizoraError):
    """The measurements cannot determine the requested parameters, or a file is wrong."""


@dataclass(frozen=True)
class RowResidual:
    """One row after the fit: ``fitted_s`` is the simulator plus the overhead."""

    row_id: str
    kind: str
    measured_s: float
    fitted_s: float

    @property
    def residual_s(self) -> float:
        """``measured - fitted``."""
        return self.measured_s - self.fitted_s


@dataclass(frozen=True)
class CalibrationFit:
    """Fitted link numbers, per-collective overheads and the residuals they leave."""

    generation: str
    link_bandwidth_bytes_per_s: float
    hop_latency_s: float
    overhead_s: tuple[tuple[str, float], ...]
    fitted: tuple[str, ...]
    method: str
    residuals: tuple[RowResidual, ...]
    shipped_link_bandwidth_bytes_per_s: float
    shipped_hop_latency_s: float
    skipped: tuple[str, ...] = ()
    source_name: str = ""
    source_sha256: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # Per fitted overhead ("*" when shared): (row id, share of its information).
    determined_by: tuple[tuple[str, tuple[tuple[str, float], ...]], ...] = ()
    weights: str = "relative"

    def overhead_for(self, kind: str) -> float:
        """The launch overhead added to a collective of ``kind`` (0 if none was fitted)."""
        table = dict(self.overhead_s)
        return table.get(kind, table.get("*", 0.0))

    @property
    def rms_residual_s(self) -> float:
        return math.sqrt(sum(r.residual_s**2 for r in self.residuals) / len(self.residuals))

    @property
    def mape_percent(self) -> float:
        return (
            100.0
            * sum(abs(r.residual_s) / r.measured_s for r in self.residuals)
            / len(self.residuals)
        )


def collective_features(row: Measurement) -> tuple[float, float]:
    """``(a, h)``: bandwidth-critical bytes and latency-critical hops of a collective row.

    >>> from aoizora.studies.validation import parse_measurements
    >>> row = parse_measurements(
    ...     "row_id,kind,slice,collective,groups,size_bytes,measured_s,spread_kind,source\\n"
    ...     "a,collective,v5e:8x16,all-gather,dims:1,3200,1e-5,unreported,x\\n")[0]
    >>> a, h = collective_features(row)  # 15 steps of one hop, 3200/32 bytes each
    >>> round(a, 6), round(h, 6)
    (1500.0, 15.0)
    """
    # Without the chip's per-collective overhead: the fit supplies its own.
    t_bw = predict_collective(
        row, link_bandwidth_bytes_per_s=_B_REF, hop_latency_s=0.0, overhead_s=0.0
    )
    t_hops = predict_collective(
        row, link_bandwidth_bytes_per_s=_B_INF, hop_latency_s=1.0, overhead_s=0.0
    )
    return t_bw * _B_REF, t_hops


def _generation_of(row: Measurement) -> str:
    return row_slice(row).chip.generation


def _simulated(row: Measurement, bandwidth: float, latency: float) -> float:
    return predict_collective(
        row, link_bandwidth_bytes_per_s=bandwidth, hop_latency_s=latency, overhead_s=0.0
    )


def _parameter_names(
    kinds: Sequence[str], *, fit_bandwidth: bool = True, fit_latency: bool, overhead: str
) -> list[str]:
    names = (["inv_bandwidth"] if fit_bandwidth else []) + (["hop_latency"] if fit_latency else [])
    if overhead == "per-kind":
        names += [f"overhead:{k}" for k in kinds]
    elif overhead == "shared":
        names += ["overhead:*"]
    return names


def row_sigma_s(row: Measurement, weights: str) -> float:
    """The residual scale of ``row`` in the fit: ``weights="relative"``: its measurement;
    ``"spread"``: its stated spread (at least 2% of it), or 10% when unreported."""
    if weights == "relative":
        return row.measured_s
    if row.spread_s:
        return max(row.spread_s, 0.02 * row.measured_s)
    return 0.10 * row.measured_s


def _linear_system(
    use: Sequence[Measurement],
    kinds: Sequence[str],
    *,
    fit_bandwidth: bool = True,
    fit_latency: bool,
    overhead: str,
    hop_latency_s: float,
    bandwidth_bytes_per_s: float = 0.0,
    weights: str = "relative",
    num_params: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ``measured = bytes/B + hops*latency + overhead``, each scaled by its sigma."""
    design = np.zeros((len(use), num_params))
    target = np.zeros(len(use))
    for i, row in enumerate(use):
        assert row.collective is not None
        a, h = collective_features(row)
        target[i] = row.measured_s
        col = 0
        if fit_bandwidth:
            design[i, col] = a
            col += 1
        else:
            target[i] -= a / bandwidth_bytes_per_s
        if fit_latency:
            design[i, col] = h
            col += 1
        else:
            target[i] -= h * hop_latency_s
        if overhead == "per-kind":
            design[i, col + kinds.index(row.collective.collective)] = 1.0
        elif overhead == "shared":
            design[i, col] = 1.0
    # Relative residuals (or residuals in units of each row's spread): the rows
    # span microseconds to tens of milliseconds; unweighted, the largest
    # buffers would decide every parameter and the small, latency-bound rows none.
    weight = 1.0 / np.array([row_sigma_s(r, weights) for r in use])
    return design * weight[:, None], target * weight


def information_shares(
    design: np.ndarray, names: Sequence[str], row_ids: Sequence[str]
) -> tuple[tuple[str, tuple[tuple[str, float], ...]], ...]:
    """Per fitted overhead: the rows that determine it, with their share of its information.

    A row's share is its part of the overhead column once the other fitted
    parameters' columns are projected out (weighted design): the rows whose
    residuals the overhead alone can move. Rows listed until 90% is covered.
    """
    out = []
    for j, name in enumerate(names):
        if not name.startswith("overhead:"):
            continue
        col = design[:, j]
        others = np.delete(design, j, axis=1)
        if others.shape[1]:
            coef, *_ = np.linalg.lstsq(others, col, rcond=None)
            col = col - others @ coef
        info = col**2
        total = float(info.sum()) or 1.0
        ranked = sorted(zip(row_ids, (info / total).tolist(), strict=True), key=lambda t: -t[1])
        keep: list[tuple[str, float]] = []
        for row_id, share in ranked:
            if sum(v for _, v in keep) >= 0.9 or share <= 0.0:
                break
            keep.append((row_id, share))
        out.append((name.split(":", 1)[1], tuple(keep)))
    return tuple(out)


def _solve(
    design: np.ndarray, target: np.ndarray, names: Sequence[str], *, what: str
) -> tuple[np.ndarray, str]:
    """Least squares with every parameter >= 0; ``what`` names the rows in errors."""
    # Columns differ by ~10 orders of magnitude (bytes vs hops vs 1); scale
    # them to unit norm so the rank test and the solve are well conditioned.
    norms = np.linalg.norm(design, axis=0)
    norms[norms == 0] = 1.0
    scaled = design / norms
    rank = int(np.linalg.matrix_rank(scaled, tol=1e-9))
    if rank < len(names):
        raise CalibrationError(
            f"{what} cannot separate the {len(names)} parameters {list(names)} (rank {rank}): "
            "add rows with other sizes, group shapes or kinds, or fit fewer -- --overhead "
            "shared/none, or --fix-latency"
        )
    solution, *_ = np.linalg.lstsq(scaled, target, rcond=None)
    method = "numpy.linalg.lstsq"
    if np.any(solution < 0):
        from scipy.optimize import lsq_linear  # type: ignore[import-untyped]

        solution = lsq_linear(scaled, target, bounds=(0.0, np.inf), method="bvls").x
        method = "scipy.optimize.lsq_linear(bounds>=0, bvls)"
    return solution / norms, method


def _residuals(use: Sequence[Measurement], fit: CalibrationFit) -> tuple[RowResidual, ...]:
    """Residuals of the real model (simulator at the fitted numbers + overhead), not of
    the linear surrogate."""
    out = []
    for row in use:
        assert row.collective is not None
        fitted_s = _simulated(row, fit.link_bandwidth_bytes_per_s, fit.hop_latency_s)
        fitted_s += fit.overhead_for(row.collective.collective)
        out.append(RowResidual(row.row_id, row.collective.collective, row.measured_s, fitted_s))
    return tuple(out)


def calibrate(
    rows: Sequence[Measurement],
    *,
    generation: str,
    fit_bandwidth: bool = True,
    fit_latency: bool = True,
    overhead: str = "per-kind",
    weights: str = "relative",
    refine: bool = False,
    source_name: str = "",
    source_sha256: str = "",
) -> CalibrationFit:
    """Fit ``generation``'s link bandwidth, hop latency and per-collective overheads.

    Uses the ``collective`` rows on slices of ``generation``; every other row
    is listed in ``skipped``. ``fit_bandwidth=False`` / ``fit_latency=False``
    keep the shipped numbers. ``weights``: ``"relative"`` (residual / measured)
    or ``"spread"`` (residual / the row's stated spread, :func:`row_sigma_s`).
    The simulator's own per-collective overhead is left out of the features:
    the fitted one replaces it. Raises :class:`CalibrationError` when the rows
    cannot separate the parameters (the message says which option to change).
    """
    if overhead not in OVERHEAD_MODES or weights not in WEIGHT_MODES:
        raise CalibrationError(
            f"overhead={overhead!r} / weights={weights!r}: overhead is one of "
            f"{list(OVERHEAD_MODES)}, weights one of {list(WEIGHT_MODES)}, e.g. 'shared', 'spread'"
        )
    chip = load_chip(generation)
    use = [r for r in rows if r.kind == "collective" and _generation_of(r) == generation]
    skipped = tuple(r.row_id for r in rows if r not in use)
    if not use:
        raise CalibrationError(
            f"no collective rows on {generation} slices to fit (skipped {len(skipped)} rows); "
            f"pick --generation from the rows' slices, e.g. "
            f"{sorted({_generation_of(r) for r in rows})}"
        )
    kinds = sorted({r.collective.collective for r in use if r.collective is not None})
    names = _parameter_names(
        kinds, fit_bandwidth=fit_bandwidth, fit_latency=fit_latency, overhead=overhead
    )
    if not names:
        raise CalibrationError(
            "nothing to fit: drop --fix-bandwidth, --fix-latency or --overhead none"
        )
    design, target = _linear_system(
        use, kinds, fit_bandwidth=fit_bandwidth, fit_latency=fit_latency, overhead=overhead,
        hop_latency_s=chip.hop_latency_s, bandwidth_bytes_per_s=chip.link_bandwidth_bytes_per_s,
        weights=weights, num_params=len(names),
    )  # fmt: skip
    params, method = _solve(design, target, names, what=f"{len(use)} {generation} collective rows")
    values = dict(zip(names, params.tolist(), strict=True))
    if fit_bandwidth and values["inv_bandwidth"] <= 0:
        raise CalibrationError(
            f"the fit gives no finite link bandwidth for {generation} (1/B = "
            f"{values['inv_bandwidth']:g}); the rows are latency-bound -- add large-buffer rows"
        )
    if refine:
        if not fit_bandwidth:
            raise CalibrationError("--refine also fits the bandwidth: drop --fix-bandwidth")
        values, method = _refine(use, names, values, chip.hop_latency_s, method)
    inv_bw = values.get("inv_bandwidth", 1.0 / chip.link_bandwidth_bytes_per_s)
    fit = CalibrationFit(
        generation=generation,
        link_bandwidth_bytes_per_s=1.0 / inv_bw,
        hop_latency_s=values.get("hop_latency", chip.hop_latency_s),
        overhead_s=tuple(
            (n.split(":", 1)[1], v) for n, v in values.items() if n.startswith("overhead:")
        ),
        fitted=tuple(names),
        method=method,
        residuals=(),
        shipped_link_bandwidth_bytes_per_s=chip.link_bandwidth_bytes_per_s,
        shipped_hop_latency_s=chip.hop_latency_s,
        skipped=skipped,
        source_name=source_name,
        source_sha256=source_sha256,
        determined_by=information_shares(design, names, [r.row_id for r in use]),
        weights=weights,
    )
    return dataclasses.replace(fit, residuals=_residuals(use, fit))


def _refine(
    rows: Sequence[Measurement],
    names: list[str],
    start: dict[str, float],
    shipped_latency_s: float,
    method: str,
) -> tuple[dict[str, float], str]:
    """Minimise the simulator's own residuals from the linear solution."""
    from scipy.optimize import least_squares

    # Work in units near 1: bandwidth relative to the start, latency in us,
    # overheads in us, so finite differences see comparable steps.
    b0 = 1.0 / start["inv_bandwidth"]

    def unpack(x: np.ndarray) -> dict[str, float]:
        out = {"inv_bandwidth": 1.0 / (b0 * float(x[0]))}
        for i, n in enumerate(names[1:], start=1):
            out[n] = float(x[i]) * 1e-6
        return out

    def residuals(x: np.ndarray) -> np.ndarray:
        v = unpack(x)
        bw = 1.0 / v["inv_bandwidth"]
        lat = v.get("hop_latency", shipped_latency_s)
        res = []
        for row in rows:
            assert row.collective is not None
            c = v.get(f"overhead:{row.collective.collective}", v.get("overhead:*", 0.0))
            res.append((_simulated(row, bw, lat) + c - row.measured_s) / row.measured_s)
        return np.asarray(res)

    x0 = np.array([1.0] + [max(start[n], 0.0) * 1e6 for n in names[1:]])
    lower = np.array([1e-3] + [0.0] * (len(names) - 1))
    result = least_squares(residuals, x0, bounds=(lower, np.inf), x_scale="jac", xtol=1e-12)
    return unpack(result.x), method + " + scipy.optimize.least_squares(relative residuals)"


# --------------------------------------------------------------------------- files


def default_output_path(generation: str, tag: str) -> Path:
    """``topologies/calibrated/<generation>.<tag>.toml`` beside the shipped files."""
    if not _TAG_RE.match(tag):
        raise CalibrationError(
            f"tag {tag!r} must be letters, digits, '_' or '-', e.g. 'scalingbook-2025'"
        )
    return shipped_topologies_dir() / "calibrated" / f"{generation}.{tag}.toml"


def toml_value(value: Any) -> str:
    """``value`` as a TOML value (inline tables for dicts)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        return f'"{escaped}"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {value!r} as TOML")


def quote_key(key: str) -> str:
    """A TOML key, quoted when it is not a bare key."""
    return key if re.match(r"^[A-Za-z0-9_\-]+$", key) else toml_value(key)


def _calibration_table(fit: CalibrationFit) -> list[str]:
    """The ``[calibration]`` table: how the numbers were fitted, and every residual."""
    lines = [
        "",
        "[calibration]",
        f"format = {toml_value(_FORMAT)}",
        f"method = {toml_value(fit.method)}",
        f"fitted = {toml_value(list(fit.fitted))}",
        f"measurement_file = {toml_value(fit.source_name)}",
        f"measurement_sha256 = {toml_value(fit.source_sha256)}",
        "shipped_link_bandwidth_bytes_per_s = "
        + toml_value(fit.shipped_link_bandwidth_bytes_per_s),
        f"shipped_hop_latency_s = {toml_value(fit.shipped_hop_latency_s)}",
        f"rms_residual_s = {toml_value(fit.rms_residual_s)}",
        f"mape_percent = {toml_value(fit.mape_percent)}",
        f"skipped_rows = {toml_value(list(fit.skipped))}",
        "",
        "[calibration.overhead_s]",
    ]
    lines.extend(f"{quote_key(k)} = {toml_value(v)}" for k, v in fit.overhead_s)
    for r in fit.residuals:
        lines += [
            "",
            "[[calibration.residuals]]",
            f"row_id = {toml_value(r.row_id)}",
            f"kind = {toml_value(r.kind)}",
            f"measured_s = {toml_value(r.measured_s)}",
            f"fitted_s = {toml_value(r.fitted_s)}",
            f"residual_s = {toml_value(r.residual_s)}",
        ]
    return lines


def write_calibrated_topology(
    fit: CalibrationFit, path: str | Path, *, force: bool = False
) -> Path:
    """Write the shipped ``<gen>.toml`` with the fitted link numbers, plus a [calibration] table.

    Refuses to write over any shipped ``topologies/<gen>.toml`` and, unless
    ``force``, over an existing file.
    """
    out = refuse_shipped(Path(path), fit.generation, force=force)
    shipped_path = topologies_dir(fit.generation) / f"{fit.generation}.toml"
    with shipped_path.open("rb") as fh:
        shipped = tomllib.load(fh)
    note = (
        f"calibrated by aoizora calibrate ({fit.method}) from {fit.source_name or 'measurements'}"
        f" (sha256 {fit.source_sha256[:16] or '-'}), {len(fit.residuals)} rows; shipped value "
    )
    lines = [
        f"# Calibrated {fit.generation} topology, written by `aoizora calibrate`. The shipped",
        f"# defaults stay in topologies/{fit.generation}.toml; only the link numbers differ here.",
    ]
    tables: list[tuple[str, dict[str, Any]]] = []
    for key, value in shipped.items():
        if isinstance(value, dict) and not ("value" in value and "source" in value):
            tables.append((key, value))
            continue
        if key == "link_bandwidth_bytes_per_s":
            value = {
                "value": fit.link_bandwidth_bytes_per_s,
                "source": note + repr(fit.shipped_link_bandwidth_bytes_per_s),
            }
        elif key == "hop_latency_s":
            fitted = "hop_latency" in fit.fitted
            value = {
                "value": fit.hop_latency_s,
                "source": (note + repr(fit.shipped_hop_latency_s))
                if fitted
                else shipped[key]["source"] + " (kept: not fitted)",
            }
        elif key == "collective_overhead_s" and "overhead:*" in fit.fitted:
            value = {"value": fit.overhead_for("*"), "source": note + repr(value["value"])}
            value["source"] += "; determined by rows " + cited_rows(fit, "*")
        lines.append(f"{quote_key(key)} = {toml_value(value)}")
    for name, table in tables:
        lines.append("")
        lines.append(f"[{quote_key(name)}]")
        lines.extend(f"{quote_key(k)} = {toml_value(v)}" for k, v in table.items())
    lines += _calibration_table(fit)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def refuse_shipped(out: Path, generation: str, *, force: bool) -> Path:
    """``out`` unless it is in the shipped topology folder, or exists and ``force`` is off.

    ``DIR/<generation>.toml`` elsewhere is allowed: ``--topology-dir DIR`` reads it.
    """
    if out.resolve().parent == shipped_topologies_dir().resolve():
        raise CalibrationError(
            f"refusing to write {str(out)!r}: shipped topology files never change; write "
            f"beside them, e.g. {default_output_path(generation, 'mytag')}"
        )
    if out.exists() and not force:
        raise CalibrationError(f"{str(out)!r} exists; pass --force to replace it, or another --out")
    return out


def cited_rows(fit: CalibrationFit, kind: str) -> str:
    """The rows that determine overhead ``kind``, with their share, e.g. ``"a (60%), b (35%)"``."""
    rows = dict(fit.determined_by).get(kind, ())
    return ", ".join(f"{row_id} ({100 * share:.0f}%)" for row_id, share in rows) or "-"


def load_calibration(path: str | Path) -> CalibrationFit:
    """Read a file written by :func:`write_calibrated_topology` back into a fit."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            data = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise CalibrationError(f"cannot read calibrated topology {str(p)!r}: {exc}") from None
    cal = data.get("calibration")
    if not isinstance(cal, dict) or cal.get("format") != _FORMAT:
        raise CalibrationError(
            f"{str(p)!r} has no [calibration] table of format {_FORMAT!r}; write one with "
            "`aoizora calibrate FILE --generation v5e`"
        )
    residuals = tuple(
        RowResidual(r["row_id"], r["kind"], float(r["measured_s"]), float(r["fitted_s"]))
        for r in cal.get("residuals", [])
    )
    return CalibrationFit(
        generation=str(data["generation"]),
        link_bandwidth_bytes_per_s=float(data["link_bandwidth_bytes_per_s"]["value"]),
        hop_latency_s=float(data["hop_latency_s"]["value"]),
        overhead_s=tuple((k, float(v)) for k, v in cal.get("overhead_s", {}).items()),
        fitted=tuple(cal.get("fitted", ())),
        method=str(cal.get("method", "")),
        residuals=residuals,
        shipped_link_bandwidth_bytes_per_s=float(cal["shipped_link_bandwidth_bytes_per_s"]),
        shipped_hop_latency_s=float(cal["shipped_hop_latency_s"]),
        skipped=tuple(cal.get("skipped_rows", ())),
        source_name=str(cal.get("measurement_file", "")),
        source_sha256=str(cal.get("measurement_sha256", "")),
    )


def calibrated_slice(name: str, path: str | Path) -> Slice:
    """``load_slice(name)`` with the link numbers of a calibrated topology file.

    The chip's compute and memory numbers stay the shipped ones; the slice
    keeps the shipped wrap-around rule.
    """
    fit = load_calibration(path)
    base = load_slice(name)
    if base.chip.generation != fit.generation:
        raise CalibrationError(
            f"{str(path)!r} calibrates {fit.generation}, not the {base.chip.generation} slice "
            f"{name!r}; use a {fit.generation} slice such as '{fit.generation}:2x4'"
        )
    return make_slice(
        base.shape,
        wraparound=list(base.wraparound),
        link_bandwidth_bytes_per_s=fit.link_bandwidth_bytes_per_s,
        hop_latency_s=fit.hop_latency_s,
        chip=base.chip,
        name=name,
    )


def file_sha256(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes (recorded so a calibration names its input exactly)."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError as exc:
        raise ValidationError(f"cannot read {str(path)!r}: {exc.strerror}") from None
