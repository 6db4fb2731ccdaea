"""The fluid max-min flow engine: a compiled event core, and a pure-Python twin.

Model (fixed; see docs/simulator.md):

- A node is released at ``max(start_s, finish of everything in after)``.
- A :class:`Flow` of ``h`` hops released at ``r`` first pays ``h * hop_latency_s``
  without using bandwidth (as SimGrid's latency model does), then *drains*: its
  bytes move at its max-min fair rate over the links of its route, and it
  finishes when the last byte is through. A 0-hop flow (``src == dst``)
  finishes at release; a zero-byte flow finishes when its latency is paid.
- Rates are max-min fair (progressive filling) over all draining flows and
  change whenever a flow starts or stops draining; all changes at one instant
  are batched into one update, which re-solves only the flows the change
  reaches (:mod:`sim.sharing`). The parallel cables of a wrapped length-2
  axis pool their bandwidth (:mod:`sim.cables`).
- A :class:`Compute` runs for ``duration_s`` from its release and uses no
  links. Computes on one chip may overlap: the caller orders them with
  ``after`` (a compiled schedule is already a total order per chip). A compute
  with ``chip=None`` and ``duration_s=0`` is a join/barrier node.

Two event cores run this model and agree bit for bit: the compiled core
(``sim/_flowcore.c``, built with the package; the default) handles every
release, drain, finish and max-min update in C on a heap agenda, and the
pure-Python reference (:mod:`sim.pycore`) steps a SimPy clock from instant to
instant over the same agenda with :class:`sim.sharing.LinkSharing`. The
instants come from the agenda of releases, drain starts and compute finishes
plus the next predicted flow finish. The run is deterministic: the same nodes
give the same floats, events and records, whichever core runs them. Bad
input raises :class:`~sim.errors.GraphError` or
:class:`~sim.errors.RoutingError` (:func:`sim.nodes.validate_graph`) before
anything runs, so a run never hangs.

Example: two equal flows share one link, then a compute waits for both.

>>> from sim.topology import make_slice
>>> s = make_slice([2], link_bandwidth_bytes_per_s=1e9, hop_latency_s=1e-6)
>>> r = simulate(s, [Flow("a", (0,), (1,), 1e6), Flow("b", (0,), (1,), 1e6),
...                  Compute("c", (1,), 1e-3, after=("a", "b"))])
>>> round(r.flow("a").finish_s, 9), round(r.finish_s("c"), 9)
(0.002001, 0.003001)
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Sequence
from types import ModuleType

from sim.errors import SimError
from sim.maxmin import max_min_rates
from sim.nodes import Compute, Flow, validate_graph
from sim.problem import Problem, build_problem
from sim.pycore import CoreOutput, run_python
from sim.records import Event, RateSnapshot, SimResult, build_result
from sim.sharing import _BATCH_PAIRS, _CLASS_LOAD
from sim.topology import Slice

__all__ = [
    "CORES",
    "Compute",
    "Flow",
    "compiled_core",
    "core_status",
    "max_min_rates",
    "note_core_fallback",
    "run_nodes",
    "simulate",
]

CORES = ("compiled", "python")
# The interface version of sim/_flowcore.c this module calls (its VERSION).
_CORE_VERSION = 3
_REBUILD = (
    "to build it, install a C compiler and the Python headers (e.g. `apt-get install gcc "
    "python3-dev`) and run `make core` in the repository (or `pip install -e .`); an "
    "installed package: `pip install --force-reinstall --no-deps --no-binary aoizora aoizora`"
)
# The fallback's one line goes to the "sim" logger: without logging set up,
# Python prints it alone on stderr. Once per process, and not again in the
# processes it starts afterwards (a planner's worker pool inherits _NOTED_ENV).
_log = logging.getLogger("sim")
_NOTED_ENV = "SIM_CORE_FALLBACK_NOTED"
_warned = False
# benchmarks/sim_bench.py --python-core: x1.6 to x17 CPU time (staggered: x8-9; burst: x17).
_SLOWER = "up to 17x"


def compiled_core() -> tuple[ModuleType | None, str]:
    """The compiled core module, or ``None`` and why it cannot be used."""
    try:
        import sim._flowcore as _flowcore
    except ImportError as exc:
        return None, f"sim._flowcore is not built ({exc}); {_REBUILD}"
    version = getattr(_flowcore, "VERSION", None)
    if version != _CORE_VERSION:
        return None, (
            f"sim._flowcore is stale (interface version {version}, this sim needs "
            f"{_CORE_VERSION}); {_REBUILD}"
        )
    return _flowcore, ""


def core_status() -> str:
    """One line: which event core :func:`simulate` runs by default, and why.

    >>> core_status().startswith("sim: ")
    True
    """
    module, why = compiled_core()
    if module is None:
        return (
            f"sim: the compiled event core is unavailable, so the pure-Python core runs "
            f"instead (same results, {_SLOWER} slower on large runs): {why}"
        )
    return f"sim: the compiled event core is built ({module.__file__})"


def note_core_fallback() -> None:
    """Log :func:`core_status` once if the pure-Python core will run by default.

    Call it before starting worker processes that simulate: they inherit
    ``SIM_CORE_FALLBACK_NOTED`` and stay quiet, so a run prints the line once.
    """
    global _warned
    if _warned or os.environ.get(_NOTED_ENV):
        _warned = True
        return
    module, _ = compiled_core()
    if module is None:
        _warned = True
        os.environ[_NOTED_ENV] = "1"
        _log.warning(core_status())


def _run_compiled(
    module: ModuleType, p: Problem, *, record_rates: bool, batch_pairs: int, class_load: int
) -> CoreOutput:
    release, drain, finish, events, busy, log = module.run(
        p.capacity_bytes_per_s,
        p.route_ptr,
        p.route_chan,
        p.size_bytes,
        p.duration_s,
        p.is_flow,
        p.ready_s,
        p.waiting,
        p.child_ptr,
        p.child_idx,
        p.ids,
        p.hop_latency_s,
        batch_pairs,
        class_load,
        record_rates,
        Event,
    )
    rate_log = None if log is None else [RateSnapshot(t, rates) for t, rates in log]
    return CoreOutput(release, drain, finish, events, busy, rate_log)


def run_core(
    problem: Problem,
    *,
    core: str | None = None,
    record_rates: bool = False,
    batch_pairs: int = _BATCH_PAIRS,
    class_load: int = _CLASS_LOAD,
) -> CoreOutput:
    """Replay ``problem`` on the chosen event core (see :func:`simulate`); the
    switches ``batch_pairs`` and ``class_load`` are :func:`sim.pycore.run_python`'s."""
    if core is not None and core not in CORES:
        raise SimError(
            f"core={core!r} is not an event core; choose one of {CORES} "
            "(or None: compiled when built, else python)"
        )
    if core != "python":
        module, why = compiled_core()
        if module is not None:
            return _run_compiled(
                module,
                problem,
                record_rates=record_rates,
                batch_pairs=batch_pairs,
                class_load=class_load,
            )
        if core == "compiled":
            raise SimError(why)
        note_core_fallback()
    return run_python(
        problem, record_rates=record_rates, batch_pairs=batch_pairs, class_load=class_load
    )


