"""The op-by-op picture of a profiled step: per category, measured beside predicted, and
every op as a point (predicted against measured, log-log, the diagonal is a perfect
prediction). :func:`plot_explanation` draws an :class:`~aoizora.studies.explain.Explanation`
(any object with its fields: this stage comes before the studies).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from aoizora.atomic import write_atomic_with

__all__ = ["plot_explanation"]

_PNG_METADATA: dict[str, str | None] = {"Software": None}


class _Category(Protocol):
    @property
    def category(self) -> str: ...
    @property
    def measured_s(self) -> float: ...
    @property
    def predicted_s(self) -> float: ...
    @property
    def error_percent(self) -> float: ...


class _Op(Protocol):
    @property
    def category(self) -> str: ...
    @property
    def measured_s(self) -> float: ...
    @property
    def predicted_s(self) -> float | None: ...


class _Explained(Protocol):
    @property
    def step_s(self) -> float: ...
    @property
    def rows(self) -> Sequence[_Op]: ...
    @property
    def device_ops_s(self) -> float: ...
    @property
    def predicted_s(self) -> float: ...
    def categories(self) -> Sequence[_Category]: ...


def plot_explanation(
    explanation: _Explained, path: str | Path, *, title: str = "", dpi: int = 130
) -> Path:
    """Draw ``explanation`` to a PNG at ``path``; returns the path."""
    cats = explanation.categories()
    fig = Figure(figsize=(11.0, 4.6))
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.3, 1.0]})
    ys = list(range(len(cats)))
    left.barh([y + 0.2 for y in ys], [c.measured_s * 1e3 for c in cats], height=0.4,
              color="tab:green", label="measured (device)")  # fmt: skip
    left.barh([y - 0.2 for y in ys], [c.predicted_s * 1e3 for c in cats], height=0.4,
              color="tab:blue", label="predicted (compute model)")  # fmt: skip
    left.set_yticks(ys, [f"{c.category} ({c.error_percent:+.0f} %)" for c in cats], fontsize=8)
    left.invert_yaxis()
    left.set_xlabel("ms per step")
    left.legend(fontsize=8, loc="lower right")
    left.set_title(
        f"step {explanation.step_s * 1e3:.1f} ms measured, ops {explanation.device_ops_s * 1e3:.1f}"
        f" ms, predicted {explanation.predicted_s * 1e3:.1f} ms",
        fontsize=9,
    )
    order = [c.category for c in cats]  # the explanation's order of categories
    colors = {c: f"C{i}" for i, c in enumerate(order)}
    points = [r for r in explanation.rows if r.predicted_s and r.measured_s > 0]
    for cat in order:
        mine = [r for r in points if r.category == cat]
        if mine:
            right.scatter([r.measured_s * 1e3 for r in mine],
                          [(r.predicted_s or 0.0) * 1e3 for r in mine],
                          s=10, color=colors[cat], label=cat)  # fmt: skip
    if points:
        lo = min(min(r.measured_s, r.predicted_s or 1.0) for r in points) * 1e3
        hi = max(max(r.measured_s, r.predicted_s or 0.0) for r in points) * 1e3
        right.plot([lo, hi], [lo, hi], color="0.5", linewidth=0.8)
        right.set_xscale("log")
        right.set_yscale("log")
    right.set_xlabel("measured ms per step (one op)")
    right.set_ylabel("predicted ms per step")
    right.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return write_atomic_with(
        path, lambda tmp: fig.savefig(tmp, format="png", dpi=dpi, metadata=_PNG_METADATA)
    )
