"""The regression gate: each group's metrics against thresholds.

``aoizora validate FILE --min-spearman X --min-top1 X --max-mape X --max-step-mape X
--min-step-order X`` exits 1 when :func:`gate` returns any failure. Collective groups
are held to Spearman's rho, top-1 and MAPE; step groups to top-1, their own MAPE limit
and the order agreement (the measured order of configurations wherever the
measurements differ by more than their spread).

Example
-------
>>> from aoizora.studies.validation.validate import GroupReport, RowPrediction, ValidationReport
>>> g = GroupReport(
...     kind="collective", workload="all-gather dims:0", slice_label="v5e:2x2",
...     rows=(RowPrediction("a", 1.1, 1.0, None), RowPrediction("b", 2.2, 2.0, None)),
...     spearman=1.0, top1=True, mape_percent=10.0)
>>> gate(ValidationReport(groups=(g,)), Thresholds(min_spearman=0.9, max_mape_percent=20))
()
>>> print(gate(ValidationReport(groups=(g,)), Thresholds(max_mape_percent=5.0))[0])
all-gather dims:0 on v5e:2x2: mape_percent = 10 (needs <= 5)
"""

from __future__ import annotations

from dataclasses import dataclass

from aoizora.studies.validation.validate import ValidationReport

__all__ = ["GateFailure", "Thresholds", "gate"]


@dataclass(frozen=True)
class Thresholds:
    """Gate limits; ``None`` switches a check off.

    ``min_top1`` applies to each group's top-1 agreement as 1.0 (agree) or
    0.0 (disagree), so ``min_top1=1`` demands agreement in every group.
    Groups whose Spearman rho is undefined (fewer than two rows, or constant
    values) are not held to ``min_spearman``.
    """

    min_spearman: float | None = None
    min_top1: float | None = None
    max_mape_percent: float | None = None
    max_step_mape_percent: float | None = None
    min_step_order: float | None = None


@dataclass(frozen=True)
class GateFailure:
    """One metric of one group outside its threshold."""

    workload: str
    slice_label: str
    metric: str
    value: float
    limit: float

    def __str__(self) -> str:
        side = "<=" if "mape" in self.metric else ">="
        return (
            f"{self.workload} on {self.slice_label}: {self.metric} = {self.value:.4g} "
            f"(needs {side} {self.limit:g})"
        )


def gate(report: ValidationReport, thresholds: Thresholds) -> tuple[GateFailure, ...]:
    """Every (group, metric) outside ``thresholds``; empty means the gate passes."""
    failures: list[GateFailure] = []
    t = thresholds
    for g in report.groups:
        checks: list[tuple[str, float | None, float | None, bool]] = [
            ("top1", 1.0 if g.top1 else 0.0, t.min_top1, False)
        ]
        if g.kind in ("step", "vae"):  # programs: judged alike
            checks.append(("step_mape_percent", g.mape_percent, t.max_step_mape_percent, True))
            checks.append(("step_order", g.order_agreement, t.min_step_order, False))
        else:
            checks.append(("spearman", g.spearman, t.min_spearman, False))
            checks.append(("mape_percent", g.mape_percent, t.max_mape_percent, True))
        for metric, value, limit, is_max in checks:
            if value is None or limit is None:
                continue
            if (value > limit) if is_max else (value < limit):
                failures.append(GateFailure(g.workload, g.slice_label, metric, value, limit))
    return tuple(failures)
