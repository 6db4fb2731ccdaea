"""Ranking plot: Q2 (predicted step latency) of every placement of every sharding.

One column per logical sharding (in the order given), one dot per physical
placement at its Q2; the overall best (lowest Q2) is a star; optional measured
latencies are hollow squares beside their placements; optional baselines are
horizontal dashed lines. :func:`ranking_rows` is the table the plot draws.

>>> rows = ranking_rows([
...     RankingEntry("fsdp2xctx4", "default", 0.120),
...     RankingEntry("fsdp2xctx4", "transposed", 0.105),
...     RankingEntry("data2xctx4", "default", 0.110),
... ])
>>> for r in rows:
...     print(r.rank, r.sharding, r.placement, r.best_in_sharding)
1 fsdp2xctx4 transposed True
2 data2xctx4 default True
3 fsdp2xctx4 default False
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from aoizora.atomic import write_atomic_with
from aoizora.errors import PlanError

__all__ = ["RankingEntry", "RankingRow", "plot_ranking", "ranking_rows"]

_PNG_METADATA: dict[str, str | None] = {"Software": None}


@dataclass(frozen=True)
class RankingEntry:
    """One scored (sharding, placement) pair; ``measured_s`` when a TPU measured it."""

    sharding: str
    placement: str
    q2_s: float
    measured_s: float | None = None


@dataclass(frozen=True)
class RankingRow:
    """An entry with its overall rank (1 = lowest Q2) and whether it wins its sharding."""

    sharding: str
    placement: str
    q2_s: float
    measured_s: float | None
    rank: int
    best_in_sharding: bool


def ranking_rows(entries: Sequence[RankingEntry]) -> tuple[RankingRow, ...]:
    """Entries sorted by Q2 (ties: input order), ranked 1..n."""
    if not entries:
        raise PlanError("nothing to rank: give at least one (sharding, placement, Q2) entry")
    seen: set[tuple[str, str]] = set()
    for e in entries:
        if (e.sharding, e.placement) in seen:
            raise PlanError(
                f"placement {e.placement!r} of sharding {e.sharding!r} is listed twice; "
                "each (sharding, placement) pair is scored once"
            )
        seen.add((e.sharding, e.placement))
        if not e.q2_s > 0:
            raise PlanError(f"Q2 of {e.sharding}/{e.placement} is {e.q2_s!r}; it must be > 0 s")
    order = sorted(range(len(entries)), key=lambda i: (entries[i].q2_s, i))
    best: dict[str, int] = {}
    for i in order:
        best.setdefault(entries[i].sharding, i)
    return tuple(
        RankingRow(
            sharding=entries[i].sharding,
            placement=entries[i].placement,
            q2_s=entries[i].q2_s,
            measured_s=entries[i].measured_s,
            rank=rank,
            best_in_sharding=best[entries[i].sharding] == i,
        )
        for rank, i in enumerate(order, start=1)
    )


def plot_ranking(
    entries: Sequence[RankingEntry],
    path: str | Path,
    *,
    title: str | None = None,
    baselines: Mapping[str, float] | None = None,
    dpi: int = 150,
) -> Path:
    """Draw Q2 per placement per sharding to a PNG at ``path``; returns the path."""
    rows = ranking_rows(entries)
    shardings: list[str] = []
    for e in entries:
        if e.sharding not in shardings:
            shardings.append(e.sharding)
    fig = Figure(figsize=(max(6.5, 1.4 * len(shardings) + 3.0), 4.4))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    winner = rows[0]
    for col, sharding in enumerate(shardings):
        mine = [e for e in entries if e.sharding == sharding]
        n = len(mine)
        for j, e in enumerate(mine):
            # Spread the placements of one sharding across its column.
            x = col + (0.0 if n == 1 else -0.3 + 0.6 * j / (n - 1))
            is_winner = (e.sharding, e.placement) == (winner.sharding, winner.placement)
            ax.scatter(
                [x],
                [e.q2_s * 1e3],
                marker="*" if is_winner else "o",
                s=160 if is_winner else 28,
                color="tab:red" if is_winner else "tab:blue",
                zorder=3,
            )
            if e.measured_s is not None:
                ax.scatter(
                    [x + 0.06],
                    [e.measured_s * 1e3],
                    marker="s",
                    s=28,
                    facecolors="none",
                    edgecolors="tab:green",
                    zorder=3,
                )
            if n <= 6:
                ax.annotate(
                    e.placement,
                    (x, e.q2_s * 1e3),
                    xytext=(4, 3),
                    textcoords="offset points",
                    fontsize=6,
                    color="0.3",
                )
    for k, (label, value) in enumerate(sorted((baselines or {}).items())):
        ax.axhline(value * 1e3, ls="--", lw=1.0, color=f"C{(k + 4) % 10}", label=label)
    if any(e.measured_s is not None for e in entries):
        ax.scatter([], [], marker="s", facecolors="none", edgecolors="tab:green", label="measured")
    ax.scatter([], [], marker="*", s=80, color="tab:red", label=f"best: {winner.placement}")
    ax.set_xticks(range(len(shardings)))
    ax.set_xticklabels(shardings, rotation=20, ha="right", fontsize=7)
    ax.set_ylabel("Q2 predicted step latency (ms)")
    ax.set_xlim(-0.6, len(shardings) - 0.4)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    ax.set_title(
        title
        or f"Q2 per placement per sharding\nbest: {winner.sharding} / {winner.placement}, "
        f"{winner.q2_s * 1e3:.4g} ms",
        fontsize=9,
    )
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic_with(
        out, lambda tmp: fig.savefig(tmp, dpi=dpi, metadata=_PNG_METADATA, format="png")
    )
    return out
