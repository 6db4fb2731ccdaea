"""The time bound (``--max-minutes``): what each phase gets and what a cut says.

- a what-if's slices share the study's bound: each gets the time left over the slices
  left, so one that ends early leaves its rest to the next;
- the compiles: with 1.5 rounds left (a round expected as long as Stage 1 took)
  everything is compiled; with less, no baseline and one round of picks, said in one
  line that names what was left out and the flag;
- the search gets the time left, at least ``MIN_SEARCH_S``, or ``--search-seconds``
  when that is sooner;
- a bad ``--max-minutes`` is one line, exit 2, before any work.
"""

from __future__ import annotations

from typing import Any

import pytest

from aoizora import timebound
from aoizora.cli import main
from aoizora.commands.whatif import shares_of
from aoizora.errors import WorkloadError
from aoizora.timebound import (
    FLAG,
    MIN_SEARCH_S,
    TimeBound,
    compiles_within,
    search_deadline,
    time_bound,
)


class _Clock:
    """A stand-in for :mod:`time` in :mod:`aoizora.timebound`: it moves when told to."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    fake = _Clock()
    monkeypatch.setattr(timebound, "time", fake)
    return fake


def test_each_slice_gets_the_time_left_over_the_slices_left(clock: _Clock) -> None:
    study = time_bound(15.0)
    assert study is not None and study.left() == 900.0
    shares: list[TimeBound] = []
    spent = iter([200.0, 400.0, 0.0])  # what each slice takes of the clock

    def plan(*_: Any, time_bound: TimeBound, **__: Any) -> None:
        shares.append(time_bound)
        clock.now += next(spent)

    planned = shares_of(study, 3, plan)
    for _ in range(3):
        planned()
    # 900 / 3; the first left 100 s of its 300 to the others: 700 / 2; then what is left.
    assert [s.seconds for s in shares] == [300.0, 350.0, 300.0]
    assert all(s.minutes == 15.0 for s in shares)
    assert "300 s this slice" in shares[0].describe() and FLAG in shares[0].describe()
    nothing: list[TimeBound | None] = []
    shares_of(None, 2, lambda **kw: nothing.append(kw["time_bound"]))()
    assert nothing == [None]  # --max-minutes 0: no bound, no share


def test_the_shares_keep_back_the_longest_a_row_took_after_its_plan(clock: _Clock) -> None:
    # A row's link utilisation runs after its plan (a full replay: 8-20 s on 512 chips);
    # the last slice's runs past its share, so every share after the first keeps back the
    # longest such time seen: 3 pod slices ended 18 s past a 15-minute what-if.
    study = time_bound(15.0)
    assert study is not None
    shares: list[TimeBound] = []
    spent = iter([300.0, 300.0, 0.0])  # each slice's plan

    def plan(*_: Any, time_bound: TimeBound, **__: Any) -> None:
        shares.append(time_bound)
        clock.now += next(spent)

    planned = shares_of(study, 3, plan)
    for after_s in (20.0, 8.0, 5.0):  # what each row takes after its plan
        planned()
        clock.now += after_s
    # 900 / 3; then (900 - 320 - 20) / 2; then (900 - 628 - 20) / 1.
    assert [s.seconds for s in shares] == [300.0, 280.0, 252.0]
    assert 628.0 + 252.0 + 5.0 <= 900.0  # the study's end, within its bound


def _compiles(left_s: float, *, round_s: float, picks: int = 2, workers: int = 2) -> Any:
    bound = TimeBound(15.0, 900.0, ends_at=timebound.time.monotonic() + left_s)
    lines: list[str] = []
    got = compiles_within(
        bound, [f"pick{i}" for i in range(picks)], ["existing deployment", "recipe"],
        names=str, round_s=round_s, workers=workers, where="tpu7x:8x8x8", say=lines.append,
    )  # fmt: skip
    return got, lines


def test_compiles_beyond_what_the_time_left_holds_are_left_out_baselines_first(
    clock: _Clock,
) -> None:
    # 1.5 rounds left: everything, silently.
    (picks, baselines), lines = _compiles(225.0, round_s=150.0)
    assert picks == ["pick0", "pick1"] and baselines == ["existing deployment", "recipe"]
    assert lines == []
    # Less: the picks of one round, no baseline, one line naming them and the flag.
    (picks, baselines), lines = _compiles(224.0, round_s=150.0, picks=3)
    assert picks == ["pick0", "pick1"] and baselines == []
    assert len(lines) == 1 and "\n" not in lines[0]
    assert "left out pick2, existing deployment, recipe; --max-minutes raises it" in lines[0]
    assert "224 s left on tpu7x:8x8x8 after Stage 1 (150 s) holds less than 1.5 rounds" in lines[0]
    # Past the bound: still the first pick (a plan needs one), here one worker's round.
    (picks, baselines), lines = _compiles(-50.0, round_s=10.0, workers=1)
    assert picks == ["pick0"] and baselines == [] and "0 s left" in lines[0]
    # No bound: everything.
    assert compiles_within(
        None, ["a"], ["b"], names=str, round_s=1e9, workers=1, where="s", say=print
    ) == (["a"], ["b"])


def test_the_search_gets_the_time_left_or_sooner_what_was_asked(clock: _Clock) -> None:
    bound = time_bound(10.0)
    assert bound is not None
    assert search_deadline(bound, None) == 600.0
    assert search_deadline(bound, 120.0) == 120.0  # --search-seconds came first
    clock.now += 590.0
    assert search_deadline(bound, None) == MIN_SEARCH_S  # late, but a search still runs
    assert search_deadline(None, None) is None and search_deadline(None, 7.0) == 7.0


@pytest.mark.parametrize("bad", [-1.0, float("inf"), float("nan")])
def test_a_bound_must_be_a_finite_number_of_minutes(bad: float) -> None:
    with pytest.raises(WorkloadError, match="--max-minutes .*: must be a number of minutes"):
        time_bound(bad)
    assert time_bound(0.0) is None


@pytest.mark.parametrize("command", ["plan", "whatif"])
def test_the_cli_refuses_a_negative_bound_in_one_line(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    where = ["--slice", "v5e:2x2"] if command == "plan" else ["--slices", "v5e:2x2"]
    code = main([command, "--model", "wan2.1-1.3b", *where, "--max-minutes", "-3"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1
    assert "--max-minutes -3.0: must be a number of minutes, 0 or more" in err
