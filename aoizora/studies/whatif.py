"""What-if studies: one workload planned on several (possibly hypothetical) slices.

For every slice spec the full two-stage planner runs (:func:`aoizora.planner.run_plan`):
libtpu's AOT topologies describe hypothetical shapes too (``v5e:6x6``, ``v5e:8x16``,
``v6e:4x4``, ``v5p:2x2x4``), so each slice gets a real TPU compile. A spec may
override wrap-around, e.g. ``v5e:4x4+wrap`` (every dimension wrapped) or
``v5e:4x4+wrap=10`` (one flag per dimension): the program is compiled for the
slice's shape and replayed on the network with those wrap links, which is exactly
the question "what would wrap-around links buy us".

Each row reports the best simulated step latency, the speedups over the baselines,
and the peak and mean link utilisation of the winner's simulated step: each link's
busy time over the whole step (every region's run times its run count:
:func:`aoizora.replay.step_link_totals`) divided by the step time, from the
simulator's link records; kept in the ``links/`` cache, since a full replay of a
256-chip step takes seconds. With ``clip`` options (``whatif --clip``) each slice's VAE
decoder is planned too and the row carries the whole clip's latency (``clip_s``,
``text_encoder_s``, ``denoise_s``, ``vae_decode_s``: :mod:`aoizora.request.clip_plan`).

    >>> from sim.topology import parse_slice_spec
    >>> parse_slice_spec("v5e:4x4+wrap=10").spec
    'v5e:4x4+wrap=10'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from aoizora.cache import JsonCache, links_key, plan_caches
from aoizora.errors import AoizoraError, DoesNotFit, ResourceError
from aoizora.hlo.graph import graph_from_text
from aoizora.hlo.nodes import CollectiveGraph
from aoizora.plan.clip_latency import ClipLatency
from aoizora.plan.fields import compute_model_json
from aoizora.plan.memory import PlanMemory
from aoizora.planner import PlanOutcome, Progress, run_plan
from aoizora.rank.compact import DEFAULT_MAX_FLOWS
from aoizora.replay import ReplayResult, collective_plan, replay, sim_kind, step_link_totals
from aoizora.request.clip_plan import plan_clip
from aoizora.resources import out_of_memory_line
from aoizora.workloads.base import Workload
from sim.columns import collective_columns
from sim.coords import Coord
from sim.errors import SimError
from sim.routing import check_order, link_ids
from sim.topology import Slice

__all__ = ["WhatIfRow", "byte_utilisation", "run_whatif", "step_utilisation", "whatif_row"]


@dataclass(frozen=True)
class WhatIfRow:
    """One slice's answer; ``error`` is set (and the numbers are None) if planning failed."""

    spec: str
    num_chips: int
    num_devices: int  # libtpu's devices: chips x devices per chip (2 on tpu7x)
    wraparound: tuple[bool, ...]
    winner: str | None
    placement: str | None
    step_s: float | None
    baselines_s: tuple[tuple[str, float | None], ...]
    peak_link_utilisation: float | None
    mean_link_utilisation: float | None
    plan_s: float | None
    error: str | None = None
    search_gap: float | None = None
    search_bound_s: float | None = None
    compute_model: dict[str, Any] | None = field(default=None, compare=False)
    latency: ClipLatency | None = None
    vae_winner: str | None = None
    memory: PlanMemory | None = None  # the winner's per-device HBM (its compiled analysis)
    clip_left_out: str | None = None  # why the clip's VAE decode could not be planned here

    def speedup_over(self, name: str) -> float | None:
        """Baseline latency / winner latency (None when either is missing)."""
        for b, q2 in self.baselines_s:
            if b == name and q2 is not None and self.step_s:
                return q2 / self.step_s
        return None

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "slice": self.spec,
            "num_chips": self.num_chips,
            "num_devices": self.num_devices,
            "wraparound": list(self.wraparound),
            "winner": self.winner,
            "placement": self.placement,
            "step_s": self.step_s,
            "baselines_s": {name: q2 for name, q2 in self.baselines_s},
            "speedups": {name: self.speedup_over(name) for name, _ in self.baselines_s},
            "peak_link_utilisation": self.peak_link_utilisation,
            "mean_link_utilisation": self.mean_link_utilisation,
            "plan_s": self.plan_s,
            "search_gap": self.search_gap,
            "search_bound_s": self.search_bound_s,
            "compute_model": self.compute_model,
            "memory": None if self.memory is None else self.memory.to_json(),
            "error": self.error,
            **({} if self.latency is None else self.latency.to_json()),
            **({} if self.vae_winner is None else {"vae_winner": self.vae_winner}),
            **({} if self.clip_left_out is None else {"clip_left_out": self.clip_left_out}),
        }


