"""Simulator throughput: flow events per second, wall and CPU seconds (issues 2 and 13).

Cases, and how their flows arrive:
- **all-gather storms** over every row and every column of a 4x4 and a 16x16
  mesh (no wrap-around; ``bidir_ring`` in row/column order, 16 MB gathered per
  device), all released at t=0: flows arrive in **synchronised bursts** -- every
  ring step starts hundreds of flows at one instant, and their departures
  come in bursts too (each step waits for the previous one);
- **10,000 random flows** on an 8x8 mesh (seeded; sizes uniform in [64 kB,
  4 MB]; src != dst uniform): flows arrive **one at a time, spread over time**
  (Poisson arrivals, 2 us apart on average: about 127 drain at once, so
  nearly every arrival and departure is its own instant and its own max-min
  update); ``--burst`` adds the same flows all released at t=0;
- **a planner-style replay** as ``aoizora/replay.py`` builds for a compiled
  step: 50 x (a compute on every chip, then all-reduces over the rows, then
  over the columns of a 4x4 mesh, ``bidir_ring``): flows arrive in **small
  dependent bursts** (one ring step of 4 groups at a time) between computes.

A "flow event" is one arrival of a flow on the network (its bytes start to
drain) or one departure (its last byte lands): two per flow. Each is a point
where max-min rates change (changes at one instant are batched into one
update). Rates are printed per wall second and per CPU second of the process:
the machine is shared, so quote both with ``uptime``. Link numbers are v5e's
(4.5e10 B/s one-way, 1 us per hop).

Run: ``.venv/bin/python benchmarks/sim_bench.py``
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Sequence

from sim.collectives import collective_flows
from sim.engine import Compute, Flow, simulate
from sim.topology import Slice, make_slice

__all__ = ["main", "random_flows", "row_col_storm", "step_replay"]

LINK_BANDWIDTH_BYTES_PER_S = 4.5e10  # v5e one-way per link (topologies/v5e.toml)
HOP_LATENCY_S = 1e-6  # v5e per hop (topologies/v5e.toml)


def _v5e_mesh(side: int) -> Slice:
    """A ``side`` x ``side`` v5e sub-slice (no wrap-around): every case runs on one."""
    return make_slice(
        (side, side),
        wraparound=False,
        link_bandwidth_bytes_per_s=LINK_BANDWIDTH_BYTES_PER_S,
        hop_latency_s=HOP_LATENCY_S,
    )


def row_col_storm(side: int, *, buffer_bytes: float = 16e6) -> tuple[Slice, list[Flow | Compute]]:
    """Bidirectional-ring all-gathers over every row and every column at once."""
    s = _v5e_mesh(side)
    lines = [(f"row{y}", [(x, y) for x in range(side)]) for y in range(side)]
    lines += [(f"col{x}", [(x, y) for y in range(side)]) for x in range(side)]
    nodes: list[Flow | Compute] = []
    for id_prefix, line in lines:
        plan = collective_flows(
            "all-gather",
            [line],
            buffer_bytes=buffer_bytes,
            algorithm="bidir_ring",
            id_prefix=id_prefix,
        )
        nodes.extend(plan.nodes)
    return s, nodes


def random_flows(
    count: int, *, side: int = 8, mean_gap_s: float = 1e-6, seed: int = 0
) -> tuple[Slice, list[Flow | Compute]]:
    """``count`` random flows (src != dst) on a ``side`` x ``side`` mesh."""
    rng = random.Random(seed)
    s = _v5e_mesh(side)
    nodes: list[Flow | Compute] = []
    t = 0.0
    for k in range(count):
        src = s.coords[rng.randrange(s.num_chips)]
        dst = src
        while dst == src:
            dst = s.coords[rng.randrange(s.num_chips)]
        size = rng.uniform(64e3, 4e6)
        nodes.append(Flow(f"r{k}", src, dst, size, start_s=t))
        t += rng.expovariate(1.0 / mean_gap_s) if mean_gap_s > 0 else 0.0
    return s, nodes


def step_replay(
    layers: int, *, side: int = 4, buffer_bytes: float = 1e6, compute_s: float = 2e-5
) -> tuple[Slice, list[Flow | Compute]]:
    """``layers`` x (compute on every chip, row all-reduces, column all-reduces), chained."""
    s = _v5e_mesh(side)
    nodes: list[Flow | Compute] = []
    last: tuple[str, ...] = ()
    for layer in range(layers):
        computes = [Compute(f"L{layer}/mm{c}", c, compute_s, after=last) for c in s.coords]
        nodes.extend(computes)
        done: tuple[str, ...] = tuple(c.id for c in computes)
        for axis in (0, 1):
            groups = [
                [c for c in s.coords if c[1 - axis] == k] for k in range(side)
            ]  # rows (axis 0), then columns
            plan = collective_flows(
                "all-reduce",
                groups,
                buffer_bytes=buffer_bytes,
                algorithm="bidir_ring",  # group order, as in earlier runs
                id_prefix=f"L{layer}/ar{axis}",
                after=done,
            )
            nodes.extend(plan.nodes)
            done = (plan.done_id,)
        last = done
    return s, nodes


def _run(label: str, s: Slice, nodes: Sequence[Flow | Compute]) -> None:
    flows = sum(isinstance(n, Flow) for n in nodes)
    t0 = time.perf_counter()
    c0 = time.process_time()
    result = simulate(s, nodes)
    cpu = time.process_time() - c0
    wall = time.perf_counter() - t0
    events = 2 * sum(1 for f in result.flows if f.hops > 0 and f.size_bytes > 0)
    print(
        f"{label:<44} flows={flows:>6} flow_events={events:>6} wall_s={wall:7.3f} "
        f"flow_events_per_s={events / wall:>9.0f} cpu_s={cpu:7.3f} "
        f"flow_events_per_cpu_s={events / cpu:>9.0f} "
        f"simulated_makespan_us={result.makespan_s * 1e6:.1f}"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--random-count", type=int, default=10_000)
    parser.add_argument("--mean-gap-us", type=float, default=2.0)
    parser.add_argument("--burst", action="store_true", help="also run all random flows at t=0")
    args = parser.parse_args(argv)
    _run("all-gather storm 4x4 (rows+cols, bidir, 16MB)", *row_col_storm(4))
    _run("all-gather storm 16x16 (rows+cols, bidir, 16MB)", *row_col_storm(16))
    _run(
        f"{args.random_count} random flows 8x8 ({args.mean_gap_us:g}us mean gap)",
        *random_flows(args.random_count, mean_gap_s=args.mean_gap_us * 1e-6),
    )
    _run("step replay 4x4 (50 x compute+row AR+col AR)", *step_replay(50))
    if args.burst:
        _run(
            f"{args.random_count} random flows 8x8 (all at t=0)",
            *random_flows(args.random_count, mean_gap_s=0.0),
        )


if __name__ == "__main__":
    main()
