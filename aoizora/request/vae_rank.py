"""The VAE decoder's sharding for a clip, ranked by Stage 1 alone; compiled only on request.

:func:`rank_vae` ranks the decoder's legal shardings (:mod:`aoizora.candidates.space`)
with the planner's Stage 1 -- the lowered program, Shardy's propagation, Q1 with the
compute model (:mod:`aoizora.stage1`) -- and keeps the best memory-feasible one.
Nothing is compiled by default: libtpu spends 2-10 s generating code for each of the
decoder's convolutions, so compiling its candidates made a cold clip plan 5-13x the
step's plan (docs/serving.md, "Why the VAE is ranked by Stage 1"), and no VAE compile
can change which step sharding wins -- the decoder is a program of its own, so its
decode adds the same seconds to the clip of every step sharding. ``compile=True``
compiles the chosen sharding alone (never a runner-up: re-ranking the decoder's
shardings moves a share of the clip, not the step's winner) and replays its
placements (Q2), as the step's candidates are.

The plan says which figure it holds: ``source`` ``"stage1"`` (Q1: placement-oblivious,
the default device order, a lower bound of the simulated decode) or ``"simulated"``
(Q2 of the compiled program at its best placement). maxdiffusion's two VAE
deployments (``maxdiffusion spatial``, ``replicated``;
:func:`aoizora.candidates.baselines.baseline_candidates`) are scored by the same
Stage 1 and reported beside the choice.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aoizora.buffer_assignment import cached_assigned_memory
from aoizora.cache import PlanCaches, plan_caches
from aoizora.candidates.baselines import Baseline, baseline_candidates
from aoizora.candidates.space import Candidate, CandidateSpace, enumerate_candidates
from aoizora.compile import lower_to_read, lowering_target
from aoizora.errors import CompileError, DoesNotFit, PlanError
from aoizora.fanout import fan_out
from aoizora.interrupts import phase
from aoizora.placement.device_order import DeviceOrder
from aoizora.plan import Plan, PredictedLatencies, compute_model_json, plan_inputs
from aoizora.plan.alternatives import PlanAlternative
from aoizora.plan.memory import PlanMemory
from aoizora.planner import CandidateScores, SearchLimits, stage2
from aoizora.rank.search import DEFAULT_SEARCH_BUDGET, DEFAULT_SEARCH_GAP, SearchBudget
from aoizora.stage1.memory import MEMORY_UNDERESTIMATE
from aoizora.stage1.q1 import Stage1Estimate, Stage1Ranking, rank_stage1
from aoizora.stage1.sweep import Stage1Sweep, score_candidates
from aoizora.tpu import check_slice, default_device_order
from aoizora.workloads.base import Workload
from sim.topology import Slice, load_slice

__all__ = [
    "STAGE1_SOURCE",
    "VaeBaseline",
    "VaeChoice",
    "VaePlan",
    "decode_sub_slice",
    "no_legal_sharding",
    "rank_vae",
    "smallest_fitting_slice",
]

STAGE1_SOURCE = "stage1"  # the figure is Stage 1's Q1 (PredictedLatencies.source)
BUFFERS_SOURCE = "buffer_assignment"  # the memory is XLA's buffer assignment (PlanMemory.source)
SIMULATED_SOURCE = "simulated"  # Q2 of the compiled program
DEFAULT_ORDER = "default order"  # the placement of an uncompiled choice: mesh_utils' order

Progress = Callable[[str], None]


@dataclass(frozen=True)
class VaeChoice:
    """The chosen sharding and its Stage-1 estimate."""

    candidate: Candidate
    estimate: Stage1Estimate

    @property
    def q1_s(self) -> float:
        return self.estimate.q1_s


@dataclass(frozen=True)
class VaeBaseline:
    """One of maxdiffusion's VAE deployments, scored by Stage 1 (``q1_s`` None: its
    arguments alone are over HBM, so Stage 1 did not lower it)."""

    name: str
    candidate: Candidate
    order: DeviceOrder
    q1_s: float | None
    over_hbm: str | None
    note: str


@dataclass(frozen=True)
class VaePlan:
    """The VAE decoder's plan for a clip: the choice, its figure and where it comes from."""

    workload: Workload
    slice_: Slice
    winner: VaeChoice
    placement_id: str
    order: DeviceOrder
    decode_s: float
    source: str
    baselines: tuple[VaeBaseline, ...]
    ranking: Stage1Ranking
    num_legal: int
    num_rejected: int
    compiled_ids: tuple[str, ...]
    timings_s: tuple[tuple[str, float], ...]
    warnings: tuple[str, ...] = ()
    memory: PlanMemory | None = None  # the choice's per-device HBM: Stage 1's or compiled

    def figure_of(self, baseline: VaeBaseline) -> float | None:
        """A baseline's decode figure, one call as the choice's: Stage 1's Q1 and the
        host's launch (``program_launch_s``); None where Stage 1 could not score it."""
        if baseline.q1_s is None:
            return None
        return baseline.q1_s + self.slice_.chip.compute.program_launch_s

    def plan(self) -> Plan:
        """The plan file of the decoder (the step's plan file holds it under ``vae``).
        Its ``predicted_latency_s.source`` is :attr:`source`; the baselines are listed
        where their figures are of the same kind (Stage 1's)."""
        cand, wl = self.winner.candidate, self.workload
        same = self.source == STAGE1_SOURCE
        base = [(b, f) for b in self.baselines if same and (f := self.figure_of(b)) is not None]
        return Plan.create(
            model=wl.model, workload=wl.name, clip=wl.clip, inputs=plan_inputs(wl),
            mesh_axis_names=cand.mesh_axis_names, order=self.order, rules=cand.rules,
            attention=cand.attention, candidate_id=cand.id, placement_id=self.placement_id,
            predicted=PredictedLatencies(
                winner_s=self.decode_s,
                baselines_s=tuple(sorted((b.name, figure) for b, figure in base)),
                source=self.source,
            ),
            alternatives=tuple(
                PlanAlternative.of("baseline", b.name, b.candidate, (DEFAULT_ORDER, b.order),
                                   figure)
                for b, figure in sorted(base, key=lambda bf: bf[0].name)
            ),
            compute_model=compute_model_json(self.slice_.chip),
            memory=self.memory,
        )  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        """``aoizora plan --json``'s ``vae`` object: the choice, its figure (``decode_s``)
        and ``source``, Stage 1's Q1 of it and of every baseline, what was compiled."""
        return {
            "workload": self.workload.name,
            "source": self.source,
            "winner": {
                "candidate": self.winner.candidate.id,
                "placement": self.placement_id,
                "decode_s": self.decode_s,
                "q1_s": self.winner.q1_s,
                **({} if self.memory is None else {"memory": self.memory.to_json()}),
            },
            "baselines": [
                {"name": b.name, "candidate": b.candidate.id, "q1_s": b.q1_s,
                 "over_hbm": b.over_hbm}
                for b in self.baselines
            ],  # fmt: skip
            "stage1_order": [e.candidate_id for e in self.ranking.estimates],
            "compiled": list(self.compiled_ids),
            "timings_s": dict(self.timings_s),
        }  # fmt: skip


