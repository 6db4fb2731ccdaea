"""Predict every row of a measurement file and compute each group's metrics.

Rows are grouped by :attr:`~aoizora.studies.validation.format.Measurement.group_key`
(kind, workload, slice): a group is one question -- "rank these configurations of
one step", "follow this size sweep of one collective". Each group gets
Spearman's rho, top-1 agreement and MAPE (:mod:`aoizora.metrics`) over its gated
rows (rows marked ``history`` or ``excluded`` are predicted and reported, not
gated), and the *order agreement*: of the pairs of gated rows whose measurements
differ by more than their spreads (``|m_i - m_j| > s_i + s_j``), how many the
predictions order the same way. The gate (:mod:`aoizora.studies.validation.gate`)
holds them against thresholds.

Example
-------
>>> from aoizora.studies.validation.format import parse_measurements
>>> text = '''row_id,kind,slice,collective,groups,size_bytes,measured_s,spread_s,spread_kind,source
... a,collective,v5e:2x2,all-gather,dims:0,1000000,2.0e-05,,unreported,https://example.org
... b,collective,v5e:2x2,all-gather,dims:0,4000000,5.0e-05,,unreported,https://example.org
... '''
>>> rows = parse_measurements(text, name="doc")
>>> report = validate(rows, predictors={"collective": lambda r: r.measured_s * 1.1})
>>> g = report.groups[0]
>>> g.n, g.spearman, g.top1, round(g.mape_percent, 6)
(2, 1.0, True, 10.0)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from aoizora.errors import ValidationError
from aoizora.metrics import mape_percent, spearman, top1_agreement
from aoizora.studies.validation.format import Measurement
from aoizora.studies.validation.origin import check_tpu_rows
from aoizora.studies.validation.predict import Predictor

__all__ = ["GroupReport", "RowPrediction", "ValidationReport", "order_pairs", "validate"]


@dataclass(frozen=True)
class RowPrediction:
    """One row's prediction next to its measurement."""

    row_id: str
    predicted_s: float
    measured_s: float
    spread_s: float | None
    status: str = ""

    @property
    def gated(self) -> bool:
        return not self.status

    @property
    def error_percent(self) -> float:
        """Signed error, ``100 * (predicted - measured) / measured``."""
        return 100.0 * (self.predicted_s - self.measured_s) / self.measured_s

    @property
    def within_spread(self) -> bool | None:
        """Whether the prediction lies within measured +- spread (None without a spread)."""
        if self.spread_s is None:
            return None
        return abs(self.predicted_s - self.measured_s) <= self.spread_s


@dataclass(frozen=True)
class GroupReport:
    """Metrics of one group of rows (same kind, workload and slice)."""

    kind: str
    workload: str
    slice_label: str
    rows: tuple[RowPrediction, ...]
    spearman: float | None
    top1: bool
    mape_percent: float
    order_pairs: tuple[int, int] = (0, 0)  # (pairs ordered as measured, decisive pairs)

    @property
    def n(self) -> int:
        """Gated rows (the metrics' rows)."""
        return sum(r.gated for r in self.rows)

    @property
    def order_agreement(self) -> float | None:
        """Fraction of decisive pairs predicted in the measured order (None: no such pair)."""
        agree, total = self.order_pairs
        return agree / total if total else None

    def to_json_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "workload": self.workload,
            "slice": self.slice_label,
            "n": self.n,
            "spearman": self.spearman,
            "top1": self.top1,
            "mape_percent": self.mape_percent,
            "order_agreement": self.order_agreement,
            "order_pairs": {"agree": self.order_pairs[0], "decisive": self.order_pairs[1]},
            "rows": [
                {
                    "row_id": r.row_id,
                    "status": r.status or "gated",
                    "predicted_s": r.predicted_s,
                    "measured_s": r.measured_s,
                    "spread_s": r.spread_s,
                    "error_percent": r.error_percent,
                    "within_spread": r.within_spread,
                }
                for r in self.rows
            ],
        }


