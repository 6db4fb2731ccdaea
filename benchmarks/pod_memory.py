"""Peak memory and wall time of ``aoizora plan`` (or ``whatif``) against the device count.

Each slice is planned cold (a fresh cache) by the CLI in a child process, alone, one after
another; the summed resident memory of its whole process tree (the planner and every
worker) is sampled twice a second. The table gives, per slice, the devices, the peak, the
wall time and the exit code, then the growth exponent of each: the slope ``b`` of
``log y = a + b log devices`` over the rows that finished (1: linear in the devices; the
planner's fixed cost -- jax and libtpu, about 0.4 GB a process -- keeps it low on small
slices, so the exponent over the pods is the one to read).

    python benchmarks/pod_memory.py --quick            # wan-tiny on 4-32 devices, minutes
    python benchmarks/pod_memory.py                    # Wan 2.1 14B 720p, 64-2,048 devices
    python benchmarks/pod_memory.py --slices v5p:8x8x8,tpu7x:8x8x8 --command whatif

The default set takes hours on a 2-core machine (a 1,024-device compile takes minutes);
docs/planner.md ("What a machine needs") holds the numbers measured here.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from aoizora.resources import tree_rss_bytes
from sim.topology import parse_slice_spec

QUICK = ("v5e:2x2", "v5e:2x4", "v5p:2x2x2", "v5e:4x4", "v5p:2x2x4", "tpu7x:2x2x4")
QUICK_MODEL = ("wan-tiny", "256x256", "9")
POD = ("v6e:8x8", "v5p:4x4x4", "tpu7x:4x4x4", "v6e:16x16", "v5p:8x8x8", "tpu7x:8x8x8",
       "tpu7x:8x8x16")  # fmt: skip
POD_MODEL = ("wan2.1-14b", "720p", "81")
SAMPLE_S = 0.5


@dataclass(frozen=True)
class Row:
    """One slice's cold run."""

    slice_name: str
    devices: int
    peak_bytes: int
    wall_s: float
    code: int
    last_line: str


def _run(argv: list[str], timeout_s: float) -> tuple[int, int, float, str]:
    """(exit code, peak tree RSS, wall seconds, last stderr line) of the command."""
    start = time.monotonic()
    with tempfile.TemporaryFile(mode="w+") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)
        peak = 0
        while proc.poll() is None:
            peak = max(peak, tree_rss_bytes(proc.pid))
            if time.monotonic() - start > timeout_s:
                proc.terminate()
            time.sleep(SAMPLE_S)
        err.seek(0)
        lines = [ln for ln in err.read().splitlines() if ln.strip()]
    return proc.returncode, peak, time.monotonic() - start, (lines or [""])[-1][:160]


def _argv(args: argparse.Namespace, spec: str, cache: str) -> list[str]:
    model, resolution, frames = QUICK_MODEL if args.quick else POD_MODEL
    where = ["--slice", spec, "--no-clip", "--out", os.path.join(cache, "plan.json")]
    if args.command == "whatif":
        where = ["--slices", spec]
    return [
        sys.executable, "-m", "aoizora", args.command, "--model", model, "--resolution",
        resolution, "--frames", frames, *where, "--cache-dir", cache,
        *(["--max-memory-gb", str(args.max_memory_gb)] if args.max_memory_gb else []),
        *(["--workers", str(args.workers)] if args.workers else []),
    ]  # fmt: skip


def growth_exponent(points: list[tuple[float, float]]) -> float | None:
    """The least-squares slope of log y on log x (None under two distinct x).

    >>> round(growth_exponent([(64, 1.0), (128, 2.0), (256, 4.0)]), 6)
    1.0
    """
    pts = [(math.log(x), math.log(y)) for x, y in points if x > 0 and y > 0]
    if len({x for x, _ in pts}) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sxx


def _table(rows: list[Row]) -> str:
    lines = [f"{'slice':14s} {'devices':>7s} {'peak RSS':>9s} {'wall':>8s} {'exit':>4s}  last line"]
    for r in rows:
        lines.append(
            f"{r.slice_name:14s} {r.devices:7d} {r.peak_bytes / 1e9:7.2f} GB {r.wall_s:7.0f}s "
            f"{r.code:4d}  {r.last_line}"
        )
    done = [r for r in rows if r.code == 0]
    for name, pick in (("peak RSS", lambda r: r.peak_bytes), ("wall time", lambda r: r.wall_s)):
        b = growth_exponent([(r.devices, pick(r)) for r in done])
        shown = "n/a (fewer than two device counts finished)" if b is None else f"{b:.2f}"
        lines.append(f"growth exponent of {name} in the devices: {shown}")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="wan-tiny on small slices (minutes)")
    p.add_argument("--slices", default=None, help="comma-separated slices (default: the set)")
    p.add_argument("--command", choices=("plan", "whatif"), default="plan")
    p.add_argument("--workers", type=int, default=None, help="passed to the command")
    p.add_argument("--max-memory-gb", type=float, default=None, help="passed to the command")
    p.add_argument("--timeout-s", type=float, default=3600.0, help="per slice (default 1 h)")
    args = p.parse_args()
    specs = args.slices.split(",") if args.slices else list(QUICK if args.quick else POD)
    rows: list[Row] = []
    for spec in specs:
        devices = parse_slice_spec(spec).num_devices
        with tempfile.TemporaryDirectory(prefix="aoizora-pod-memory-") as cache:
            code, peak, wall, last = _run(_argv(args, spec, cache), args.timeout_s)
        rows.append(Row(spec, devices, peak, wall, code, last))
        print(f"[pod_memory] {spec}: {peak / 1e9:.2f} GB, {wall:.0f} s, exit {code}",
              file=sys.stderr, flush=True)  # fmt: skip
    sys.stdout.write(_table(rows))
    return 0 if all(r.code == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
