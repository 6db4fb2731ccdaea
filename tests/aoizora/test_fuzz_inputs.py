"""Every file a user hands in, fuzzed: exit 2 and one line naming it, never a traceback.

A small sample of :mod:`tests.fuzz_inputs` per format (``benchmarks/fuzz_bench.py``
runs 1,000 and more): mutated real files through each command's entry point,
in this process. A mutated file the command accepts must round-trip.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz_inputs import FAILURES, TARGETS, Tally, mutated, run_case

EXAMPLES = {"hlo": 12, "validate-csv": 10, "calibrate-csv": 4}  # others: 25


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_mutated_files_are_rejected_in_one_line_or_round_trip(name: str, scratch: Path) -> None:
    if name == "hlo":
        pytest.importorskip("libtpu")  # the seeds are real TPU compiles
    target = TARGETS[name]
    seeds = target.seeds()
    tally = Tally()

    @settings(
        max_examples=EXAMPLES.get(name, 25), deadline=None, database=None,
        suppress_health_check=list(HealthCheck),
    )  # fmt: skip
    @given(st.data())
    def case(data: st.DataObject) -> None:
        seed = data.draw(st.sampled_from(seeds))
        run_case(target, data.draw(mutated(seed)), scratch, tally)

    case()
    # The real files are accepted (the junk factories are, by design, rejected; a
    # measurement file with step rows is parsed only: they would compile).
    expected = {"rejected"} if name == "workload" else {"accepted", "skipped"}
    outcomes = [run_case(target, seed, scratch, Tally()) for seed in seeds]
    assert set(outcomes) <= expected and (name == "workload" or "accepted" in outcomes)
    assert tally.failures == 0, {o: tally.examples.get(o) for o in FAILURES if tally.counts[o]}
    assert tally.counts["rejected"] > 0  # the mutations do break files