def _score(
    workload: Workload,
    cands: Sequence[Candidate],
    slice_: Slice,
    caches: PlanCaches | None,
    say: Progress,
) -> Stage1Sweep:
    """Stage 1 of every candidate in this process: the decoder has a handful (two mesh
    axes), fewer than a worker pool's start-up is worth."""
    with phase(f"Stage 1 of the VAE decoder on {slice_.name}"):
        return score_candidates(
            workload, cands, slice_, lower=lower_to_read, progress=say,
            cache=caches.stage1 if caches else None, modules=caches.shardy if caches else None,
            target=lowering_target,
        )  # fmt: skip


def _baselines(
    baselines: Sequence[Baseline], sweep: Stage1Sweep, slice_: Slice, hbm: float
) -> tuple[VaeBaseline, ...]:
    est = {e.candidate_id: e for e in sweep.estimates}
    over = dict(sweep.over_hbm)
    out = []
    for b in baselines:
        e = est.get(b.candidate.id)
        reason = over.get(b.candidate.id)
        if e is not None and e.memory_bytes_per_chip > hbm:
            reason = f"Stage 1 estimates {e.memory_bytes_per_chip / 1e9:.2f} GB per device"
        order = DeviceOrder.from_physical_ids(
            b.device_order, mesh_shape=b.candidate.mesh_shape, slice_=slice_
        )
        q1 = None if e is None else e.q1_s
        out.append(VaeBaseline(b.name, b.candidate, order, q1, reason, b.note))
    return tuple(out)


