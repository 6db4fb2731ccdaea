"""Fuzz every input format at scale: counts of tracebacks and hangs (target: 0 and 0).

Runs :mod:`tests.fuzz_inputs` -- real files mutated by Hypothesis, handed in-process
to each command's entry point (``aoizora hlo``, ``validate``, ``calibrate``,
``python -m sim flows``, a topology TOML under a slice, ``load_plan``, ``--workload``
factories) -- for ``--cases`` cases a format, and prints per format how many were
accepted (and round-tripped), rejected in one line naming the file (and how many
of those also name a line number; JSON errors name the field instead), skipped
(step rows would compile), and the failures: tracebacks, hangs (over 30 s), unclear errors and
broken round trips, with an example of each.

    python benchmarks/fuzz_bench.py                   # 1,000 cases a format
    python benchmarks/fuzz_bench.py --cases 200 --formats flows,plan-json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the tests package
from tests.fuzz_inputs import FAILURES, OUTCOMES, TARGETS, Tally, mutated, run_case  # noqa: E402


def _fuzz(name: str, cases: int, scratch: Path) -> tuple[Tally, float]:
    target = TARGETS[name]
    seeds = target.seeds()
    tally = Tally()

    @settings(
        max_examples=cases, deadline=None, database=None, derandomize=True,
        suppress_health_check=list(HealthCheck),
    )  # fmt: skip
    @given(st.data())
    def case(data: st.DataObject) -> None:
        seed = data.draw(st.sampled_from(seeds))
        run_case(target, data.draw(mutated(seed)), scratch, tally)

    t0 = time.perf_counter()
    case()
    return tally, time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=1000, help="cases a format (default 1000)")
    parser.add_argument("--formats", default=",".join(TARGETS), help="comma-separated formats")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()}")
    summary = {}
    failures = 0
    for name in args.formats.split(","):
        with tempfile.TemporaryDirectory(prefix=f"aoizora-fuzz-{name}-") as tmp:
            tally, seconds = _fuzz(name, args.cases, Path(tmp))
        counts = {o: tally.counts[o] for o in OUTCOMES}
        total = sum(counts.values())
        failures += tally.failures
        summary[name] = {**counts, "cases": total, "named_line": tally.named_line, "s": seconds}
        print(
            f"{name:14} {total:5} cases in {seconds:6.1f} s: "
            + ", ".join(f"{o} {counts[o]}" for o in OUTCOMES)
            + f"; rejections naming a line {tally.named_line}/{counts['rejected']}"
        )
        for outcome in FAILURES:
            for example in tally.examples.get(outcome, [])[:1]:
                print(f"  {outcome}: {example[-600:]}")
    print(f"failures (tracebacks, hangs, unclear, broken round trips): {failures}")
    print(f"load average {os.getloadavg()}")
    print(json.dumps(summary, sort_keys=True))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
