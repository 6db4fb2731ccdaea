"""Where the placement spread of the demo's winning sharding comes from (issue 13, item 2).

Plans Wan2.1-1.3B, 480p, 81 frames on v5e:2x4 (``make demo``; the compile cache
makes a repeated run cheap), takes the winning sharding's compiled step and
replays it on every placement the planner scored, under two collective models:

- ``group order``: every all-gather / reduce-scatter / all-reduce runs a
  bidirectional ring in the order the HLO's replica group lists (the model
  before issue 13);
- ``auto``: each group runs what its physical layout calls for
  (:mod:`sim.layout`: the physical ring, a folded ring on a line, a
  Hamiltonian cycle round a block).

For the best and the worst placement of each model it prints the step time and
the collectives whose exposed time (the time the compute timeline waits for
them, times their count) differs most, with each one's groups as laid out on
the slice: that is where the spread comes from.

Run: ``.venv/bin/python benchmarks/placement_spread.py [--cache-dir DIR]``
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from aoizora.commands.args import DEFAULT_CACHE_DIR
from aoizora.hlo.graph import graph_from_text
from aoizora.planner import run_plan
from aoizora.replay import ReplayResult, replay, sim_kind
from aoizora.workloads.wan import parse_resolution, wan_workload
from sim.collectives import collective_flows
from sim.routing import hop_count
from sim.topology import Slice, load_slice

__all__ = ["main"]

_RING = "bidir_ring"
MODELS: tuple[tuple[str, dict[str, str] | None], ...] = (
    ("group order", {"all-gather": _RING, "reduce-scatter": _RING, "all-reduce": _RING}),
    ("auto", None),
)


def _layout(graph: object, cid: int, order: object, s: Slice) -> str:
    """How collective ``cid``'s first group lies on the slice, and what runs over it."""
    c = graph.collectives[cid]  # type: ignore[attr-defined]
    if c.pairs or not c.groups:
        return f"{len(c.pairs)} point-to-point pairs"
    group = [order.coord_of(d) for d in c.groups[0]]  # type: ignore[attr-defined]
    plan = collective_flows(
        sim_kind(c), [group], buffer_bytes=1.0, id_prefix="x", slice_=s, overhead_s=0.0
    )
    walk = plan.groups[0].members
    hops = [hop_count(s, a, b) for a, b in zip(walk, walk[1:] + walk[:1], strict=True)]
    return (
        f"{len(c.groups)} groups like {group} (HLO order); auto walks {list(walk)}, "
        f"ring hops {hops}; group-order ring hops "
        f"{[hop_count(s, a, b) for a, b in zip(group, group[1:] + group[:1], strict=True)]}"
    )


def _report(
    label: str, runs: dict[str, ReplayResult], graph: object, orders: dict, s: Slice
) -> None:
    best = min(runs, key=lambda k: runs[k].step_time_s)
    worst = max(runs, key=lambda k: runs[k].step_time_s)
    b, w = runs[best], runs[worst]
    print(
        f"\n[{label}] {len(runs)} placements: best {b.step_time_s * 1e3:.2f} ms ({best}), "
        f"worst {w.step_time_s * 1e3:.2f} ms ({worst}), spread "
        f"{w.step_time_s / b.step_time_s:.3f}x (+{(w.step_time_s - b.step_time_s) * 1e3:.2f} ms)"
    )
    deltas = sorted(
        zip(b.collectives, w.collectives, strict=True),
        key=lambda t: -(t[1].total_exposed_s - t[0].total_exposed_s),
    )
    for cb, cw in deltas[:4]:
        delta = (cw.total_exposed_s - cb.total_exposed_s) * 1e3
        if abs(delta) < 1e-3:
            break
        print(
            f"  collective {cw.collective} {cw.kind} x{cw.count}, {cw.buffer_bytes / 1e6:.2f} MB: "
            f"exposed {cb.total_exposed_s * 1e3:.2f} -> {cw.total_exposed_s * 1e3:.2f} ms "
            f"(+{delta:.2f}); one run {cb.duration_s * 1e6:.1f} -> {cw.duration_s * 1e6:.1f} us"
        )
        print(f"    best:  {_layout(graph, cw.collective, orders[best], s)}")
        print(f"    worst: {_layout(graph, cw.collective, orders[worst], s)}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cache-dir", default=os.environ.get("AOIZORA_CACHE_DIR", DEFAULT_CACHE_DIR)
    )
    args = parser.parse_args(argv)
    s = load_slice("v5e:2x4")
    workload = wan_workload("wan2.1-1.3b", parse_resolution("480p", frames=81))
    outcome = run_plan(workload, s, cache_dir=args.cache_dir)
    winner = outcome.winner
    graph = graph_from_text(winner.compile.hlo_text)
    orders = {p.placement_id: p.order for p in winner.placements}
    print(f"winner sharding {winner.candidate.id} on {s.name}; planner Q2 per placement:")
    for p in winner.placements:
        print(f"  {p.placement_id:<40} {p.q2_s * 1e3:8.2f} ms")
    for label, algorithm in MODELS:
        runs = {pid: replay(graph, s, order, algorithm=algorithm) for pid, order in orders.items()}
        _report(label, runs, graph, orders, s)


if __name__ == "__main__":
    main()