@dataclass(frozen=True)
class _Compile:
    """How the chosen sharding is compiled and its placements searched (run_plan's options)."""

    workers: int | None
    ray: str | None
    max_placements: int | None
    limits: SearchLimits


def _simulated(
    workload: Workload,
    slice_: Slice,
    chosen: Candidate,
    caches: PlanCaches | None,
    say: Progress,
    how: _Compile,
) -> tuple[CandidateScores | None, str | None]:
    """Compile ``chosen`` alone and search its placements: its scores, or why not."""
    timings: list[tuple[str, float]] = []
    with fan_out(workers=how.workers, ray=how.ray) as pool:
        _, failed, _, scored, _ = stage2(
            workload, slice_, [chosen], picks=[chosen.id], caches=caches, say=say,
            timings=timings, max_placements=how.max_placements, exhaustive=False, pool=pool,
            search=how.limits,
        )  # fmt: skip
    if scored:
        return scored[0], None
    return None, "; ".join(f"{c}: {r}" for c, r in failed) or "no program"


@dataclass(frozen=True)
class _Ranked:
    """Stage 1 over the decoder's legal shardings and maxdiffusion's two deployments."""

    space: CandidateSpace
    baselines: tuple[Baseline, ...]
    sweep: Stage1Sweep
    ranking: Stage1Ranking


def _rank(workload: Workload, slice_: Slice, caches: PlanCaches | None, say: Progress) -> _Ranked:
    check_slice(slice_)
    space = enumerate_candidates(workload, slice_.num_devices)
    baselines = baseline_candidates(workload, slice_)
    legal = {c.id for c in space.legal}
    extra = [b.candidate for b in baselines if b.candidate.id not in legal]
    say(f"{workload.name} on {slice_.name}: {len(space.legal)} legal shardings, Stage 1 only")
    if not space.legal:
        raise no_legal_sharding(workload, slice_, space)
    sweep = _score(workload, [*space.legal, *extra], slice_, caches, say)
    ranking = rank_stage1(
        [e for e in sweep.estimates if e.candidate_id in legal], k=1,
        hbm_bytes=slice_.chip.per_device().memory_budget_bytes,
        over_hbm=[o for o in sweep.over_hbm if o[0] in legal],
    )  # fmt: skip
    if not ranking.kept:
        if not ranking.dropped_infeasible:
            first = "; ".join(f"{cid}: {why}" for cid, why in sweep.failed[:1])
            raise PlanError(
                f"Stage 1 failed for every one of the {len(space.legal)} legal shardings of "
                f"{workload.name} on {slice_.name} (first: {first or 'no estimate made'})"
            )
        cid, why = ranking.dropped_infeasible[0]
        fits = smallest_fitting_slice(workload, slice_, caches)
        raise DoesNotFit(
            f"no sharding of {workload.name} fits on {slice_.name} by Stage 1 ({cid}: {why})",
            fits=fits,
        )
    return _Ranked(space, baselines, sweep, ranking)


# Slice shapes a bigger deployment of one generation comes in, smallest first (Cloud TPU
# docs: v5e/v6e sub-slices 2x2 ... 16x16; v4/v5p/tpu7x 2x2x1 ... 4x4x4).
_GROWTH_2D = ((1, 1), (2, 2), (2, 4), (4, 4), (4, 8), (8, 8), (8, 16), (16, 16))
_GROWTH_3D = ((2, 2, 1), (2, 2, 2), (2, 2, 4), (2, 4, 4), (4, 4, 4))
_GROWTH_TRIES = 3  # bigger slices Stage 1 looks at before it gives up
# The 3D shapes a pod's sub-slice comes in beyond 4x4x4 (Cloud TPU docs: v5p, tpu7x).
_POD_3D = ((4, 4, 8), (4, 8, 8), (8, 8, 8), (8, 8, 16), (8, 16, 16), (16, 16, 16))


