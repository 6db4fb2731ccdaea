"""How fast ``aoizora plan`` refuses a slice libtpu cannot describe (target: under 2 s).

Runs, each in a fresh process, several times:

* ``baseline``: ``python -c "import jax"`` -- the floor every aoizora command pays;
* ``bad slice``: ``aoizora plan --workload examples/tiny_block.py:make --slice v5e:3x3``
  (and the same with ``--model wan2.1-1.3b``, ``tpu7x:3x3x1``, and a ``whatif`` whose
  second slice is bad), which must fail before Stage 1 with the nearest valid shapes --
  refused by libtpu's shape rule (``aoizora.tpu.libtpu_describes``) before jax starts;
* ``no topology file``: ``--slice v9:2x2`` (refused by sim.topology, before jax).

It prints the median wall time of each, the ratio to the ``import jax`` floor, the
median CPU time (user + system of the child: what the wall time would be on an idle
machine, since the work is one thread), and the machine load (``os.getloadavg``) before
and after: the machine is shared, so quote both. Usage::

    .venv/bin/python benchmarks/slice_check_bench.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["CASES", "main", "time_command"]

ROOT = Path(__file__).resolve().parent.parent
CASES: dict[str, list[str]] = {
    "import jax (floor)": [sys.executable, "-c", "import jax"],
    "plan --workload, v5e:3x3": [
        sys.executable, "-m", "aoizora", "plan", "--workload", "examples/tiny_block.py:make",
        "--slice", "v5e:3x3",
    ],
    "plan --model wan2.1-1.3b, v5e:3x3": [
        sys.executable, "-m", "aoizora", "plan", "--model", "wan2.1-1.3b", "--slice", "v5e:3x3",
    ],
    "plan --model wan2.1-1.3b, tpu7x:3x3x1": [
        sys.executable, "-m", "aoizora", "plan", "--model", "wan2.1-1.3b", "--slice", "tpu7x:3x3x1",
    ],
    "whatif --slices v5e:2x2,v6e:5x5": [
        sys.executable, "-m", "aoizora", "whatif", "--model", "wan-tiny",
        "--slices", "v5e:2x2,v6e:5x5",
    ],
    "plan --model wan2.1-1.3b, v9:2x2": [
        sys.executable, "-m", "aoizora", "plan", "--model", "wan2.1-1.3b", "--slice", "v9:2x2",
    ],
}  # fmt: skip


def _child_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_command(argv: list[str]) -> tuple[float, float, int, str]:
    """Wall seconds, CPU seconds, exit code and the last stderr line of one run."""
    cpu0, t0 = _child_cpu_s(), time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=300)
    elapsed, cpu = time.perf_counter() - t0, _child_cpu_s() - cpu0
    last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
    return elapsed, cpu, proc.returncode, last


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per case (default 5)")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    medians: dict[str, float] = {}
    for name, command in CASES.items():
        runs = [time_command(command) for _ in range(args.repeat)]
        medians[name] = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        codes = sorted({r[2] for r in runs})
        print(
            f"{name:<36} median wall {medians[name]:.2f} s, CPU {cpu:.2f} s over "
            f"{args.repeat} (exit {codes})"
        )
        if runs[-1][3]:
            print(f"    {runs[-1][3][:200]}")
    floor = medians["import jax (floor)"]
    for name, median in medians.items():
        print(f"{name:<36} {median / floor:.2f}x the import-jax floor")
    load_after = os.getloadavg()
    print(f"load average (1, 5, 15 min): before {load_before}, after {load_after}")
    print(f"cores: {os.cpu_count()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
