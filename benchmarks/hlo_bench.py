"""Compiled HLO → collective graph → replay: wall time on the largest step at hand (issue 3).

Measures, on one compiled Wan 2.1 step (TPU-compiled through libtpu AOT):

- parse: :func:`aoizora.hlo.text.parse_module` on the ``compiled.as_text()`` string;
- build: :func:`aoizora.hlo.graph.build_graph` on the parsed module;
- replay: :func:`aoizora.replay.replay` with the identity device order (the
  planner replays every compiled candidate on every placement, so this is the
  per-placement cost).

Each figure is the median of ``--repeat`` runs. Targets: parse + build <= 1 s,
replay well under 1 s.

The HLO comes from ``--hlo FILE`` or is compiled here with the planner's own
path (:func:`aoizora.compile.compile_candidate`, the "existing deployment"
baseline of ``--model`` at ``--resolution`` on ``--slice``; a cold compile of
Wan2.1-1.3B 480p on v5e:2x4 takes about a minute on a 2-core box). Pass
``--cache-dir`` to reuse compiles across runs.

Run: ``.venv/bin/python benchmarks/hlo_bench.py [--model wan2.1-14b --resolution 720p --slice v5e:4x4]``
"""  # noqa: E501

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Sequence

__all__ = ["compile_wan", "main"]


def compile_wan(model: str, resolution: str, slice_name: str, cache_dir: str | None) -> str:
    """TPU-compiled HLO text of the Wan step's "existing deployment" baseline."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    from aoizora.cache import plan_caches
    from aoizora.candidates.baselines import baseline_candidates
    from aoizora.compile import compile_candidate
    from aoizora.workloads.wan import parse_resolution, wan_workload
    from sim.topology import load_slice

    slice_ = load_slice(slice_name)
    workload = wan_workload(model, parse_resolution(resolution))
    baseline = baseline_candidates(workload, slice_)[0]
    result = compile_candidate(
        workload,
        baseline.candidate,
        slice_,
        order=baseline.device_order,
        cache=None if cache_dir is None else plan_caches(cache_dir).compiled,
    )
    if not result.ok:
        raise SystemExit(f"compile of {baseline.candidate.id} failed: {result.error}")
    return result.hlo_text


def _median_s(fn: object, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hlo", default=None, help="read compiled HLO text from this file")
    parser.add_argument("--model", default="wan2.1-1.3b")
    parser.add_argument("--resolution", default="480p")
    parser.add_argument("--slice", default="v5e:2x4")
    parser.add_argument("--cache-dir", default=None)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)

    from aoizora.hlo.graph import build_graph
    from aoizora.hlo.text import parse_module
    from aoizora.placement.device_order import DeviceOrder
    from aoizora.replay import replay
    from sim.topology import load_slice

    if args.hlo:
        with open(args.hlo, encoding="utf-8") as f:
            text = f.read()
        source = args.hlo
    else:
        t0 = time.perf_counter()
        text = compile_wan(args.model, args.resolution, args.slice, args.cache_dir)
        source = (
            f"{args.model} {args.resolution} on {args.slice} ({time.perf_counter() - t0:.1f} s)"
        )

    module = parse_module(text)
    graph = build_graph(module)
    slice_ = load_slice(args.slice)
    order = DeviceOrder.identity(mesh_shape=(slice_.num_chips,), slice_=slice_)
    parse_s = _median_s(lambda: parse_module(text), args.repeat)
    build_s = _median_s(lambda: build_graph(module), args.repeat)
    replay_s = _median_s(lambda: replay(graph, slice_, order), args.repeat)
    result = replay(graph, slice_, order)
    instructions = sum(len(c.instructions) for c in module.computations.values())
    flows = sum(len(r.flows) for r in {id(r): r for r in result.region_sims}.values())
    print(f"HLO: {source}")
    print(
        f"  {len(text) / 1e6:.2f} MB text, {len(module.computations)} computations, "
        f"{instructions} instructions, {len(graph.regions)} regions, "
        f"{len(graph.collectives)} logical collectives, {len(graph.opaques)} opaque kernels"
    )
    print(f"  parse  {parse_s * 1e3:8.1f} ms")
    print(f"  build  {build_s * 1e3:8.1f} ms")
    print(f"  parse+build {(parse_s + build_s) * 1e3:8.1f} ms (target <= 1000 ms)")
    print(f"  replay {replay_s * 1e3:8.1f} ms ({flows} simulated flows)")
    print(f"  simulated step time {result.step_time_s * 1e3:.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
