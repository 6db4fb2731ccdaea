"""Latency CDFs of the simulated options (``aoizora serve --plot FILE``).

One curve per simulated option: the empirical distribution of request latency pooled
over its replications' measured requests, with the p99 objective as a vertical line.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on a server
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from aoizora.serving.sizing import SizingReport  # noqa: E402

__all__ = ["write_cdf_plot"]


def write_cdf_plot(report: SizingReport, slo_p99_s: float, path: str | Path) -> Path:
    """Write the latency CDFs of every simulated option to ``path`` (PNG or PDF)."""
    out = Path(path)
    fig, ax = plt.subplots(figsize=(8, 5))
    for o in report.options:
        if not o.runs:
            continue
        latencies = np.sort(np.concatenate([r.latencies_s for r in o.runs]))
        label = f"{o.replicas} x {o.slice_spec}" + (" *" if o is report.cheapest else "")
        fraction = np.arange(1, len(latencies) + 1) / len(latencies)
        ax.step(latencies, fraction, where="post", label=label)
    ax.axvline(slo_p99_s, color="black", linestyle="--", label=f"p99 objective {slo_p99_s:g} s")
    ax.axhline(0.99, color="grey", linewidth=0.5)
    ax.set_xlabel("request latency, s (simulated)")
    ax.set_ylabel("fraction of requests")
    ax.set_title("latency CDF per option (* cheapest meeting the objective)")
    ax.legend(fontsize="small", loc="lower right")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return out
