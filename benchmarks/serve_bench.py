"""Honest figures for ``aoizora serve``: the sizing question answered warm, timed in one run.

Default case (issue 25): Wan2.1-14B, 720p, 81 frames, served from v5e:4x4, v6e:2x4 and
tpu7x:2x2x1 at 2 requests a minute with a p99 objective of 15 minutes. Target: the
answer within 2 minutes warm on this 2-core machine. Run it once cold first (the same
command: the plans compile into ``--cache-dir``, tens of minutes for the three slices'
steps and VAE decoders), then again: the second run prints the warm figures.

    python benchmarks/serve_bench.py [--cache-dir DIR] [--slices A,B,C] [--rate 2/min]
                                     [--slo-p99 900] [--replications 10]

Every line says what it measured: the wall time of the whole command (imports, plans
read from the cache, every simulation), how many options it simulated and how many
compiles were not read from the cache (0 when warm), and the machine's load average
before and after. The table follows.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from aoizora.commands.args import DEFAULT_CACHE_DIR


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="wan2.1-14b")
    p.add_argument("--resolution", default="720p")
    p.add_argument("--slices", default="v5e:4x4,v6e:2x4,tpu7x:2x2x1")
    p.add_argument("--rate", default="2/min")
    p.add_argument("--slo-p99", default="900")
    p.add_argument("--replications", default="10")
    p.add_argument("--cache-dir", default=os.environ.get("AOIZORA_CACHE_DIR", DEFAULT_CACHE_DIR))
    args = p.parse_args()
    cmd = [
        sys.executable, "-m", "aoizora", "serve", "--model", args.model,
        "--resolution", args.resolution, "--slices", args.slices, "--rate", args.rate,
        "--slo-p99", args.slo_p99, "--replications", args.replications,
        "--cache-dir", args.cache_dir, "--workers", "1",
    ]  # fmt: skip
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    load_after = os.getloadavg()
    simulated = [ln for ln in proc.stderr.splitlines() if ln.startswith("[serve] ")]
    compiled = [ln for ln in proc.stderr.splitlines() if "[compile" in ln and "cached" not in ln]
    print(f"command: {' '.join(cmd[1:])}")
    print(f"exit code {proc.returncode}; wall time {wall:.1f} s (target: <= 120 s warm)")
    print(f"options simulated: {len(simulated)}; compile lines not from the cache: {len(compiled)}")
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} (1 min)")
    sys.stdout.write(proc.stdout)
    if proc.returncode not in (0, 1):
        sys.stderr.write(proc.stderr[-3000:])
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