def step_utilisation(result: ReplayResult, graph: CollectiveGraph) -> tuple[float, float]:
    """Peak and mean over links of (busy time over the step) / step time."""
    step = result.step_time_s
    values = [t.busy_s / step for t in step_link_totals(result, graph)] if step > 0 else []
    if not values:
        return 0.0, 0.0
    return max(values), sum(values) / len(values)


def _step_flows(graph: CollectiveGraph, slice_: Slice, coords: Sequence[Coord]) -> int:
    """How many flows a full replay of one run of every region builds."""
    total = 0
    for c in graph.collectives:
        kind = sim_kind(c)
        cols = None if c.pairs else collective_columns(
            kind, [[coords[d] for d in g] for g in c.groups], buffer_bytes=1.0,
            id_prefix="n", slice_=slice_,
        )  # fmt: skip
        total += len(c.pairs) if c.pairs else (cols.columns.num_flows if cols else 0)
    return total


def byte_utilisation(
    graph: CollectiveGraph, slice_: Slice, coords: Sequence[Coord], step_s: float
) -> tuple[float, float]:
    """Peak and mean over links of (bytes carried over the step / bandwidth) / step time.

    What a pod-scale step gets instead of its full replay's link records
    (:func:`step_utilisation`; tens of millions of flows on 1,024 devices): each
    collective's bytes on every link its columns' routes cross (:mod:`sim.columns`,
    ``steps`` chunks a column, ``count`` runs a step), a lower bound of the link's
    busy time (a link moves at most its bandwidth). Rings and all-to-alls only;
    permutes and lines through their flows.
    """
    ordering = check_order(slice_, None)
    carried: dict[int, float] = {}
    for c in graph.collectives:
        kind = sim_kind(c)
        cols = None if c.pairs else collective_columns(
            kind, [[coords[d] for d in g] for g in c.groups],
            buffer_bytes=float(c.buffer_bytes), id_prefix="u", slice_=slice_,
        )  # fmt: skip
        if cols is not None:
            f = cols.columns
            ends = [(a, b, f.chunk_bytes * f.steps) for a, b in zip(f.src, f.dst, strict=True)]
        else:
            plan = collective_plan(c, coords, slice_=slice_, id_prefix="u")
            ends = [(x.src, x.dst, x.size_bytes) for x in plan.flows]
        for a, b, size in ends:
            for k in link_ids(slice_, a, b, ordering):
                carried[k] = carried.get(k, 0.0) + size * c.count
    bw = slice_.link_bandwidth_bytes_per_s
    values = [v / bw / step_s for v in carried.values() if v > 0] if step_s > 0 else []
    return (max(values), sum(values) / len(values)) if values else (0.0, 0.0)


def _winner_utilisation(outcome: PlanOutcome, cache: JsonCache | None) -> tuple[float, float]:
    """Peak and mean link utilisation of the winner's full replay (read from ``cache``
    when there: a pod-scale replay takes seconds)."""
    hlo_text = outcome.winner.compile.hlo_text
    order = outcome.winner_placement.order
    key = None
    if cache is not None:
        key = links_key(hlo_text=hlo_text, slice_=outcome.slice_, physical_ids=order.physical_ids)
        got = cache.get(key)
        if got is not None:
            return float(got["peak"]), float(got["mean"])
    graph = graph_from_text(hlo_text)
    if _step_flows(graph, outcome.slice_, order.coords) > DEFAULT_MAX_FLOWS:
        peak, mean = byte_utilisation(graph, outcome.slice_, order.coords, outcome.winner_q2_s)
    else:
        peak, mean = step_utilisation(replay(graph, outcome.slice_, order), graph)
    if cache is not None and key is not None:
        cache.put(key, {"peak": peak, "mean": mean})
    return peak, mean


def whatif_row(spec: str, outcome: PlanOutcome, *, cache: JsonCache | None = None) -> WhatIfRow:
    """The row of a finished plan: winner, baselines, link utilisation of its replay
    (``cache``: the ``links/`` cache of :func:`aoizora.cache.plan_caches`)."""
    peak, mean = _winner_utilisation(outcome, cache)
    return WhatIfRow(
        spec=spec,
        num_chips=outcome.slice_.num_chips,
        num_devices=outcome.slice_.num_devices,
        wraparound=outcome.slice_.wraparound,
        winner=outcome.winner.candidate.id,
        placement=outcome.winner_placement.placement_id,
        step_s=outcome.winner_q2_s,
        baselines_s=tuple((b.name, b.q2_s) for b in outcome.baselines),
        peak_link_utilisation=peak,
        mean_link_utilisation=mean,
        plan_s=dict(outcome.timings_s)["total"],
        search_gap=None if outcome.search is None else outcome.search.gap,
        search_bound_s=None if outcome.search is None else outcome.search.bound_s,
        compute_model=compute_model_json(outcome.slice_.chip),
        memory=outcome.memory(outcome.winner.compile),
    )


