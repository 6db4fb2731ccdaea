"""Predicted against measured per-device memory: ``aoizora validate``'s memory section.

A step row that measured its memory (``peak_hbm_bytes``, written by ``aoizora measure``:
the runtime's bytes in use plus the program's reserved temporaries, docs/measure.md
"Memory") is held against the figure a plan records for the same program: the compiled
program's memory analysis (:func:`~aoizora.studies.validation.step.predict_step_memory`).
Rows without a measured peak are left out; gated rows only count towards the MAPE.

>>> from aoizora.studies.validation.format import parse_measurements
>>> head = "row_id,kind,slice,model,clip,mesh_shape,mesh_axes,rules_id,device_order,"
>>> text = head + '''measured_s,spread_kind,peak_hbm_bytes,source
... a,step,v5e:1x1,wan-tiny,5x64x64,1,data,maxdiffusion,0,1.0,unreported,100,x
... b,step,v5e:1x1,wan-tiny,9x64x64,1,data,maxdiffusion,0,1.0,unreported,200,x
... c,step,v5e:1x1,wan-tiny,13x64x64,1,data,maxdiffusion,0,1.0,unreported,,x
... '''
>>> rows = parse_measurements(text, name="doc")
>>> report = validate_memory(rows, predict=lambda r: {"a": 110, "b": 190}[r.row_id])
>>> [(m.row_id, m.error_percent) for m in report.rows], round(report.mape_percent, 9)
([('a', 10.0), ('b', -5.0)], 7.5)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from aoizora.metrics import mape_percent
from aoizora.studies.validation.format import Measurement

__all__ = ["MemoryReport", "MemoryRow", "validate_memory"]


@dataclass(frozen=True)
class MemoryRow:
    """One row's predicted and measured per-device bytes."""

    row_id: str
    predicted_bytes: int
    measured_bytes: int
    gated: bool

    @property
    def error_percent(self) -> float:
        """Signed error, ``100 * (predicted - measured) / measured``."""
        return 100.0 * (self.predicted_bytes - self.measured_bytes) / self.measured_bytes

    def to_json_dict(self) -> dict[str, object]:
        return {
            "row_id": self.row_id,
            "predicted_hbm_bytes": self.predicted_bytes,
            "peak_hbm_bytes": self.measured_bytes,
            "error_percent": self.error_percent,
            "gated": self.gated,
        }


@dataclass(frozen=True)
class MemoryReport:
    """Every row with a measured peak, and the MAPE over the gated ones (None: no row)."""

    rows: tuple[MemoryRow, ...]

    @property
    def mape_percent(self) -> float | None:
        gated = [r for r in self.rows if r.gated]
        if not gated:
            return None
        return mape_percent(
            [float(r.predicted_bytes) for r in gated], [float(r.measured_bytes) for r in gated]
        )

    def to_json_dict(self) -> dict[str, object]:
        return {"mape_percent": self.mape_percent, "rows": [r.to_json_dict() for r in self.rows]}

    def lines(self) -> list[str]:
        """The report's memory section (empty when no row measured its memory)."""
        if not self.rows:
            return []
        out = ["", "memory per device (predicted: the compiled program's memory analysis):"]
        for r in self.rows:
            out.append(
                f"  {r.row_id}: predicted {r.predicted_bytes / 1e9:.3f} GB, measured "
                f"{r.measured_bytes / 1e9:.3f} GB ({r.error_percent:+.1f} %)"
                + ("" if r.gated else " [not gated]")
            )
        mape = self.mape_percent
        out.append(f"memory MAPE over {sum(r.gated for r in self.rows)} gated rows: "
                   + ("n/a" if mape is None else f"{mape:.2f} %"))  # fmt: skip
        return out


def validate_memory(
    rows: Sequence[Measurement], *, predict: Callable[[Measurement], int | None]
) -> MemoryReport:
    """Predict the memory of every step row that measured it (``predict`` gives None when
    the compiler reports no memory: the row is then left out)."""
    out = []
    for row in rows:
        if row.peak_hbm_bytes is None:
            continue
        predicted = predict(row)
        if predicted is not None:
            out.append(MemoryRow(row.row_id, int(predicted), row.peak_hbm_bytes, row.gated))
    return MemoryReport(tuple(out))
