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
  update) -- the "staggered" case;
- **10,000 dense random flows** on an 8x8 mesh (seeded; sizes uniform in
  [64 kB, 16 MB]; starts uniform over 2 ms; src != dst uniform): flows
  arrive **one at a time, thousands in flight** -- arrivals come far faster
  than the network drains them (the 2 ms of arrivals carry about 80 GB over
  5.3 hops on average, some 42 ms of the whole mesh's bandwidth), so up to
  9,671 drain at once and every arrival and departure re-shares a crowded
  network -- the "dense" case of issue 28;
- **a planner-style replay** as ``aoizora/replay.py`` builds for a compiled
  step: 50 x (a compute on every chip, then all-reduces over the rows, then
  over the columns of a 4x4 mesh, ``bidir_ring``): flows arrive in **small
  dependent bursts** (one ring step of 4 groups at a time) between computes;
- ``--burst``: random flows (``--burst-count``, default 2,000) all released at
  t=0: one **burst of thousands**, then departures one at a time while
  thousands still drain (every departure re-shares a crowded network);
- ``--cli``: the staggered and the dense flows as JSON flow files through
  ``python -m sim flows`` (a fresh process: interpreter start, imports,
  parsing, the engine, the output), each beside a 10-flow file of the same
  kind (its first 10 flows): the wall and CPU seconds *beyond start-up* are
  the big run's minus the 10-flow run's, and the flow events per second
  printed for it are the big file's flow events over those seconds (issue
  28's figure). ``python -m sim --help`` (start and imports alone) is
  printed beside them.

``--only TEXT`` runs only the cases whose label contains ``TEXT`` (and,
with ``--cli``, only the flow files whose label does): e.g. the issue's
figure alone is ``--only dense --cli --baseline none --repeat 3``.

A "flow event" is one arrival of a flow on the network (its bytes start to
drain) or one departure (its last byte lands): two per flow. Each is a point
where max-min rates change (changes at one instant are batched into one
update). Each case runs ``--repeat`` times and reports its fastest run in CPU
seconds (with that run's wall seconds): the machine is shared, so quote both
with ``uptime``. Link numbers are v5e's (4.5e10 B/s one-way, 1 us per hop).

``--baseline REV`` (default ``fd019da``, the engine before the compiled core)
runs the same cases in a child process on ``sim/`` as of git revision REV and
prints the CPU-time ratio per case, and whether the two results are identical
(SHA-256 of ``SimResult.to_json_dict()``: every record, time and event);
``--baseline none`` skips it. A revision with a compiled core has it built
in its extracted tree first (``setup.py build_ext --inplace``), so the
comparison is core against core. ``--python-core`` also times the pure-Python
reference core (:mod:`sim.pycore`, what runs when the compiled core is not
built) in this process and prints the compiled core's CPU-time ratio to it.

Run: ``.venv/bin/python benchmarks/sim_bench.py [--burst] [--cli] [--python-core]``
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import resource
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sim.collectives import collective_flows
from sim.engine import Compute, Flow, simulate
from sim.topology import Slice, make_slice

__all__ = ["dense_flows", "main", "random_flows", "row_col_storm", "step_replay"]

LINK_BANDWIDTH_BYTES_PER_S = 4.5e10  # v5e one-way per link (topologies/v5e.toml)
HOP_LATENCY_S = 1e-6  # v5e per hop (topologies/v5e.toml)
ROOT = Path(__file__).resolve().parent.parent
Case = Callable[[], tuple[Slice, list[Flow | Compute]]]


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


def dense_flows(
    count: int,
    *,
    side: int = 8,
    max_bytes: float = 16e6,
    spread_s: float = 2e-3,
    seed: int = 0,
) -> tuple[Slice, list[Flow | Compute]]:
    """``count`` random flows (src != dst, sizes up to ``max_bytes``) starting
    uniformly over ``spread_s``: far more arrive than drain, thousands in flight."""
    rng = random.Random(seed)
    s = _v5e_mesh(side)
    nodes: list[Flow | Compute] = []
    for k in range(count):
        src = s.coords[rng.randrange(s.num_chips)]
        dst = src
        while dst == src:
            dst = s.coords[rng.randrange(s.num_chips)]
        size = rng.uniform(64e3, max_bytes)
        nodes.append(Flow(f"d{k}", src, dst, size, start_s=rng.uniform(0.0, spread_s)))
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


def _cases(
    random_count: int, mean_gap_us: float, burst_count: int | None, dense_count: int
) -> dict[str, tuple[Case, str]]:
    """Label -> (case builder, how its flows arrive), in the order they run.

    The worker (``--baseline``) rebuilds a case by its label.
    """
    cases: dict[str, tuple[Case, str]] = {
        "all-gather storm 4x4 (rows+cols, bidir, 16MB)": (
            lambda: row_col_storm(4),
            "synchronised bursts: every ring step starts its flows at one instant",
        ),
        "all-gather storm 16x16 (rows+cols, bidir, 16MB)": (
            lambda: row_col_storm(16),
            "synchronised bursts: every ring step starts its flows at one instant",
        ),
        f"{random_count} random flows 8x8 staggered ({mean_gap_us:g}us mean gap)": (
            lambda: random_flows(random_count, mean_gap_s=mean_gap_us * 1e-6),
            "one at a time, Poisson starts, about a hundred in flight",
        ),
        f"{dense_count} random flows 8x8 dense (<=16MB, starts over 2ms)": (
            lambda: dense_flows(dense_count),
            "one at a time, uniform starts over 2 ms, thousands in flight",
        ),
        "step replay 4x4 (50 x compute+row AR+col AR)": (
            lambda: step_replay(50),
            "small dependent bursts: one ring step of 4 groups at a time",
        ),
    }
    if burst_count:
        cases[f"{burst_count} random flows 8x8 burst (all at t=0)"] = (
            lambda: random_flows(burst_count, mean_gap_s=0.0),
            "one burst of thousands at t=0, then departures one at a time",
        )
    return cases


def measure(build: Case, repeat: int, *, core: str | None = None) -> dict[str, Any]:
    """Fastest of ``repeat`` runs (CPU seconds) of one case, and a digest of its result."""
    s, nodes = build()
    best: tuple[float, float] | None = None
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        result = simulate(s, nodes) if core is None else simulate(s, nodes, core=core)
        cpu, wall = time.process_time() - c0, time.perf_counter() - t0
        if best is None or cpu < best[0]:
            best = (cpu, wall)
    assert best is not None
    text = json.dumps(result.to_json_dict())
    flows = [f for f in result.flows if f.hops > 0 and f.size_bytes > 0]
    drains = sorted((f.drain_s, 1) for f in flows) + sorted((f.finish_s, -1) for f in flows)
    in_flight = peak = 0
    for _, step in sorted(drains, key=lambda e: (e[0], e[1])):  # finishes first at a tie
        in_flight += step
        peak = max(peak, in_flight)
    return {
        "flows": sum(isinstance(n, Flow) for n in nodes),
        "events": 2 * sum(1 for f in result.flows if f.hops > 0 and f.size_bytes > 0),
        "cpu_s": best[0],
        "wall_s": best[1],
        "makespan_us": result.makespan_s * 1e6,
        "peak_in_flight": peak,
        "finish_s": [f.finish_s for f in result.flows],
        "digest": hashlib.sha256(text.encode()).hexdigest()[:16],
    }


def _baseline_tree(rev: str, into: Path) -> Path:
    """``sim/`` and ``topologies/`` as of git revision ``rev``, extracted under ``into``."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", rev, "sim", "topologies"],
        check=True,
        capture_output=True,
    ).stdout
    tar_path = into / "baseline.tar"
    tar_path.write_bytes(archive)
    with tarfile.open(tar_path) as tar:
        tar.extractall(into / "tree", filter="data")
    tree = into / "tree"
    sources = [str(p.relative_to(tree)) for p in sorted((tree / "sim").glob("_flow*.c"))]
    if sources:  # a revision with a compiled core: build it, so core runs against core
        build = (
            "import sys; from setuptools import Extension, setup; "
            "setup(name='baseline', script_args=['build_ext', '--inplace', '-q'], "
            f"ext_modules=[Extension('sim._flowcore', {sources!r}, "
            "extra_compile_args=['-ffp-contract=off'])])"
        )
        subprocess.run([sys.executable, "-c", build], cwd=tree, check=True, capture_output=True)
    return tree


def _child(tree: Path | None, args: list[str]) -> subprocess.CompletedProcess[str]:
    """This script (or ``-m sim``) in a child process, on the ``sim/`` of ``tree`` if given.

    The child runs in ``tree`` (``-m`` puts the working directory first on
    ``sys.path``) with ``tree`` on ``PYTHONPATH`` (a script's own directory
    comes first instead).
    """
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
        env["AOIZORA_TOPOLOGIES_DIR"] = str(tree / "topologies")
    return subprocess.run(
        [sys.executable, *args],
        env=env,
        cwd=tree or ROOT,
        check=True,
        capture_output=True,
        text=True,
    )


def _rel_diff(a: list[float], b: list[float]) -> float:
    """The largest relative difference between two runs' finish times."""
    return max((abs(x - y) / abs(x) for x, y in zip(a, b, strict=True) if x), default=0.0)


def _line(label: str, arrive: str, got: dict[str, Any], old: dict[str, Any] | None) -> str:
    ev = got["events"]
    text = (
        f"{label:<50} arrive: {arrive}; peak in flight {got['peak_in_flight']}\n{'':<50} "
        f"flows={got['flows']:>6} flow_events={ev:>6} "
        f"cpu_s={got['cpu_s']:7.3f} flow_events_per_cpu_s={ev / got['cpu_s']:>8.0f} "
        f"wall_s={got['wall_s']:7.3f} flow_events_per_s={ev / got['wall_s']:>8.0f} "
        f"simulated_makespan_us={got['makespan_us']:.1f}"
    )
    if old is not None:
        same = "identical" if old["digest"] == got["digest"] else "DIFFERENT"
        if same != "identical" and len(old["finish_s"]) == len(got["finish_s"]):
            same += f" (finish times within {_rel_diff(old['finish_s'], got['finish_s']):.1e})"
        text += (
            f"\n{'':<50} baseline ({old['core']}) cpu_s={old['cpu_s']:7.3f} "
            f"flow_events_per_cpu_s={old['events'] / old['cpu_s']:>8.0f} "
            f"wall_s={old['wall_s']:7.3f} flow_events_per_s={old['events'] / old['wall_s']:>8.0f} "
            f"speed-up x{old['cpu_s'] / got['cpu_s']:.1f} (CPU), results {same}"
        )
    return text


def _cli_cpu(tree: Path | None, args: list[str]) -> tuple[float, float]:
    """CPU and wall seconds of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    _child(tree, args)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def _flow_file(nodes: Sequence[Flow | Compute], s: Slice, path: Path) -> int:
    """Write ``nodes`` (flows only) as a JSON flow file; return its flow events."""
    flows = [n for n in nodes if isinstance(n, Flow)]
    doc = {
        "topology": {
            "shape": list(s.shape),
            "wraparound": False,
            "link_bandwidth": LINK_BANDWIDTH_BYTES_PER_S,
            "hop_latency": HOP_LATENCY_S,
        },
        "flows": [
            {
                "id": n.id,
                "src": list(n.src),
                "dst": list(n.dst),
                "bytes": n.size_bytes,
                "start": n.start_s,
            }
            for n in flows
        ],
    }
    path.write_text(json.dumps(doc))
    # An arrival and a departure for every flow that crosses a link with bytes.
    return 2 * sum(1 for n in flows if n.src != n.dst and n.size_bytes > 0)


def _cli_runs(where: Path | None, path: Path, out: Path, repeat: int) -> tuple[float, float]:
    """Fastest wall seconds of ``python -m sim flows`` on ``path``, with its CPU seconds."""
    runs = [
        _cli_cpu(where, ["-m", "sim", "flows", str(path), "--out", str(out)]) for _ in range(repeat)
    ]
    cpu, wall = min(runs, key=lambda r: r[1])
    return wall, cpu


def _cli_case(
    files: dict[str, tuple[Slice, list[Flow | Compute]]],
    tree: Path | None,
    work: Path,
    repeat: int,
) -> str:
    """``python -m sim flows`` on each flow file, beyond start-up (a 10-flow file's run)."""
    lines = []
    for name, where in [("now", None), ("baseline", tree)] if tree else [("now", None)]:
        help_cpu, help_wall = min(_cli_cpu(where, ["-m", "sim", "--help"]) for _ in range(3))
        lines.append(
            f"python -m sim --help ({name}): wall_s={help_wall:.3f} cpu_s={help_cpu:.3f} "
            "(interpreter start and imports)"
        )
        for kind, (s, nodes) in files.items():
            big, small = work / f"{kind}.json", work / f"{kind}-10.json"
            events = _flow_file(nodes, s, big)
            _flow_file(nodes[:10], s, small)
            wall, cpu = _cli_runs(where, big, work / "out.json", repeat)
            wall10, cpu10 = _cli_runs(where, small, work / "out.json", repeat)
            extra_wall, extra_cpu = wall - wall10, cpu - cpu10
            lines.append(
                f"python -m sim flows ({len(nodes)} {kind} flows, {name}): wall_s={wall:.3f} "
                f"cpu_s={cpu:.3f}; 10 flows: wall_s={wall10:.3f} cpu_s={cpu10:.3f}; beyond "
                f"start-up: wall_s={extra_wall:.3f} cpu_s={extra_cpu:.3f} -> "
                f"{events} flow events at {events / extra_wall:,.0f} per s (wall), "
                f"{events / extra_cpu:,.0f} per CPU s"
            )
    return "\n".join(lines)


def _worker(args: argparse.Namespace) -> None:
    cases = _all_cases(args)
    import sim

    got = measure(cases[args.worker][0], args.repeat)
    # Which core ran, with its path: a revision without core_status has no
    # compiled core (importing sim._flowcore there could find this checkout's
    # editable build, which that engine never calls).
    try:
        from sim.engine import core_status  # type: ignore[attr-defined,unused-ignore]

        core = core_status().removeprefix("sim: ")
    except ImportError:
        core = "no compiled core: the Python engine"
    print(json.dumps({**got, "sim": str(Path(sim.__file__).parent), "core": core}))


def _all_cases(args: argparse.Namespace) -> dict[str, tuple[Case, str]]:
    burst = args.burst_count if args.burst else None
    cases = _cases(args.random_count, args.mean_gap_us, burst, args.dense_count)
    return {k: v for k, v in cases.items() if args.only is None or args.only in k}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--random-count", type=int, default=10_000)
    parser.add_argument("--mean-gap-us", type=float, default=2.0)
    parser.add_argument("--burst", action="store_true", help="also run random flows at t=0")
    parser.add_argument("--burst-count", type=int, default=2_000)
    parser.add_argument("--dense-count", type=int, default=10_000)
    parser.add_argument("--only", help="run only the cases whose label contains this text")
    parser.add_argument("--cli", action="store_true", help="also time `python -m sim flows`")
    parser.add_argument("--repeat", type=int, default=3, help="runs per case (fastest counts)")
    parser.add_argument("--baseline", default="fd019da", help="git revision, or 'none'")
    parser.add_argument(
        "--python-core",
        action="store_true",
        help="also time the pure-Python reference core (sim.pycore) on each case",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args)
        return
    cases = _all_cases(args)
    with tempfile.TemporaryDirectory(prefix="sim_bench_") as tmp:
        tree = None if args.baseline == "none" else _baseline_tree(args.baseline, Path(tmp))
        for label, (build, arrive) in cases.items():
            got = measure(build, args.repeat)
            old = None
            if tree is not None:
                flags = ["--repeat", str(args.repeat), "--random-count", str(args.random_count)]
                flags += ["--mean-gap-us", str(args.mean_gap_us)]
                flags += ["--dense-count", str(args.dense_count)]
                flags += ["--burst", "--burst-count", str(args.burst_count)] if args.burst else []
                out = _child(tree, [__file__, "--worker", label, *flags]).stdout
                old = json.loads(out.strip().splitlines()[-1])
                if not old["sim"].startswith(str(tree)):
                    raise SystemExit(f"baseline child imported sim from {old['sim']}, not {tree}")
            print(_line(label, arrive, got, old), flush=True)
            if args.python_core:
                py = measure(build, args.repeat, core="python")
                same = "identical" if py["digest"] == got["digest"] else "DIFFERENT"
                print(
                    f"{'':<50} python core cpu_s={py['cpu_s']:7.3f} "
                    f"flow_events_per_cpu_s={py['events'] / py['cpu_s']:>8.0f} "
                    f"compiled x{py['cpu_s'] / got['cpu_s']:.1f} faster (CPU), results {same}",
                    flush=True,
                )
        if args.cli:
            files = {
                "staggered": random_flows(args.random_count, mean_gap_s=args.mean_gap_us * 1e-6),
                "dense": dense_flows(args.dense_count),
            }
            if args.only is not None:
                files = {k: v for k, v in files.items() if args.only in k}
            print(_cli_case(files, tree, Path(tmp), args.repeat), flush=True)


if __name__ == "__main__":
    main()
