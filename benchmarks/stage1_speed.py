"""Stage 1's cost: the plain path against the fast path, measured in one run.

Runs Stage 1 cold (no cache) over every legal candidate of one workload and
slice twice, each in a fresh Python process so neither inherits the other's jax
caches:

* **plain** -- every candidate lowered and scored one after another in one
  process, MLIR's verifier after every Shardy pass (Stage 1 before issue 11);
* **fast** -- :func:`aoizora.stage1.sweep.score_candidates` as the planner runs it:
  candidates whose arguments alone exceed HBM are not lowered, Pallas kernels
  lower without their bodies (:func:`aoizora.compile.lower_to_read`), Shardy's
  passes run without the verifier, the rest fan out over ``--workers`` processes.

It prints wall and CPU seconds of each (CPU includes the worker processes) and
their ratios, and checks that the fast path's estimates equal the plain path's
(Q1 bit for bit, memory, DAG size) and that every candidate it skipped is over
HBM in the plain path too. The machine's load average is printed beside the
figures (a shared 2-core machine inflates wall times; CPU seconds are the
steadier number).

    python benchmarks/stage1_speed.py --model wan2.1-14b --slice v5e:4x4 --resolution 720p

``--fast-only`` times the fast path alone (the plain path takes tens of minutes
on 256 chips); ``--slice`` takes what-if specs too (``v6e:16x16+wrap``).
``--phases`` instead splits the fast path's per-candidate time by phase (trace,
lower, Shardy's passes, reading the module, DAG + Q1), serially in this process.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aoizora.candidates.space import Candidate, enumerate_candidates
from aoizora.compile import _jitted, lower, lower_to_read, make_mesh
from aoizora.fanout import fan_out
from aoizora.stage1.q1 import estimate_module
from aoizora.stage1.shardy import PIPELINE, read_lowered, read_mlir_module
from aoizora.stage1.sweep import score_candidates
from aoizora.tpu import slice_backend, topology_devices
from aoizora.workloads.base import Workload
from aoizora.workloads.wan import parse_resolution, wan_workload
from sim.topology import Slice, parse_slice_spec

__all__ = ["main"]

PHASES = ("trace", "lower", "passes", "read", "dag+q1")


def _timed(totals: dict[str, list[float]], phase: str, fn: Callable[[], Any]) -> Any:
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    totals[phase][0] += time.perf_counter() - w
    totals[phase][1] += time.process_time() - c
    return out


def _phases(workload: Workload, slice_: Slice, legal: list[Candidate]) -> None:
    from jaxlib.mlir import passmanager

    devices = topology_devices(slice_)
    totals = {p: [0.0, 0.0] for p in PHASES}
    load0 = os.getloadavg()[0]
    for cand in legal:
        mesh = make_mesh(cand, devices, None)
        backend = slice_backend(slice_)
        jitted = _jitted(workload, cand, mesh, backend, kernel_bodies=False)
        traced = _timed(totals, "trace", lambda j=jitted: j.trace(*workload.abstract_args))
        lowered = _timed(totals, "lower", traced.lower)
        module = lowered.compiler_ir("stablehlo")
        with module.context:
            copy = module.operation.clone()
            pm = passmanager.PassManager.parse(PIPELINE)
            pm.enable_verifier(False)
            _timed(totals, "passes", lambda c=copy, p=pm: p.run(c.operation))
            read = _timed(totals, "read", lambda c=copy: read_mlir_module(c))
        _timed(
            totals,
            "dag+q1",
            lambda m=read, c=cand: estimate_module(
                m, mesh_axis_sizes=c.mesh_sizes, chip=slice_.chip.per_device(),
                candidate_id=c.id, slice_=slice_,
            ),
        )  # fmt: skip
    wall = sum(w for w, _ in totals.values())
    cpu = sum(c for _, c in totals.values())
    print(
        f"{workload.name} on {slice_.name}: {len(legal)} candidates, fast path's lowering "
        f"by phase, serial (load average {load0:.1f} -> {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} cores)"
    )
    for phase, (w, c) in totals.items():
        print(f"  {phase:8s} {w:7.1f} s wall  {c:7.1f} s CPU  ({c / len(legal):.3f} s CPU each)")
    print(f"  total    {wall:7.1f} s wall  {cpu:7.1f} s CPU  ({cpu / len(legal):.3f} s CPU each)")


def _run_path(
    path: str, workload: Workload, slice_: Slice, legal: list[Candidate], workers: int
) -> dict[str, Any]:
    """One path in this process: {candidate id: [q1_s, memory, nodes]}, the skipped ids
    and the path's wall seconds in this process (for the fast path, what a plan reports
    as ``timings_s.stage1``: the workers' start included, Python's and the imports not)."""
    rows: dict[str, list[Any]] = {}
    skipped: list[str] = []
    t0 = time.perf_counter()
    if path == "plain":
        for c in legal:
            e = estimate_module(
                read_lowered(lower(workload, c, slice_), verify=True),
                mesh_axis_sizes=c.mesh_sizes, chip=slice_.chip.per_device(),
                candidate_id=c.id, slice_=slice_,
            )  # fmt: skip
            rows[c.id] = [e.q1_s, e.memory_bytes_per_chip, len(e.nodes)]
    else:
        with fan_out(workers=workers) as pool:
            sweep = score_candidates(workload, legal, slice_, lower=lower_to_read, pool=pool)
        rows = {e.candidate_id: [e.q1_s, e.memory_bytes_per_chip, len(e.nodes)]
                for e in sweep.estimates}  # fmt: skip
        skipped = [c for c, _ in sweep.over_hbm]
    return {"rows": rows, "skipped": skipped, "seconds": time.perf_counter() - t0}


def _spawn(path: str, args: argparse.Namespace) -> tuple[dict[str, Any], float, float]:
    """Run one path in a fresh process: its result, wall seconds, CPU seconds (with workers)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        cmd = [sys.executable, __file__, "--model", args.model, "--slice", args.slice,
               "--resolution", args.resolution, "--frames", str(args.frames),
               "--workers", str(args.workers), "--path", path, "--out", str(out)]  # fmt: skip
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        w = time.perf_counter()
        subprocess.run(cmd, check=True)
        wall = time.perf_counter() - w
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return json.loads(out.read_text()), wall, cpu