def _inside(shape: Sequence[int], slice_: Slice) -> bool:
    """Whether a slice of ``shape`` is a smaller part of ``slice_``'s (dimensions sorted)."""
    mine = sorted(slice_.shape)
    return math.prod(shape) < slice_.num_chips and all(
        a <= b for a, b in zip(sorted(shape), mine, strict=True)
    )


def decode_sub_slice(workload: Workload, slice_: Slice) -> str:
    """What would plan ``workload`` when it has no legal sharding over ``slice_``'s
    devices: the biggest sub-slice of its generation (:data:`_GROWTH_2D`, :data:`_GROWTH_3D`,
    :data:`_POD_3D`) over whose devices it has one, said for the warning; ``""`` if none."""
    shapes = _GROWTH_2D if len(slice_.shape) == 2 else (*_GROWTH_3D, *_POD_3D)
    for shape in sorted((s for s in shapes if _inside(s, slice_)), key=math.prod, reverse=True):
        name = f"{slice_.chip.generation}:{'x'.join(map(str, shape))}"
        try:
            other = load_slice(name)
        except Exception:  # a shape this generation does not come in: try the next
            continue
        legal = enumerate_candidates(workload, other.num_devices).legal
        if legal:
            n = other.num_devices
            return (
                f"fewer devices would plan the decode: on a sub-slice such as {name} ({n} "
                f"device{'s' if n > 1 else ''}) it has {len(legal)} legal sharding"
                f"{'s' if len(legal) > 1 else ''} (e.g. {legal[-1].id})"
            )
    return ""


def no_legal_sharding(workload: Workload, slice_: Slice, space: CandidateSpace) -> DoesNotFit:
    """The error of a program none of whose shardings over ``slice_``'s devices is legal
    (its dimensions do not split that many ways): the simplest rejection as the reason (a
    dimension its devices do not divide, fewest reasons, shortest), and
    :func:`decode_sub_slice` as what would plan it."""
    simplest = min(
        space.rejected,
        key=lambda r: ("divisible" not in r.reason, len(r.reasons), len(r.reason)),
        default=None,
    )
    example = "" if simplest is None else f" (e.g. {simplest.candidate.id}: {simplest.reason})"
    return DoesNotFit(
        f"{workload.name} has no legal sharding over the {slice_.num_devices} devices of "
        f"{slice_.name}: none of its {len(space.rejected)} candidates splits its arrays "
        f"evenly with every mesh axis used{example}",
        fits=decode_sub_slice(workload, slice_),
    )


def smallest_fitting_slice(workload: Workload, slice_: Slice, caches: PlanCaches | None) -> str:
    """Where ``workload`` fits, said for the planner's error: ``"it fits on v5e:2x2 by
    XLA's buffer assignment"`` -- the smallest slice of ``slice_``'s generation, bigger
    than it, on which Stage 1's best sharding fits by its buffer assignment (by Stage 1
    where that cannot be read; at most :data:`_GROWTH_TRIES` slices tried), else ``""``."""
    shapes = _GROWTH_2D if len(slice_.shape) == 2 else _GROWTH_3D
    gen = slice_.chip.generation
    bigger = [s for s in shapes if math.prod(s) > slice_.num_chips][:_GROWTH_TRIES]
    for shape in bigger:
        name = f"{gen}:{'x'.join(map(str, shape))}"
        try:
            other = load_slice(name)
            check_slice(other)
        except Exception:  # a shape this generation does not come in: try the next
            continue
        space = enumerate_candidates(workload, other.num_devices)
        sweep = _score(workload, list(space.legal), other, caches, lambda _: None)
        hbm = other.chip.per_device().memory_budget_bytes
        ranking = rank_stage1(sweep.estimates, k=1, hbm_bytes=hbm, over_hbm=sweep.over_hbm)
        if not ranking.kept:
            continue
        best = space.by_id(ranking.kept[0].candidate_id)
        try:
            found = cached_assigned_memory(
                workload, best, other, cache=caches.buffers if caches else None
            )
        except CompileError:
            return f"it fits on {name} by Stage 1"
        if found.total_bytes <= hbm:
            return f"it fits on {name} by XLA's buffer assignment"
    return ""


