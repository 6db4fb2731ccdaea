"""Pictures of a simulated step: link-load heatmap, Perfetto trace, Q2 ranking plot.

Each module exposes the numbers it draws as data (so tests compare them with the
simulator's records) and a function that writes the file:

- :mod:`aoizora.report.pictures.heatmap`: :func:`link_loads`, :func:`plot_link_heatmap` (PNG)
- :mod:`aoizora.report.pictures.trace`: :func:`chrome_trace`, :func:`write_chrome_trace` (JSON)
- :mod:`aoizora.report.pictures.ranking`: :func:`ranking_rows`, :func:`plot_ranking` (PNG)

Matplotlib is used through its Agg canvas directly (no pyplot, no global
state), and PNGs are written without a timestamp or version tag, so the same
input gives the same bytes.
"""

from __future__ import annotations

from aoizora.report.pictures.heatmap import LinkLoad, LinkLoadMap, link_loads, plot_link_heatmap
from aoizora.report.pictures.ranking import RankingEntry, RankingRow, plot_ranking, ranking_rows
from aoizora.report.pictures.trace import chrome_trace, write_chrome_trace

__all__ = [
    "LinkLoad",
    "LinkLoadMap",
    "RankingEntry",
    "RankingRow",
    "chrome_trace",
    "link_loads",
    "plot_link_heatmap",
    "plot_ranking",
    "ranking_rows",
    "write_chrome_trace",
]
