"""The generic rank statistics of aoizora.metrics, cross-checked against scipy and closed forms."""

from __future__ import annotations

import pytest
import scipy.stats  # type: ignore[import-untyped]
from hypothesis import given
from hypothesis import strategies as st

from aoizora.metrics import mape_percent, rank_average, spearman, top1_agreement


@given(
    st.lists(st.integers(min_value=0, max_value=5), min_size=1, max_size=30).map(
        lambda xs: [float(x) for x in xs]
    )
)
def test_rank_average_equals_scipy_rankdata(values: list[float]) -> None:
    assert rank_average(values).tolist() == scipy.stats.rankdata(values, method="average").tolist()


@given(
    st.integers(min_value=2, max_value=25).flatmap(
        lambda n: st.tuples(
            st.lists(st.integers(0, 6), min_size=n, max_size=n),
            st.lists(st.integers(0, 6), min_size=n, max_size=n),
        )
    )
)
def test_spearman_equals_scipy_spearmanr_with_ties(pair: tuple[list[int], list[int]]) -> None:
    a = [float(v) for v in pair[0]]
    b = [float(v) for v in pair[1]]
    ours = spearman(a, b)
    if len(set(a)) == 1 or len(set(b)) == 1:
        assert ours is None  # undefined: scipy returns nan here
        return
    theirs = scipy.stats.spearmanr(a, b).statistic
    assert ours is not None
    assert ours == pytest.approx(float(theirs), abs=1e-12)


def test_spearman_closed_form_without_ties() -> None:
    # rho = 1 - 6 sum d^2 / (n (n^2 - 1)): one adjacent swap in 10 rows.
    measured = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]
    predicted = [2.0, 1.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]
    assert spearman(predicted, measured) == pytest.approx(1 - 6 * 2 / (10 * 99))
    assert spearman([1.0], [1.0]) is None


def test_top1_and_mape() -> None:
    assert top1_agreement([2.0, 1.0], [5.0, 4.0])
    assert not top1_agreement([1.0, 2.0], [5.0, 4.0])
    # The spread makes rows 0 and 1 indistinguishable: [5-0.6, ...] reaches 4+0.5.
    assert top1_agreement([1.0, 2.0], [5.0, 4.0], [0.6, 0.5])
    assert not top1_agreement([1.0, 2.0], [5.0, 4.0], [0.4, 0.5])
    # Tied predictions: the first row counts as predicted best.
    assert top1_agreement([1.0, 1.0], [3.0, 4.0])
    assert not top1_agreement([1.0, 1.0], [4.0, 3.0])
    assert mape_percent([110.0, 45.0], [100.0, 50.0]) == pytest.approx(10.0)


@given(
    st.lists(
        st.tuples(st.integers(1, 50), st.integers(1, 50), st.integers(0, 10)),
        min_size=1,
        max_size=12,
    )
)
def test_top1_agreement_equals_brute_force(rows: list[tuple[int, int, int]]) -> None:
    # Brute force: the first row with the least prediction agrees when no row's
    # measured interval lies entirely below its interval.
    predicted = [float(p) for p, _, _ in rows]
    measured = [float(m) for _, m, _ in rows]
    spread = [float(s) for _, _, s in rows]
    best = predicted.index(min(predicted))
    lower = measured[best] - spread[best]
    expected = all(lower <= m + s for m, s in zip(measured, spread, strict=True))
    assert top1_agreement(predicted, measured, spread) == expected
    assert top1_agreement(predicted, measured, [None] * len(rows)) == top1_agreement(
        predicted, measured
    )


def test_mape_closed_form_and_bad_input() -> None:
    # |1.5 - 1| / 1 = 50 %, |3 - 4| / 4 = 25 %, |2 - 2| / 2 = 0 -> mean 25 %.
    assert mape_percent([1.5, 3.0, 2.0], [1.0, 4.0, 2.0]) == pytest.approx(25.0)
    for predicted, measured in (([], []), ([1.0], [1.0, 2.0]), ([1.0], [0.0])):
        with pytest.raises(ValueError):
            mape_percent(predicted, measured)
    with pytest.raises(ValueError):
        spearman([1.0, 2.0], [1.0])
    with pytest.raises(ValueError):
        top1_agreement([], [])