# The decoder's chunk Stage 1's figure was measured true at (issue 40, validation/README.md
# section 8): five decodes of chunk 1 within 4 % of a TPU v5e chip, the one of chunk 2 19.5 %
# under it (its compiled program slices the causal cache through relayouts Stage 1, reading
# the program before layouts, cannot see); compiled and simulated, that decode is -3.7 %.
STAGE1_TRUE_CHUNK = 1


# Stage 1's best shardings whose buffer assignment is read before the decoder is said not
# to fit (each takes a lowering and XLA's passes, a few seconds).
_ASSIGN_TRIES = 3


def _assigned_choice(
    workload: Workload, slice_: Slice, r: _Ranked, caches: PlanCaches | None, say: Progress
) -> tuple[Stage1Estimate, PlanMemory] | None:
    """Stage 1's best sharding that fits by XLA's buffer assignment
    (:mod:`aoizora.buffer_assignment`), with that memory; None when the assignment could
    not be read (the plan then keeps Stage 1's figure). Raises :class:`DoesNotFit` when
    none of the first :data:`_ASSIGN_TRIES` fits."""
    hbm = int(slice_.chip.per_device().memory_budget_bytes)
    cache = caches.buffers if caches is not None else None
    tried: list[str] = []
    for est in (*r.ranking.kept, *r.ranking.dropped_weak)[:_ASSIGN_TRIES]:
        cand = r.space.by_id(est.candidate_id)
        try:
            with phase(f"XLA's buffer assignment of the VAE decoder on {slice_.name}"):
                found = cached_assigned_memory(workload, cand, slice_, cache=cache)
        except CompileError as exc:
            say(f"VAE memory stays Stage 1's: {exc}")
            return None
        memory = PlanMemory(found.total_bytes, hbm, BUFFERS_SOURCE)
        say(f"VAE {cand.id}: {memory.line()}")
        if memory.fits:
            return est, memory
        tried.append(f"{cand.id}: {memory.line()}")
    fits = smallest_fitting_slice(workload, slice_, caches)
    raise DoesNotFit(
        f"no sharding of {workload.name} fits on {slice_.name} by XLA's buffer assignment "
        f"(Stage 1's best {len(tried)}: {'; '.join(tried)})",
        fits=fits,
    )


def _why_compile(workload: Workload, memory: PlanMemory, hbm: float) -> str | None:
    """Why the VAE's choice is compiled to give its plan figure, or None: Stage 1 may put
    its memory too low near the budget (XLA's buffer assignment, when read, decides
    instead), or its time too low at another chunk."""
    if memory.source == "stage1" and memory.hbm_bytes_per_chip > MEMORY_UNDERESTIMATE * hbm:
        return (
            f"the VAE's choice needs {memory.line()} by Stage 1, which may be as little "
            f"as {MEMORY_UNDERESTIMATE:g} of what it allocates: compiling it to decide"
        )
    chunk = workload.info.get("chunk", STAGE1_TRUE_CHUNK)
    if chunk != STAGE1_TRUE_CHUNK:
        return (
            f"Stage 1 prices a decode of vae_decode_chunk {chunk} short (measured on a TPU "
            f"v5e chip at chunk 2: 19.5 % under, chunk {STAGE1_TRUE_CHUNK} within 4 %): "
            "compiling the VAE's choice to simulate it"
        )
    return None


def _over_budget(memory: PlanMemory, *, compiled: bool) -> tuple[str, ...]:
    """The plan's warning when its choice is over the budget (within Stage 1's margin of
    it, where neither the assignment nor a compile was read: only a compile can tell)."""
    if memory.fits:
        return ()
    by = "its compiled analysis" if memory.source == "compiled" else "Stage 1"
    tail = "" if compiled else "; --vae-compile decides by the compiled program"
    return (f"the VAE's chosen sharding needs {memory.line()}: over the budget by {by}{tail}",)


