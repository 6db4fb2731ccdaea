"""Stage 1's cost: seconds to score every legal candidate, split by phase.

Runs Stage 1 cold (no cache) over every legal candidate of one workload and
slice and prints the wall and CPU seconds of each phase summed over candidates:
tracing the step (jax), lowering it to StableHLO (jax, Pallas kernels included),
Shardy's passes, reading the module, and the DAG + Q1. The machine's load
average is printed beside the figures (a shared 2-core machine inflates wall
times; CPU seconds are the steadier number).

    python benchmarks/stage1_speed.py --model wan2.1-14b --slice v5e:4x4 --resolution 720p
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

from aoizora.candidates.space import enumerate_candidates
from aoizora.compile import _jitted, make_mesh
from aoizora.stage1.q1 import estimate_module
from aoizora.stage1.shardy import PIPELINE, read_mlir_module
from aoizora.tpu import slice_backend, topology_devices
from aoizora.workloads.wan import parse_resolution, wan_workload
from sim.topology import load_slice

__all__ = ["main"]

PHASES = ("trace", "lower", "passes", "read", "dag+q1")


def _timed(totals: dict[str, list[float]], phase: str, fn: Callable[[], Any]) -> Any:
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    totals[phase][0] += time.perf_counter() - w
    totals[phase][1] += time.process_time() - c
    return out


def main(argv: list[str] | None = None) -> int:
    from jaxlib.mlir import passmanager

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="wan2.1-14b")
    parser.add_argument("--slice", default="v5e:4x4")
    parser.add_argument("--resolution", default="720p")
    parser.add_argument("--frames", type=int, default=81)
    args = parser.parse_args(argv)

    workload = wan_workload(args.model, parse_resolution(args.resolution, frames=args.frames))
    slice_ = load_slice(args.slice)
    devices = topology_devices(slice_)
    legal = enumerate_candidates(workload, slice_.num_chips).legal
    totals = {p: [0.0, 0.0] for p in PHASES}
    load0 = os.getloadavg()[0]
    for cand in legal:
        mesh = make_mesh(cand, devices, None)
        jitted = _jitted(workload, cand, mesh, slice_backend(slice_))
        traced = _timed(totals, "trace", lambda j=jitted: j.trace(*workload.abstract_args))
        lowered = _timed(totals, "lower", traced.lower)
        module = lowered.compiler_ir("stablehlo")
        with module.context:
            copy = module.operation.clone()
            _timed(
                totals,
                "passes",
                lambda c=copy: passmanager.PassManager.parse(PIPELINE).run(c.operation),
            )
            read = _timed(totals, "read", lambda c=copy: read_mlir_module(c))
        _timed(
            totals,
            "dag+q1",
            lambda m=read, c=cand: estimate_module(
                m, mesh_axis_sizes=c.mesh_sizes, chip=slice_.chip, candidate_id=c.id,
                slice_=slice_,
            ),
        )  # fmt: skip
    wall = sum(w for w, _ in totals.values())
    cpu = sum(c for _, c in totals.values())
    print(
        f"{workload.name} on {slice_.name}: {len(legal)} candidates, Stage 1 cold, serial "
        f"(load average {load0:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)"
    )
    for phase, (w, c) in totals.items():
        print(f"  {phase:8s} {w:7.1f} s wall  {c:7.1f} s CPU  ({c / len(legal):.3f} s CPU each)")
    print(f"  total    {wall:7.1f} s wall  {cpu:7.1f} s CPU  ({cpu / len(legal):.3f} s CPU each)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