def _fast_only(args: argparse.Namespace, workload: Workload, slice_: Slice, n: int) -> int:
    load0 = os.getloadavg()[0]
    fast, wall, cpu = _spawn("fast", args)
    print(
        f"{workload.name} on {slice_.name}: {n} candidates, Stage 1 cold, fast path only "
        f"(load average {load0:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)"
    )
    print(
        f"  fast    {wall:7.1f} s wall  {cpu:7.1f} s CPU  ({args.workers} workers, "
        f"{len(fast['skipped'])} proven over HBM, not lowered, {len(fast['rows'])} scored)"
    )
    print(f"  of which Stage 1 itself {fast['seconds']:7.1f} s wall (a plan's timings_s.stage1)")
    return 0


def _compare(args: argparse.Namespace, workload: Workload, slice_: Slice, n: int) -> int:
    if args.fast_only:
        return _fast_only(args, workload, slice_, n)
    load0 = os.getloadavg()[0]
    fast, fast_wall, fast_cpu = _spawn("fast", args)
    plain, plain_wall, plain_cpu = _spawn("plain", args)
    load1 = os.getloadavg()[0]
    hbm = slice_.chip.per_device().hbm_bytes
    same = all(plain["rows"][c] == r for c, r in fast["rows"].items())
    sound = all(plain["rows"][c][1] > hbm for c in fast["skipped"])
    covered = set(fast["rows"]) | set(fast["skipped"]) == set(plain["rows"])
    print(
        f"{workload.name} on {slice_.name}: {n} candidates, Stage 1 cold "
        f"(load average {load0:.1f} -> {load1:.1f} on {os.cpu_count()} cores)"
    )
    print(f"  plain   {plain_wall:7.1f} s wall  {plain_cpu:7.1f} s CPU  (serial, all lowered)")
    print(
        f"  fast    {fast_wall:7.1f} s wall  {fast_cpu:7.1f} s CPU  ({args.workers} workers, "
        f"{len(fast['skipped'])} proven over HBM, not lowered)"
    )
    print(f"  ratio   {plain_wall / fast_wall:7.2f}x wall  {plain_cpu / fast_cpu:7.2f}x CPU")
    print(f"  estimates identical (Q1, memory, DAG size): {same}; skips all over HBM: {sound}")
    return 0 if same and sound and covered else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="wan2.1-14b")
    parser.add_argument("--slice", default="v5e:4x4")
    parser.add_argument("--resolution", default="720p")
    parser.add_argument("--frames", type=int, default=81)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--phases", action="store_true", help="split the plain path by phase")
    parser.add_argument(
        "--fast-only", action="store_true", help="time the fast path alone (big slices)"
    )
    parser.add_argument("--path", choices=("plain", "fast"), help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    workload = wan_workload(args.model, parse_resolution(args.resolution, frames=args.frames))
    slice_ = parse_slice_spec(args.slice)  # NAME or NAME+wrap, as aoizora whatif takes
    legal = list(enumerate_candidates(workload, slice_.num_devices).legal)
    if args.phases:
        _phases(workload, slice_, legal)
        return 0
    if args.path is not None:
        result = _run_path(args.path, workload, slice_, legal, args.workers)
        Path(args.out).write_text(json.dumps(result))
        return 0
    return _compare(args, workload, slice_, len(legal))


if __name__ == "__main__":
    raise SystemExit(main())