def rank_vae(
    workload: Workload,
    slice_: Slice,
    *,
    compile: bool = False,
    cache_dir: str | None = None,
    progress: Progress | None = None,
    workers: int | None = None,
    ray: str | None = None,
    max_placements: int | None = None,
    search_seconds: float | None = None,
    search_gap: float = DEFAULT_SEARCH_GAP,
    search_budget: SearchBudget | None = DEFAULT_SEARCH_BUDGET,
) -> VaePlan:
    """The decoder's sharding on ``slice_`` by Stage 1 (module docstring); ``compile``
    compiles that one sharding and reports its simulated decode, as happens anyway when
    Stage 1 puts its memory above :data:`MEMORY_UNDERESTIMATE` of the budget (it may not fit:
    the compiled analysis decides). ``workers``, ``ray`` and
    the search limits apply to that compile and its placement search only. Raises
    :class:`PlanError` when no sharding of the decoder fits."""
    say = progress or (lambda _: None)
    t0 = time.perf_counter()
    caches = plan_caches(cache_dir) if cache_dir is not None else None
    r = _rank(workload, slice_, caches, say)
    timings = [("stage1", time.perf_counter() - t0)]
    best, hbm = r.ranking.kept[0], slice_.chip.per_device().memory_budget_bytes
    memory = PlanMemory(best.memory_bytes_per_chip, int(hbm), "stage1")
    if not compile and (assigned := _assigned_choice(workload, slice_, r, caches, say)):
        (best, memory), t1 = assigned, sum(t for _, t in timings)
        timings.append(("buffer_assignment", time.perf_counter() - t0 - t1))
    chosen = r.space.by_id(best.candidate_id)
    order = DeviceOrder.from_physical_ids(
        default_device_order(chosen.mesh_shape, slice_)[0], mesh_shape=chosen.mesh_shape,
        slice_=slice_,
    )  # fmt: skip
    # one call as timed: Stage 1's decode and the host's launch (a compiled figure has it)
    figure, source = best.q1_s + slice_.chip.compute.program_launch_s, STAGE1_SOURCE
    placement = DEFAULT_ORDER
    warnings: tuple[str, ...] = ()
    compiled: tuple[str, ...] = ()
    reason = None if compile else _why_compile(workload, memory, hbm)
    if reason is not None:
        say(reason)
        compile = True
    if compile:
        t1 = time.perf_counter()
        how = _Compile(workers, ray, max_placements,
                       SearchLimits(search_seconds, search_gap, search_budget))  # fmt: skip
        scores, why = _simulated(workload, slice_, chosen, caches, say, how)
        timings.append(("compile_and_rank", time.perf_counter() - t1))
        compiled = (chosen.id,)
        if scores is None and why is not None and "does not fit" in why:
            # the compiler's verdict on memory (CompileTimeHbmOom): Stage 1 was too low
            fits = smallest_fitting_slice(workload, slice_, caches)
            raise DoesNotFit(
                f"the VAE's choice {chosen.id} of {workload.name} does not fit on "
                f"{slice_.name}: {why.split(': ', 1)[-1][:200]}",
                fits=fits,
            )
        if scores is None:  # the figure stays Stage 1's, and the plan says why
            warnings = (f"the VAE's chosen sharding did not compile to a feasible program: {why}",)
        else:
            b = scores.best
            figure, source, placement, order = b.q2_s, SIMULATED_SOURCE, b.placement_id, b.order
            if scores.compile.memory is not None:
                memory = PlanMemory.compiled(scores.compile.memory.total_bytes, hbm)
    warnings += _over_budget(memory, compiled=compile)
    timings.append(("total", time.perf_counter() - t0))
    say(f"VAE decode: {chosen.id}, {figure * 1e3:.2f} ms ({source}); {timings[-1][1]:.1f} s, "
        f"{len(compiled)} compiled")  # fmt: skip
    return VaePlan(
        workload=workload, slice_=slice_, winner=VaeChoice(chosen, best),
        placement_id=placement, order=order, decode_s=figure, source=source,
        baselines=_baselines(r.baselines, r.sweep, slice_, hbm), ranking=r.ranking,
        num_legal=len(r.space.legal), num_rejected=len(r.space.rejected),
        compiled_ids=compiled, timings_s=tuple(timings), warnings=warnings, memory=memory,
    )  # fmt: skip
