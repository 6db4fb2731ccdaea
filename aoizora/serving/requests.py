"""The requests a deployment serves: Poisson arrivals at a rate, or a CSV trace.

A :class:`Request` asks for one clip of a :class:`RequestKind` (model, clip size,
denoising steps); requests of one kind can share a batch. A trace is a CSV file with a
header; ``arrival_s`` is required, ``model``, ``resolution``, ``frames`` and ``steps``
may be left out (or empty) and then come from ``--model``, ``--resolution`` and the
model's defaults::

    arrival_s,model,resolution,frames,steps
    0.0,wan2.1-14b,720p,81,50
    12.5,wan2.1-14b,480p,,

    >>> import numpy as np
    >>> kind = RequestKind("wan2.1-14b", Clip(1280, 720, 81), 50)
    >>> reqs = poisson_arrivals(rate_per_s=0.5, count=3, kind=kind, rng=np.random.default_rng(0))
    >>> [round(r.arrival_s, 3) for r in reqs], kind.label
    ([1.36, 3.399, 3.439], 'wan2.1-14b@1280x720x81/50 steps')
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aoizora.errors import AoizoraError, ServingError
from aoizora.workloads.clip import Clip

__all__ = ["Request", "RequestKind", "poisson_arrivals", "read_trace", "trace_rate_per_s"]

TRACE_COLUMNS = ("arrival_s", "model", "resolution", "frames", "steps")


@dataclass(frozen=True, order=True)
class RequestKind:
    """What a request asks for: one clip of ``model`` at ``clip`` in ``steps`` steps."""

    model: str
    clip: Clip
    steps: int

    @property
    def label(self) -> str:
        return f"{self.model}@{self.clip.label}/{self.steps} steps"


@dataclass(frozen=True)
class Request:
    """One request: its number, when it arrives and what it asks for."""

    id: int
    arrival_s: float
    kind: RequestKind


def poisson_arrivals(
    *, rate_per_s: float, count: int, kind: RequestKind, rng: np.random.Generator
) -> tuple[Request, ...]:
    """``count`` requests of ``kind`` with exponential gaps of mean ``1 / rate_per_s``."""
    gaps = rng.exponential(1.0 / rate_per_s, size=count)
    times = np.cumsum(gaps)
    return tuple(Request(i, float(t), kind) for i, t in enumerate(times))


# (model, resolution, frames or None, steps or None) -> the request's kind
KindOf = Callable[[str, str, int | None, int | None], RequestKind]


def _int(value: str, column: str, where: str) -> int | None:
    if not value.strip():
        return None
    try:
        return int(value)
    except ValueError:
        raise ServingError(f"{where}: {column} {value!r} is not a whole number, e.g. 81") from None


def _row(row: dict[str, str], where: str, defaults: tuple[str | None, str | None],
         kind_of: KindOf) -> tuple[float, RequestKind]:  # fmt: skip
    try:
        arrival = float(row.get("arrival_s") or "")
    except ValueError:
        raise ServingError(
            f"{where}: arrival_s {row.get('arrival_s')!r} is not a number of seconds, e.g. 12.5"
        ) from None
    if not math.isfinite(arrival) or arrival < 0:
        raise ServingError(f"{where}: arrival_s {arrival!r} must be a time >= 0 seconds")
    model = (row.get("model") or "").strip() or defaults[0]
    resolution = (row.get("resolution") or "").strip() or defaults[1]
    if model is None or resolution is None:
        raise ServingError(
            f"{where}: no model or resolution; give them in the row or with --model and "
            "--resolution, e.g. 0.0,wan2.1-14b,720p,81,50"
        )
    frames = _int(row.get("frames") or "", "frames", where)
    steps = _int(row.get("steps") or "", "steps", where)
    try:
        return arrival, kind_of(model, resolution, frames, steps)
    except AoizoraError as exc:
        raise ServingError(f"{where}: {exc}") from None


def read_trace(
    path: str | Path,
    *,
    kind_of: KindOf,
    default_model: str | None = None,
    default_resolution: str | None = None,
) -> tuple[Request, ...]:
    """The requests of a trace file, in arrival order (ties keep file order)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ServingError(f"cannot read trace {str(p)!r}: {exc.strerror}") from None
    reader = csv.DictReader(text.splitlines())
    header = [h.strip() for h in (reader.fieldnames or [])]
    if "arrival_s" not in header or set(header) - set(TRACE_COLUMNS):
        raise ServingError(
            f"trace {str(p)!r} has columns {header}; a trace has arrival_s and optionally "
            f"{', '.join(TRACE_COLUMNS[1:])}, e.g. 'arrival_s,model,resolution,frames,steps'"
        )
    rows = []
    for line, raw in enumerate(reader, start=2):
        row = {k.strip(): (v or "") for k, v in raw.items() if k is not None}
        rows.append(_row(row, f"trace {p.name} line {line}",
                         (default_model, default_resolution), kind_of))  # fmt: skip
    if not rows:
        raise ServingError(f"trace {str(p)!r} has no requests; add rows under its header")
    order = sorted(range(len(rows)), key=lambda i: (rows[i][0], i))
    return tuple(Request(n, rows[i][0], rows[i][1]) for n, i in enumerate(order))


def trace_rate_per_s(requests: tuple[Request, ...]) -> float:
    """Requests per second over the trace's span (first to last arrival)."""
    span = requests[-1].arrival_s - requests[0].arrival_s
    if span <= 0:
        raise ServingError(
            f"the trace's {len(requests)} requests all arrive at {requests[0].arrival_s} s; "
            "a rate needs arrivals spread over time"
        )
    return (len(requests) - 1) / span