@dataclass(frozen=True)
class ValidationReport:
    """Every group's metrics, in first-appearance order of the groups in the file."""

    groups: tuple[GroupReport, ...]

    @property
    def num_rows(self) -> int:
        return sum(g.n for g in self.groups)

    @property
    def overall_mape_percent(self) -> float:
        """MAPE over every gated row of every group."""
        rows = [r for g in self.groups for r in g.rows if r.gated]
        return mape_percent([r.predicted_s for r in rows], [r.measured_s for r in rows])

    @property
    def top1_rate(self) -> float:
        """Fraction of groups whose predicted fastest row is measured fastest."""
        return sum(g.top1 for g in self.groups) / len(self.groups)

    def to_json_dict(self) -> dict[str, object]:
        return {
            "num_rows": self.num_rows,
            "overall_mape_percent": self.overall_mape_percent,
            "top1_rate": self.top1_rate,
            "groups": [g.to_json_dict() for g in self.groups],
        }


def validate(
    rows: Sequence[Measurement], *, predictors: Mapping[str, Predictor]
) -> ValidationReport:
    """Predict every row with ``predictors[row.kind]`` and compute each group's metrics.

    Raises :class:`ValidationError` when a row's kind has no predictor (the
    message names the row), a predictor returns a non-positive latency, or a row ran on
    the host CPU, not its TPU slice (:mod:`aoizora.studies.validation.origin`).
    """
    if not rows:
        raise ValidationError("no measurement rows to validate")
    check_tpu_rows(rows)
    order: list[tuple[str, str, str]] = []
    grouped: dict[tuple[str, str, str], list[RowPrediction]] = {}
    for row in rows:
        predictor = predictors.get(row.kind)
        if predictor is None:
            raise ValidationError(
                f"row {row.row_id!r} (line {row.line}) is a {row.kind!r} row but no {row.kind!r} "
                f"predictor is registered (have: {sorted(predictors)}); step rows need the "
                "planner's predictor, or drop them from the file"
            )
        predicted = float(predictor(row))
        if not (math.isfinite(predicted) and predicted > 0):
            raise ValidationError(
                f"the {row.kind!r} predictor returned {predicted!r} for row {row.row_id!r}; "
                "a predicted latency must be a positive number of seconds"
            )
        key = row.group_key
        if key not in grouped:
            grouped[key] = []
            order.append(key)
        grouped[key].append(
            RowPrediction(
                row_id=row.row_id,
                predicted_s=predicted,
                measured_s=row.measured_s,
                spread_s=row.spread_s,
                status=row.status,
            )
        )
    return ValidationReport(groups=tuple(_group(key, grouped[key]) for key in order))


def order_pairs(rows: Sequence[RowPrediction]) -> tuple[int, int]:
    """(pairs predicted in the measured order, pairs whose measurements differ beyond spread).

    >>> rows = [RowPrediction("a", 1.0, 1.0, 0.1), RowPrediction("b", 2.0, 3.0, 0.1),
    ...         RowPrediction("c", 1.5, 1.05, 0.1)]
    >>> order_pairs(rows)  # a-b and c-b are decisive and ordered; a-c is within spread
    (2, 2)
    """
    agree = total = 0
    for i, a in enumerate(rows):
        for b in rows[i + 1 :]:
            if abs(a.measured_s - b.measured_s) <= (a.spread_s or 0.0) + (b.spread_s or 0.0):
                continue
            total += 1
            agree += (a.predicted_s - b.predicted_s) * (a.measured_s - b.measured_s) > 0
    return agree, total


def _group(key: tuple[str, str, str], preds: Sequence[RowPrediction]) -> GroupReport:
    gated = [r for r in preds if r.gated] or list(preds)
    p = [r.predicted_s for r in gated]
    m = [r.measured_s for r in gated]
    return GroupReport(
        kind=key[0],
        workload=key[1],
        slice_label=key[2],
        rows=tuple(preds),
        spearman=spearman(p, m),
        top1=top1_agreement(p, m, [r.spread_s for r in gated]),
        mape_percent=mape_percent(p, m),
        order_pairs=order_pairs(gated),
    )
