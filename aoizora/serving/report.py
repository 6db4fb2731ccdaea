"""``aoizora serve``'s answer: one table of every option, and its JSON.

The JSON names are an interface: ``options`` (one object per slice and replica count:
``slice``, ``replicas``, ``p50_s``, ``p95_s``, ``p99_s``, ``throughput_per_h``,
``utilisation``, ``cost_per_clip``, ``meets_slo``, and more) and ``cheapest`` (one of
them, or null).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aoizora.serving.prices import PriceTable
from aoizora.serving.rates import format_rate
from aoizora.serving.sizing import Option, SizingReport, SizingSettings
from aoizora.serving.stats import Estimate

__all__ = ["render_sizing", "sizing_json"]

_HEADER = ("slice", "replicas", "chips", "clip", "util", "p50", "p95", "p99 (95% CI)",
           "clips/h", "queue", "$/h", "$/clip", "p99 SLO")  # fmt: skip


def _num(value: float) -> str:
    """A figure to about four significant digits: whole above 1000, three below 1."""
    if abs(value) >= 1000:
        return f"{value:.0f}"
    return f"{value:.1f}" if abs(value) >= 1 else f"{value:.3g}"


def _s(value: float | None) -> str:
    return "-" if value is None else _num(value)


def _p99(est: Estimate | None) -> str:
    if est is None:
        return "-"
    lo_hi = est.interval
    mean = _num(est.mean)
    return mean if lo_hi is None else f"{mean} [{_num(lo_hi[0])}, {_num(lo_hi[1])}]"


def _cells(o: Option, cheapest: Option | None) -> tuple[str, ...]:
    stats = o.stats or {}
    cost = o.cost_per_clip
    slo = "meets" if o.meets_slo else ("unstable" if o.stats is None else "misses")
    return (
        o.slice_spec,
        str(o.replicas),
        str(o.num_chips * o.replicas),
        f"{_num(o.clip_s)} s",
        f"{o.utilisation:.2f}",
        _s(o.mean("p50_s")),
        _s(o.mean("p95_s")),
        _p99(stats.get("p99_s")),
        _s(o.mean("throughput_per_h")),
        "-" if o.stats is None else f"{o.mean('mean_queue_length'):.2f}",
        f"{o.usd_per_hour:.2f}",
        "-" if cost is None else _num(cost),
        slo + (" <- cheapest" if o is cheapest else ""),
    )


def render_sizing(report: SizingReport, settings: SizingSettings, what: str) -> str:
    """The table: one row per slice and replica count, latencies in seconds (simulated)."""
    rows = [_HEADER, *(_cells(o, report.cheapest) for o in report.options)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(_HEADER))]
    lines = [
        f"serving {what} at {format_rate(report.rate_per_s)}, p99 objective "
        f"{settings.slo_p99_s:g} s; every latency simulated (clip = text encoder + denoising "
        f"+ VAE decode), percentiles in seconds over "
        f"{settings.replications} replications of {settings.requests} requests",
    ]
    for i, r in enumerate(rows):
        cells = [
            c.ljust(w) if j == 0 else c.rjust(w)
            for j, (c, w) in enumerate(zip(r, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    c = report.cheapest
    if c is not None:
        lines.append(
            f"cheapest meeting p99 <= {settings.slo_p99_s:g} s: {c.replicas} x {c.slice_spec} "
            f"({c.num_chips * c.replicas} chips) at ${_num(c.cost_per_clip or 0.0)} per clip"
        )
    lines += [f"note: {n}" for n in report.notes]
    return "\n".join(lines) + "\n"


def sizing_json(
    report: SizingReport,
    settings: SizingSettings,
    prices: PriceTable,
    plans: Mapping[str, Any],
) -> dict[str, Any]:
    """``options``, ``cheapest`` and how they were made (rate, objective, prices, plans)."""
    generations = sorted({p["generation"] for p in plans.values()})
    return {
        "rate_per_s": report.rate_per_s,
        "rate": format_rate(report.rate_per_s),
        "slo_p99_s": settings.slo_p99_s,
        "options": [o.to_json() for o in report.options],
        "cheapest": None if report.cheapest is None else report.cheapest.to_json(),
        "notes": list(report.notes),
        "settings": {
            "replications": settings.replications,
            "requests": settings.requests,
            "warmup": settings.warmup,
            "seed": settings.seed,
            "batch": settings.batch,
            "replicas": None if settings.replicas is None else list(settings.replicas),
        },
        "prices": {g: prices.price(g).to_json() for g in generations},
        "plans": dict(plans),
    }
