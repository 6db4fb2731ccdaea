"""Rank and error statistics shared by the planner and the validation gate.

Generic: they take plain sequences of numbers and know nothing of rows,
candidates or slices.

- :func:`rank_average` -- ranks 1..n with ties sharing their average rank (the
  "average" method of ``scipy.stats.rankdata``);
- :func:`spearman` -- Spearman's rank correlation: Pearson's correlation of the
  average ranks (Spearman 1904; the tie handling of ``scipy.stats.spearmanr``),
  ``None`` where it is undefined;
- :func:`top1_agreement` -- is the predicted-best item the measured best,
  within the measurements' spread;
- :func:`mape_percent` -- mean absolute percentage error.

Example
-------
>>> spearman([0.3, 0.1, 0.2], [31.0, 9.0, 20.0])
1.0
>>> top1_agreement([0.3, 0.1, 0.2], [31.0, 9.0, 20.0])
True
>>> round(mape_percent([0.3, 0.1, 0.2], [0.25, 0.1, 0.2]), 6)
6.666667
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["mape_percent", "rank_average", "spearman", "top1_agreement"]


def rank_average(values: Sequence[float]) -> np.ndarray:
    """Ranks 1..n, ties sharing the average of the ranks they span.

    >>> rank_average([10.0, 30.0, 20.0, 20.0]).tolist()
    [1.0, 4.0, 2.5, 2.5]
    """
    x = np.asarray(values, dtype=float)
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x), dtype=float)
    i = 0
    n = len(x)
    while i < n:
        j = i
        while j + 1 < n and x[order[j + 1]] == x[order[i]]:
            j += 1
        # Positions i..j (0-based) hold equal values: ranks i+1..j+1, average.
        ranks[order[i : j + 1]] = (i + j + 2) / 2.0
        i = j + 1
    return ranks


def spearman(predicted: Sequence[float], measured: Sequence[float]) -> float | None:
    """Spearman's rho: Pearson correlation of the average ranks.

    ``None`` when it is undefined: fewer than two rows, or all values on one
    side equal (zero rank variance).

    >>> spearman([1.0, 2.0, 3.0], [10.0, 20.0, 30.0])
    1.0
    >>> spearman([1.0, 2.0, 3.0], [30.0, 20.0, 10.0])
    -1.0
    >>> spearman([1.0], [2.0]) is None
    True
    """
    if len(predicted) != len(measured):
        raise ValueError(f"{len(predicted)} predictions for {len(measured)} measurements")
    if len(predicted) < 2:
        return None
    a = rank_average(predicted)
    b = rank_average(measured)
    a = a - a.mean()
    b = b - b.mean()
    denom = math.sqrt(float(np.dot(a, a)) * float(np.dot(b, b)))
    if denom == 0.0:
        return None
    rho = float(np.dot(a, b)) / denom
    return max(-1.0, min(1.0, rho))


def top1_agreement(
    predicted: Sequence[float],
    measured: Sequence[float],
    spread: Sequence[float | None] | None = None,
) -> bool:
    """True when the row predicted fastest is measured fastest, within the measurements' spread.

    The predicted-fastest row (ties: the first such row) agrees when its
    measured interval ``[m - s, m + s]`` reaches down to the fastest row's
    interval, i.e. the measurement cannot tell the two apart; a missing
    spread counts as 0, so without spreads this is strict "is it the measured
    minimum".

    >>> top1_agreement([3.0, 1.0, 2.0], [30.0, 10.0, 20.0])
    True
    >>> top1_agreement([1.0, 3.0], [30.0, 10.0])
    False
    >>> top1_agreement([1.0, 3.0], [30.0, 10.0], spread=[15.0, 6.0])  # 15 <= 16: a tie
    True
    """
    if not predicted or len(predicted) != len(measured):
        raise ValueError("top-1 agreement needs equally many (>= 1) predictions and measurements")
    s = [0.0] * len(measured) if spread is None else [0.0 if v is None else v for v in spread]
    if len(s) != len(measured):
        raise ValueError(f"{len(s)} spreads for {len(measured)} measurements")
    best_pred = int(np.argmin(np.asarray(predicted, dtype=float)))
    fastest_upper = min(m + e for m, e in zip(measured, s, strict=True))
    return bool(measured[best_pred] - s[best_pred] <= fastest_upper)


def mape_percent(predicted: Sequence[float], measured: Sequence[float]) -> float:
    """Mean absolute percentage error, ``100 * mean(|p - m| / m)``.

    >>> round(mape_percent([1.1, 1.8], [1.0, 2.0]), 9)
    10.0
    """
    p = np.asarray(predicted, dtype=float)
    m = np.asarray(measured, dtype=float)
    if len(p) == 0 or p.shape != m.shape or np.any(m <= 0):
        raise ValueError("MAPE needs equally many predictions and positive measurements")
    return float(100.0 * np.mean(np.abs(p - m) / m))
