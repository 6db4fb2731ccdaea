"""A naive full-recompute replay of a whole DAG (flows, computes, ``after``).

Independent of :mod:`sim.engine`'s event handling, of its incremental
max-min updates and of :mod:`sim.routing`: a hand-written time loop without
SimPy that routes with :func:`tests.sim.oracle.oracle_path` and recomputes
every draining flow's rate with :func:`tests.sim.oracle.reference_max_min`
(textbook progressive filling) at every instant anything changes. Slow and
obvious.
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.engine import Compute, Flow
from sim.topology import Slice
from tests.sim.oracle import oracle_problem, reference_max_min

__all__ = ["reference_replay"]


def reference_replay(
    slice_: Slice, nodes: Sequence[Flow | Compute]
) -> dict[str, tuple[float, float]]:
    """``{id: (release_s, finish_s)}`` for every node."""
    by_id = {n.id: n for n in nodes}
    paths, capacity = oracle_problem(slice_, [n for n in nodes if isinstance(n, Flow)])
    deps_left = {n.id: set(n.after) for n in nodes}
    children: dict[str, list[str]] = {n.id: [] for n in nodes}
    for n in nodes:
        for dep in set(n.after):
            children[dep].append(n.id)
    ready = {n.id: float(n.start_s) for n in nodes}
    release: dict[str, float] = {}
    finish: dict[str, float] = {}
    to_release = [n.id for n in nodes if not n.after]
    timers: list[tuple[float, str, str]] = []  # (time, id, "drain" | "finish")
    active: dict[str, float] = {}  # draining flow -> remaining bytes
    now = 0.0

    def done(i: str) -> None:
        finish[i] = now
        for c in children[i]:
            deps_left[c].discard(i)
            ready[c] = max(ready[c], now)
            if not deps_left[c]:
                to_release.append(c)

    while to_release or timers or active:
        progress = True
        while progress:  # everything that happens at `now`, cascades included
            progress = False
            for i in [i for i in to_release if ready[i] <= now]:
                to_release.remove(i)
                release[i] = now
                progress = True
                node = by_id[i]
                if isinstance(node, Compute):
                    timers.append((now + node.duration_s, i, "finish"))
                elif not paths[i]:
                    done(i)
                else:
                    timers.append((now + len(paths[i]) * slice_.hop_latency_s, i, "drain"))
            for timer in [t for t in timers if t[0] <= now]:
                timers.remove(timer)
                progress = True
                _, i, what = timer
                node = by_id[i]
                if what == "finish" or (isinstance(node, Flow) and node.size_bytes == 0):
                    done(i)
                else:
                    active[i] = float(by_id[i].size_bytes)  # type: ignore[union-attr]
        if not (to_release or timers or active):
            break
        order = sorted(active)
        rates = reference_max_min([paths[i] for i in order], capacity)
        rate = dict(zip(order, rates, strict=True))
        candidates = [ready[i] for i in to_release] + [t for t, _, _ in timers]
        candidates += [now + active[i] / rate[i] for i in order]
        t_next = min(candidates)
        for i in order:
            active[i] -= rate[i] * (t_next - now)
        now = t_next
        for i in order:
            size = by_id[i].size_bytes  # type: ignore[union-attr]
            if active[i] <= 1e-12 * size or now + active[i] / rate[i] <= now * (1 + 1e-12):
                del active[i]
                done(i)
    return {i: (release[i], finish[i]) for i in by_id}
