"""The two-stage planner: Stage-1 pruning, Stage-2 topology ranking, the winner.

:func:`run_plan` answers, for one workload on one slice, which (logical
sharding, physical placement) pair has the lowest simulated step latency:

1. **Candidates** (:mod:`aoizora.candidates.space`): every legal logical sharding.
2. **Stage 1** (:mod:`aoizora.stage1`): lower each candidate (no XLA compile),
   build its prediction DAG and score the placement-oblivious bound Q1; drop
   candidates over the chip's HBM; keep the top-K by Q1.
3. **Stage 2**: compile the top-K and the baselines' candidates for the TPU target
   (:mod:`aoizora.compile`), read each collective graph (:mod:`aoizora.hlo`) and
   search the placements (:mod:`aoizora.rank`) by Q2, the simulated step latency
   (:mod:`aoizora.replay`); one compile each (docs/facts.md, Placement and compilation).
4. **Winner**: the minimum Q2 over every compiled, memory-feasible candidate,
   ties broken by (candidate id, placement id). Baselines
   (:mod:`aoizora.candidates.baselines`): the default deployment (the first rule
   set on its natural mesh, mesh_utils' device order) -- for Wan instead the
   existing deployment (maxdiffusion's defaults) and the maxdiffusion recipe --
   and logical search (the best-Q1 candidate with the default device order).

``exhaustive=True`` compiles every Stage-1-feasible candidate and reports Stage 1's
top-1 and top-K recall and Spearman's rho between Q1 and Q2. Everything is ordered
explicitly, so the same request gives the same outcome.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from aoizora.cache import JsonCache, PlanCaches, plan_caches
from aoizora.candidates.baselines import Baseline, baseline_candidates, illegal_baselines
from aoizora.candidates.space import (
    Candidate,
    CandidateSpace,
    enumerate_candidates,
    with_splash_blocks,
)
from aoizora.compile import (
    CompileResult,
    cached_compile,
    compile_candidate,
    lower_to_read,
    lowering_target,
)
from aoizora.errors import PlanError
from aoizora.fanout import FanOut, fan_out
from aoizora.hlo.graph import graph_from_text
from aoizora.interrupts import phase
from aoizora.placement.device_order import DeviceOrder
from aoizora.plan import Plan, PredictedLatencies, compute_model_json, plan_inputs
from aoizora.plan.alternatives import PlanAlternative
from aoizora.plan.memory import PlanMemory
from aoizora.rank.evaluate import BatchEvaluator, Program
from aoizora.rank.jobs import SearchSummary, placement_job
from aoizora.rank.search import DEFAULT_SEARCH_BUDGET, DEFAULT_SEARCH_GAP, SearchBudget
from aoizora.rank.search_cache import cached_search
from aoizora.stage1.q1 import Stage1Ranking, rank_stage1
from aoizora.stage1.recall import ExhaustiveCheck, exhaustive_check
from aoizora.stage1.sweep import score_candidates, with_tiles
from aoizora.timebound import FLAG, TimeBound, compiles_within, say_search_stop, search_deadline
from aoizora.tpu import check_slice
from aoizora.workloads.attention import attention_family
from aoizora.workloads.base import Workload
from aoizora.workloads.clip import Clip
from sim.topology import Slice

__all__ = [
    "LOGICAL_SEARCH",
    "BaselineScore",
    "CandidateScores",
    "ExhaustiveCheck",
    "PlacementScore",
    "PlanOutcome",
    "Progress",
    "SearchLimits",
    "SearchSummary",
    "run_plan",
    "stage2",
]

LOGICAL_SEARCH = "logical search"
DEFAULT_ORDER_LABEL = "default order"

Progress = Callable[[str], None]


@dataclass(frozen=True)
class SearchLimits:
    """When the placement search stops (:func:`run_plan`'s ``search_*`` arguments)."""

    seconds: float | None
    gap: float
    budget: SearchBudget | None
    bound: TimeBound | None = None  # its time left, when the search starts, is a deadline too


@dataclass(frozen=True)
class PlacementScore:
    """Q2 of one placement of one compiled candidate: ``q2_s`` is the figure a plan
    gives, one call as ``aoizora measure`` times it -- the replay's step and the host's
    launch (the generation's ``program_launch_s``; 0 where unmeasured)."""

    placement_id: str
    order: DeviceOrder
    q2_s: float
    num_raw: int
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class CandidateScores:
    """Stage-2 results of one compiled candidate: every simulated placement, best first.

    The search (:mod:`aoizora.rank.search`) replays only placements no bound
    rules out: ``placements`` holds those (exact Q2s); ``proven_worse`` of the
    ``num_placements`` descriptions of the family were proven no better than
    the incumbent without a replay, ``open`` left unvisited by a deadline, and
    no open one replays faster than ``bound_s``.
    """

    candidate: Candidate
    compile: CompileResult
    placements: tuple[PlacementScore, ...]
    graph_collectives: int
    replay_s: float
    in_top_k: bool
    num_placements: int = 0
    proven_worse: int = 0
    open: int = 0
    bound_s: float = math.inf

    @property
    def best(self) -> PlacementScore:
        return self.placements[0]

    @property
    def worst(self) -> PlacementScore:
        return self.placements[-1]

    def score_of(self, label: str) -> PlacementScore:
        """The placement whose id or alias is ``label``."""
        for p in self.placements:
            if p.placement_id == label or label in p.aliases:
                return p
        raise PlanError(f"candidate {self.candidate.id} has no placement {label!r}")


@dataclass(frozen=True)
class BaselineScore:
    """A baseline deployment ranked by the same Q2 as every candidate."""

    name: str
    candidate_id: str
    order: DeviceOrder
    q2_s: float | None
    note: str


@dataclass(frozen=True)
class PlanOutcome:
    """Everything :func:`run_plan` found, for reports and the plan file."""

    workload: Workload
    slice_: Slice
    num_legal: int
    num_rejected: int
    stage1: Stage1Ranking
    stage1_picks: tuple[str, ...]
    stage1_failed: tuple[tuple[str, str], ...]
    legal_ids: tuple[str, ...]
    compiled_ids: tuple[str, ...]
    scored: tuple[CandidateScores, ...]
    failed: tuple[tuple[str, str], ...]
    winner: CandidateScores
    winner_placement: PlacementScore
    baselines: tuple[BaselineScore, ...]
    exhaustive: ExhaustiveCheck | None
    timings_s: tuple[tuple[str, float], ...]
    warnings: tuple[str, ...] = field(default=())
    search: SearchSummary | None = None

    @property
    def winner_q2_s(self) -> float:
        return self.winner_placement.q2_s

    @property
    def placement_spread(self) -> float:
        """Worst / best Q2 over the winning candidate's placements (1.0 = no spread)."""
        return self.winner.worst.q2_s / self.winner.best.q2_s

    def plan(self, *, model: str | None = None, clip: Clip | None = None) -> Plan:
        """The plan file for the winner: the workload's model, clip and abstract inputs
        (``model`` / ``clip`` override the workload's)."""
        cand = self.winner.candidate
        wl = self.workload
        return Plan.create(
            model=model or wl.model,
            workload=wl.name,
            clip=clip or wl.clip,
            inputs=plan_inputs(wl),
            mesh_axis_names=cand.mesh_axis_names,
            order=self.winner_placement.order,
            rules=cand.rules,
            attention=cand.attention,
            candidate_id=cand.id,
            placement_id=self.winner_placement.placement_id,
            predicted=PredictedLatencies(
                winner_s=self.winner_q2_s,
                baselines_s=tuple(
                    sorted((b.name, b.q2_s) for b in self.baselines if b.q2_s is not None)
                ),
            ),
            alternatives=self.alternatives(),
            compute_model=compute_model_json(self.slice_.chip),
            memory=self.memory(self.winner.compile),
            splash_blocks=cand.splash_blocks,
            scoped_vmem_kib=cand.scoped_vmem_kib,
        )

    def memory(self, result: CompileResult) -> PlanMemory | None:
        """A compiled candidate's per-device HBM (its memory analysis) against the budget."""
        if result.memory is None:
            return None
        budget = self.slice_.chip.per_device().memory_budget_bytes
        return PlanMemory.compiled(result.memory.total_bytes, budget)

    def alternatives(self) -> tuple[PlanAlternative, ...]:
        """The plan file's ``alternatives``: every other compiled sharding at its best
        placement (Q2 order), then every baseline with a Q2 (by name)."""
        by_id = {s.candidate.id: s for s in self.scored}
        for s in self.scored:  # a baseline priced from its sharding's tiled compile
            if s.candidate.splash_blocks is not None:
                by_id.setdefault(s.candidate.sharding_id, replace(
                    s, candidate=with_splash_blocks(s.candidate, None)))  # fmt: skip
        ranked = sorted(self.scored, key=lambda s: (s.best.q2_s, s.candidate.id))
        return (*(
            PlanAlternative.of("runner-up", s.candidate.id, s.candidate,
                               (s.best.placement_id, s.best.order), s.best.q2_s,
                               self.memory(s.compile))
            for s in ranked if s is not self.winner
        ), *(  # every baseline runs in the default device order (_baseline_scores)
            PlanAlternative.of("baseline", b.name, by_id[b.candidate_id].candidate,
                               (DEFAULT_ORDER_LABEL, b.order), b.q2_s,
                               self.memory(by_id[b.candidate_id].compile))
            for b in sorted(self.baselines, key=lambda b: b.name) if b.q2_s is not None
        ))  # fmt: skip


def _legal_space(workload: Workload, slice_: Slice, say: Progress) -> CandidateSpace:
    check_slice(slice_)  # a slice libtpu cannot describe fails now, not in Stage 1
    # The mesh spans devices: one per chip, two per tpu7x chip.
    with phase(f"the candidate enumeration on {slice_.name}"):
        space = enumerate_candidates(workload, slice_.num_devices)
    if not space.legal:
        reasons = "; ".join(f"{r.candidate.id}: {r.reason}" for r in space.rejected[:3])
        raise PlanError(
            f"no legal sharding of {workload.name} on {slice_.name} ({slice_.num_devices} "
            f"devices); first rejections: {reasons}"
        )
    legal, rejected = len(space.legal), len(space.rejected)
    say(f"{workload.name} on {slice_.name}: {legal} legal candidates, {rejected} rejected")
    return space


def _run_stage1(
    workload: Workload,
    space: CandidateSpace,
    slice_: Slice,
    *,
    top_k: int,
    caches: PlanCaches | None,
    say: Progress,
    pool: FanOut,
    splash_blocks: tuple[int, int, int] | None = None,
) -> tuple[Stage1Ranking, list[tuple[str, str]], dict[str, Candidate]]:
    """Stage 1 over every legal candidate (:mod:`aoizora.stage1.sweep`, fanned out over
    ``pool``): Q1, the HBM check and the top-K, and every scored candidate by id -- with
    the splash tile Stage 1 planned for it (its id then ends in the tile)."""
    with phase(f"Stage 1 on {slice_.name}"):
        sweep = score_candidates(
            workload, space.legal, slice_, lower=lower_to_read, pool=pool, progress=say,
            cache=caches.stage1 if caches else None, modules=caches.shardy if caches else None,
            target=lowering_target,
        )  # fmt: skip
    sweep, by_id = with_tiles(sweep, space, slice_, splash_blocks)
    failed = list(sweep.failed)
    if not sweep.estimates and not sweep.over_hbm:
        raise PlanError(
            f"Stage 1 failed for every candidate of {workload.name} on {slice_.name}; first "
            f"error: {failed[0][1]}"
        )
    hbm = slice_.chip.per_device().memory_budget_bytes
    ranking = rank_stage1(sweep.estimates, k=top_k, hbm_bytes=hbm, over_hbm=sweep.over_hbm)
    near = sum(e.memory_bytes_per_chip > hbm for e in ranking.kept)
    extra = f", {near} of them near the HBM budget: the compile decides" if near else ""
    say(f"stage 1 kept {list(ranking.kept_ids)} (top-{top_k} by Q1{extra})")
    if not ranking.kept:
        raise PlanError(
            f"every candidate of {workload.name} is over the {slice_.chip.generation} HBM "
            f"budget on {slice_.name}: {ranking.dropped_infeasible[0][1]}; try a bigger slice"
        )
    return ranking, failed, by_id


def _stage1_picks(
    ranking: Stage1Ranking,
    by_id: Mapping[str, Candidate],
    say: Progress,
    *,
    per_attention_kind: bool,
) -> list[str]:
    """What Stage 1 hands to Stage 2: the top-K, and with ``per_attention_kind`` the
    best-Q1 candidate of every attention kind the top-K lacks (opt-in: a safety net
    from before Q1 modelled the schedule of each attention scheme, docs/stage1.md).
    The Ulysses x ring splits (usp_u2, usp_u4, ...) count as one kind."""
    kept_ids = list(ranking.kept_ids)
    if not per_attention_kind:
        return kept_ids
    have = {attention_family(by_id[cid].attention) for cid in kept_ids}
    best: dict[str, str] = {}  # attention kind -> its best-Q1 dropped candidate
    for e in ranking.dropped_weak:
        best.setdefault(attention_family(by_id[e.candidate_id].attention), e.candidate_id)
    kept_ids += [best[a] for a in sorted(best) if a not in have]
    if len(kept_ids) > len(ranking.kept_ids):
        say(f"stage 1 also keeps the best of each attention kind: {kept_ids[len(ranking.kept) :]}")
    return kept_ids


def _to_compile(
    picks: Sequence[str],
    ranking: Stage1Ranking,
    baselines: Sequence[Baseline],
    by_id: Mapping[str, Candidate],
    *,
    exhaustive: bool,
) -> list[Candidate]:
    """Stage 1's picks (every feasible candidate when exhaustive), then the baselines' --
    but a baseline whose sharding a pick runs at planned tiles, whose compile prices it at
    the 512s (:func:`_baseline_scores`)."""
    ids = list(picks)
    if exhaustive:
        ids += [e.candidate_id for e in ranking.dropped_weak if e.candidate_id not in ids]
    tiled = {by_id[i].sharding_id for i in ids if i in by_id}
    for b in baselines:
        if b.candidate.id not in ids and b.candidate.id not in tiled:
            ids.append(b.candidate.id)
    extra = {b.candidate.id: b.candidate for b in baselines}
    return [by_id[i] if i in by_id else extra[i] for i in ids]


def _compile_task(args: tuple[Workload, Candidate, Slice, JsonCache | None]) -> CompileResult:
    workload, cand, slice_, cache = args
    return compile_candidate(workload, cand, slice_, cache=cache)


def _compile_all(
    workload: Workload,
    slice_: Slice,
    candidates: Sequence[Candidate],
    *,
    caches: PlanCaches | None,
    say: Progress,
    pool: FanOut,
) -> tuple[list[tuple[Candidate, CompileResult]], list[tuple[str, str]], list[str]]:
    """Compile every candidate (fanned out): the feasible ones, the failed and over-HBM
    ones with a reason, and the ids of every compile that produced a program."""
    n = len(candidates)
    cache = caches.compiled if caches else None
    # Cached compiles are read here (one lowering each); only the rest fan out.
    results: list[CompileResult | None] = [
        cached_compile(workload, cand, slice_, cache=cache) if cache is not None else None
        for cand in candidates
    ]
    todo = [i for i, r in enumerate(results) if r is None]
    tasks = [(workload, candidates[i], slice_, cache) for i in todo]
    if pool.label == "serial" or len(tasks) < 2:
        done = []
        for i, task in zip(todo, tasks, strict=True):
            say(f"[compile {i + 1}/{n}] {task[1].id} for {slice_.name} ...")
            done.append(_compile_task(task))
    else:
        say(f"[compile] {len(tasks)} of {n} candidates for {slice_.name} on {pool.label} ...")
        done = pool.map(_compile_task, tasks)
    for i, fresh in zip(todo, done, strict=True):
        results[i] = fresh
    compiled: list[tuple[Candidate, CompileResult]] = []
    failed: list[tuple[str, str]] = []
    ok_ids: list[str] = []
    for i, (cand, got) in enumerate(zip(candidates, results, strict=True), start=1):
        assert got is not None  # every candidate was read from the cache or compiled
        result = got
        if result.ok:
            ok_ids.append(cand.id)
        if not result.ok:
            failed.append((cand.id, result.error or "compile failed"))
            say(f"[compile {i}/{n}] {cand.id}: FAILED: {result.error}")
        elif result.feasible is False:
            failed.append((cand.id, result.feasibility_reason))
            say(f"[compile {i}/{n}] {cand.id}: infeasible: {result.feasibility_reason}")
        else:
            hit = " (cached)" if result.cache_hit else ""
            say(f"[compile {i}/{n}] {cand.id}: {result.first_compile_s:.1f} s{hit}")
            compiled.append((cand, result))
    return compiled, failed, ok_ids


def _rank_all(
    compiled: Sequence[tuple[Candidate, CompileResult]],
    slice_: Slice,
    *,
    picks: Sequence[str],
    max_placements: int | None,
    caches: PlanCaches | None,
    say: Progress,
    pool: FanOut,
    per_candidate: bool,
    search: SearchLimits,
) -> tuple[list[CandidateScores], SearchSummary | None]:
    """The placement search over every compiled candidate (the default order always replayed)."""
    if not compiled:
        return [], None
    graphs = [graph_from_text(result.hlo_text) for _, result in compiled]
    jobs = [
        placement_job(
            cand, g, slice_, max_placements=max_placements, default_label=DEFAULT_ORDER_LABEL
        )
        for (cand, _), g in zip(compiled, graphs, strict=True)
    ]
    programs = [
        Program(result.hlo_text, g, cand.mesh_shape)
        for (cand, result), g in zip(compiled, graphs, strict=True)
    ]
    evaluator = BatchEvaluator(programs, slice_, cache=caches.q2 if caches else None, pool=pool)
    total = sum(j.space.count() if j.tree else 0 for j in jobs)
    say(f"[search] {total} placements of {len(jobs)} compiled shardings on {slice_.name} ...")
    # A finished search is read back, a stopped one resumed (aoizora.rank.search_cache).
    report = cached_search(
        jobs, evaluator, cache=caches.search if caches else None, programs=evaluator.digests,
        per_job=per_candidate, deadline_s=search_deadline(search.bound, search.seconds),
        gap_tolerance=search.gap, budget=search.budget, progress=say,
    )  # fmt: skip
    # A plan's figure is one call as it is timed: the device's step (the search's Q2, the
    # same launch under every placement, so left out of the search) and the host's launch.
    launch = slice_.chip.compute.program_launch_s
    scored = []
    for (cand, result), g, jr in zip(compiled, graphs, report.jobs, strict=True):
        placements = tuple(
            PlacementScore(placement_id=sc.leaf.label, order=DeviceOrder.from_physical_ids(
                sc.leaf.physical_ids, mesh_shape=cand.mesh_shape, slice_=slice_),
                q2_s=sc.q2_s + launch, num_raw=sc.num_raw, aliases=sc.aliases)
            for sc in jr.scored
        )  # fmt: skip
        if not placements:  # a baseline's given order the search's deadline left open
            say(f"[rank] {cand.id}: its default order was not replayed before the search's "
                f"deadline; left out of the comparison; {FLAG} raises it")  # fmt: skip
            continue
        scored.append(
            CandidateScores(
                candidate=cand, compile=result, placements=placements,
                graph_collectives=len(g.collectives), replay_s=report.seconds,
                in_top_k=cand.id in picks, num_placements=jr.num_placements,
                proven_worse=jr.proven_worse, open=jr.open, bound_s=jr.bound_s + launch,
            )
        )  # fmt: skip
        say(
            f"[rank] {cand.id}: {len(placements)} simulated, {jr.proven_worse} proven worse, "
            f"{jr.open} open of {jr.num_placements}; best {placements[0].q2_s * 1e3:.2f} ms "
            f"({placements[0].placement_id})"
        )
    summary = SearchSummary.of(report, fan_out=pool.label, budget=search.budget, launch_s=launch)
    return scored, summary


def _baseline_scores(
    baselines: Sequence[Baseline],
    scored: Sequence[CandidateScores],
    logical_best: Candidate,
    slice_: Slice,
    tile_gain_s: Mapping[str, float],
) -> list[BaselineScore]:
    """The baselines and logical search, ranked by the same Q2 (their default order). A
    baseline whose sharding was compiled only at planned splash tiles is that compile's Q2
    less the tiles' gain over the 512s as Stage 1 prices the same calls (``tile_gain_s``
    by candidate id): the tile changes the splash calls' time and nothing else."""
    scored_by_id = {s.candidate.id: s for s in scored}
    tiled = {s.candidate.sharding_id: s for s in scored if s.candidate.splash_blocks}
    out: list[BaselineScore] = []
    for b in baselines:
        s = scored_by_id.get(b.candidate.id)
        order = DeviceOrder.from_physical_ids(
            b.device_order, mesh_shape=b.candidate.mesh_shape, slice_=slice_
        )
        q2 = s.score_of(DEFAULT_ORDER_LABEL).q2_s if s is not None else None
        note = b.note
        t = tiled.get(b.candidate.id) if s is None else None
        if t is not None and t.candidate.id in tile_gain_s:
            q2 = t.score_of(DEFAULT_ORDER_LABEL).q2_s - tile_gain_s[t.candidate.id]
            note += f"; at the 512 tiles: {t.candidate.id}'s compile less its tiles' gain"
        out.append(BaselineScore(b.name, b.candidate.id, order, q2, note))
    s = scored_by_id.get(logical_best.id)
    if s is not None:
        p = s.score_of(DEFAULT_ORDER_LABEL)
        out.append(
            BaselineScore(
                LOGICAL_SEARCH, logical_best.id, p.order, p.q2_s, "best Q1, default device order"
            )
        )
    return out


def stage2(
    workload: Workload,
    slice_: Slice,
    to_compile: Sequence[Candidate],
    *,
    picks: Sequence[str],
    caches: PlanCaches | None,
    say: Progress,
    timings: list[tuple[str, float]],
    max_placements: int | None,
    exhaustive: bool,
    pool: FanOut,
    search: SearchLimits,
) -> tuple[
    list[tuple[Candidate, CompileResult]],
    list[tuple[str, str]],
    list[str],
    list[CandidateScores],
    SearchSummary | None,
]:
    """Compile, then search the placements, both fanned out over ``pool``.

    Returns the feasible compiles, the failures, the ids of every compile that
    produced a program, the scores and the search summary."""
    t0 = time.perf_counter()
    with phase(f"the compiles for {slice_.name}"):
        compiled, failed, ok_ids = _compile_all(
            workload, slice_, to_compile, caches=caches, say=say, pool=pool
        )
    timings.append(("compile", time.perf_counter() - t0))
    t0 = time.perf_counter()
    with phase(f"the placement search on {slice_.name}"):
        scored, summary = _rank_all(
            compiled, slice_, picks=picks, max_placements=max_placements, caches=caches,
            say=say, pool=pool, per_candidate=exhaustive, search=search,
        )  # fmt: skip
    timings.append(("rank", time.perf_counter() - t0))
    return compiled, failed, ok_ids, scored, summary


def _baselines(workload: Workload, slice_: Slice, say: Progress) -> tuple[Baseline, ...]:
    """The named baselines, saying which are illegal here and left out of the comparison."""
    for line in illegal_baselines(workload, slice_):
        say(line)
    return baseline_candidates(workload, slice_)


def _require_scored(
    workload: Workload, slice_: Slice, scored: Sequence[object], failed: Sequence[tuple[str, str]]
) -> None:
    """Raise :class:`PlanError` when no candidate compiled to a feasible program."""
    if not scored:
        why = "; ".join(f"{c}: {r}" for c, r in failed[:3])
        raise PlanError(f"no candidate of {workload.name} compiled to a feasible program on "
                        f"{slice_.name}; failures: {why}")  # fmt: skip


def run_plan(
    workload: Workload,
    slice_: Slice,
    *,
    top_k: int = 2,
    per_attention_kind: bool = False,
    exhaustive: bool = False,
    cache_dir: str | None = None,
    max_placements: int | None = None,
    progress: Progress | None = None,
    workers: int | None = None,
    ray: str | None = None,
    search_seconds: float | None = None,
    search_gap: float = DEFAULT_SEARCH_GAP,
    search_budget: SearchBudget | None = DEFAULT_SEARCH_BUDGET,
    splash_blocks: tuple[int, int, int] | None = None,
    time_bound: TimeBound | None = None,
) -> PlanOutcome:
    """Plan ``workload`` on ``slice_``: Stage 1, Stage 2, winner and baselines.

    Stage 1 hands its top ``top_k`` by Q1 to Stage 2 (``per_attention_kind``: and the best
    of every attention kind the top-K lacks); ``progress`` gets a line per step of long work;
    ``cache_dir`` keeps Stage 1, compiles and Q2 across runs (:mod:`aoizora.cache`); the work
    fans out over ``workers`` processes or a Ray cluster at ``ray``, the plan the same. The
    search stops at ``search_budget`` (counted work; None: none), ``search_seconds`` or within
    ``search_gap``, with its bound and gap; ``splash_blocks``: every candidate's splash tiles
    (None: Stage 1 plans them); ``time_bound`` cuts compiles and the search
    (:mod:`aoizora.timebound`). Raises :class:`PlanError`."""
    say = progress or (lambda _: None)
    timings: list[tuple[str, float]] = []
    t_start = time.perf_counter()
    caches = plan_caches(cache_dir) if cache_dir is not None else None
    space = _legal_space(workload, slice_, say)
    with fan_out(workers=workers, ray=ray) as pool:  # Stage 1, compiles and replays
        t0 = time.perf_counter()
        ranking, stage1_failed, by_id = _run_stage1(workload, space, slice_, top_k=top_k,
            caches=caches, say=say, pool=pool, splash_blocks=splash_blocks)  # fmt: skip
        timings.append(("stage1", time.perf_counter() - t0))
        picks, baselines = compiles_within(
            time_bound, _stage1_picks(ranking, by_id, say, per_attention_kind=per_attention_kind),
            _baselines(workload, slice_, say), names=lambda b: b.name, round_s=timings[-1][1],
            workers=pool.workers, where=slice_.name, say=say,
        )  # fmt: skip
        to_compile = _to_compile(picks, ranking, baselines, by_id, exhaustive=exhaustive)
        compiled, failed, compiled_ids, scored, search = stage2(
            workload, slice_, to_compile, picks=picks, caches=caches,
            say=say, timings=timings, max_placements=max_placements, exhaustive=exhaustive,
            pool=pool, search=SearchLimits(search_seconds, search_gap, search_budget, time_bound),
        )  # fmt: skip
    say_search_stop(time_bound, search_seconds, search, slice_.name, say)
    _require_scored(workload, slice_, scored, failed)
    # One Q2 ranks every compile: a baseline's sharding may win too (the report says so).
    winner = min(scored, key=lambda s: (s.best.q2_s, s.candidate.id, s.best.placement_id))
    logical_best = by_id[ranking.kept[0].candidate_id]
    gains = {e.candidate_id: e.splash_gain_s for e in (*ranking.kept, *ranking.dropped_weak)}
    # the winner's own compile: this run's, or the one that filled the cache
    timings += [("total", time.perf_counter() - t_start),
                ("winner_compile", winner.compile.first_compile_s)]  # fmt: skip
    return PlanOutcome(
        workload=workload,
        slice_=slice_,
        num_legal=len(space.legal),
        num_rejected=len(space.rejected),
        stage1=ranking,
        stage1_picks=tuple(picks),
        stage1_failed=tuple(stage1_failed),
        legal_ids=tuple(by_id),
        compiled_ids=tuple(compiled_ids),
        scored=tuple(scored),
        failed=tuple(failed),
        winner=winner,
        winner_placement=winner.best,
        baselines=tuple(_baseline_scores(baselines, scored, logical_best, slice_, gains)),
        exhaustive=exhaustive_check(ranking, scored, picks=picks) if exhaustive else None,
        timings_s=tuple(timings),
        warnings=tuple(sorted({w for _, r in compiled for w in r.warnings})),
        search=search,
    )