def run_nodes(
    slice_: Slice,
    nodes: Sequence[Flow | Compute],
    *,
    routing_order: Sequence[int] | None = None,
    record_rates: bool = False,
    core: str | None = None,
) -> tuple[Problem, CoreOutput]:
    """:func:`simulate`'s run without its records: the problem and the core's arrays.

    For callers that read a few arrays only (``python -m sim flows``: release
    and finish times), building a :class:`SimResult` is a tenth of the run.
    """
    graph = validate_graph(slice_, nodes)
    problem = build_problem(slice_, nodes, graph, routing_order)
    out = run_core(problem, core=core, record_rates=record_rates)
    unfinished = [problem.ids[i] for i, f in enumerate(out.finish_s) if math.isnan(f)]
    if unfinished:  # cannot happen for a validated DAG; never return silently
        raise RuntimeError(f"simulation ended with unfinished nodes {unfinished[:5]}")
    return problem, out


def simulate(
    slice_: Slice,
    nodes: Sequence[Flow | Compute],
    *,
    routing_order: Sequence[int] | None = None,
    record_rates: bool = False,
    core: str | None = None,
) -> SimResult:
    """Replay ``nodes`` (flows and computes, a DAG through ``after``) on ``slice_``.

    ``routing_order`` is the dimension order of :func:`sim.routing.route`
    (default x, y, z). ``record_rates=True`` also logs every max-min
    allocation (for tests and debugging; it costs time). ``core`` picks the
    event core: ``"compiled"`` (``sim/_flowcore.c``; an error if it is not
    built), ``"python"`` (the pure-Python reference, :mod:`sim.pycore`) or
    ``None`` (compiled when built, else python with a warning); both give
    identical results.

    >>> from sim.topology import load_slice
    >>> s = load_slice("v5e:2x4")
    >>> r = simulate(s, [Flow("f", (0, 0), (1, 3), 4.5e6)])
    >>> r.flow("f").hops, round(r.makespan_s * 1e6, 6)  # 4 us latency + 100 us drain
    (4, 104.0)
    """
    problem, out = run_nodes(
        slice_, nodes, routing_order=routing_order, record_rates=record_rates, core=core
    )
    return build_result(
        slice_,
        nodes,
        link_routes=problem.link_routes,
        times=(out.release_s, out.drain_s, out.finish_s),
        channel_busy_s=out.busy_s,
        events=out.events,
        rate_log=out.rate_log or (),
    )