def _with_clip(
    row: WhatIfRow,
    outcome: PlanOutcome,
    say: Progress,
    *,
    cache_dir: str | None,
    clip: Mapping[str, Any],
    **options: Any,
) -> WhatIfRow:
    """``row`` with the whole clip's latency; with ``clip_left_out`` instead when the VAE
    decode cannot be planned on the slice (no legal sharding, none fits): the step's row
    stays, as ``aoizora plan`` keeps the step's plan."""
    try:
        cp = plan_clip(outcome, cache_dir=cache_dir, progress=say, **options, **clip)
    except DoesNotFit as exc:
        note = f"{exc}{f'; {exc.fits}' if exc.fits else ''}"
        say(f"== what-if {row.spec}: the clip is left out: {note}")
        return replace(row, clip_left_out=note)
    return replace(row, latency=cp.latency, vae_winner=cp.vae.winner.candidate.id)


def run_whatif(
    workload: Workload,
    slices: Sequence[Slice],
    *,
    top_k: int = 1,
    max_placements: int | None = None,
    cache_dir: str | None = None,
    progress: Progress | None = None,
    plan: Callable[..., PlanOutcome] = run_plan,
    plan_options: Mapping[str, Any] | None = None,
    clip: Mapping[str, Any] | None = None,
) -> tuple[WhatIfRow, ...]:
    """Plan ``workload`` on every slice (:func:`sim.topology.parse_slice_spec` reads
    specs such as ``v5e:4x4+wrap``), the most devices first (ties in the given order);
    rows, labelled ``slice_.spec``, in the given order. Largest first because what runs
    whatever a time bound (Stage 1, one round of compiles) grows with the devices: planned
    first, a pod's comes out of the shares of the smaller slices after it, and the last
    slice's is the smallest (:func:`aoizora.commands.whatif.shares_of`).

    A slice that cannot be planned (unknown shape, nothing fits in HBM, every
    compile failed, out of memory: a ``MemoryError``, a worker that died, the memory
    bound) becomes a row with ``error`` set; the study goes on.
    ``plan_options`` go to ``plan`` as they are (e.g. ``workers``, ``ray``,
    ``search_seconds``). ``clip`` (``steps``, ``text_encoder``, ``vae_chunk``) adds the
    whole clip's latency to every row (:func:`aoizora.request.clip_plan.plan_clip`).
    """
    say = progress or (lambda _: None)
    done: dict[int, WhatIfRow] = {}
    order = sorted(range(len(slices)), key=lambda k: (-slices[k].num_devices, k))
    for i, k in enumerate(order, start=1):
        slice_ = slices[k]
        spec = slice_.spec
        say(f"== what-if {i}/{len(slices)}: {spec} ({slice_.num_chips} chips)")
        try:
            outcome = plan(
                workload,
                slice_,
                top_k=top_k,
                max_placements=max_placements,
                cache_dir=cache_dir,
                progress=progress,
                **dict(plan_options or {}),
            )
            links = plan_caches(cache_dir).links if cache_dir is not None else None
            row = whatif_row(spec, outcome, cache=links)
            if clip is not None:
                options = dict(plan_options or {}, max_placements=max_placements)
                row = _with_clip(row, outcome, say, cache_dir=cache_dir, clip=clip, **options)
            done[k] = row
        except (AoizoraError, SimError, MemoryError) as exc:
            # a slice out of memory is its row's error: unwound, the next slice has it back
            if isinstance(exc, MemoryError):
                exc = ResourceError(out_of_memory_line(exc))
            say(f"== what-if {spec}: failed: {exc}")
            done[k] = WhatIfRow(
                spec=spec,
                num_chips=slice_.num_chips,
                num_devices=slice_.num_devices,
                wraparound=slice_.wraparound,
                winner=None,
                placement=None,
                step_s=None,
                baselines_s=(),
                peak_link_utilisation=None,
                mean_link_utilisation=None,
                plan_s=None,
                error=str(exc),
            )
    return tuple(done[k] for k in range(len(slices)))
