"""Stage 1 over a list of candidates: the cache, an HBM check before lowering, fan-out.

:func:`score_candidates` gives every candidate its :class:`Stage1Estimate` (or
the reason it failed), in candidate order, however the work ran:

1. **Proven over HBM, not lowered.** A candidate's Stage-1 memory is its
   argument bytes plus a temporary peak (:mod:`aoizora.stage1.memory`), so when
   the arguments alone (:func:`aoizora.candidates.space.argument_bytes_per_chip`,
   the same ceil-per-dimension count the DAG makes of the lowered program's
   arguments) exceed the device's HBM, Stage 1 would drop it as infeasible
   whatever its Q1. Lowering it is wasted work: about a fifth of Wan 2.1 14B's
   legal candidates on v5e (35 of 146 on v5e:4x4, 75 of 370 on v5e:16x16).
   This check runs before the cache, so a warm run reports the same as a cold one.
2. **Cached** estimates are read (:func:`aoizora.cache.stage1_key`).
3. The rest are **lowered and scored**: in this process one after another, or
   over a :class:`~aoizora.fanout.FanOut` pool in chunks of consecutive
   candidates (neighbours share a mesh shape, so a worker's jax caches -- e.g.
   the splash-attention mask info of a local shape -- serve the whole chunk).
   Results come back in candidate order, so the estimates, and the plan, are
   the same serial or parallel.
   With a ``modules`` cache and a ``target``, a candidate's program after Shardy's
   passes is stored as MLIR bytecode (:func:`aoizora.cache.shardy_key`), and read
   back instead of lowering again wherever the lowering target is the same: a
   v6e slice reuses a v5e slice's of the same shape
   (docs/facts.md, Shardy from Python), and a change to Q1's code re-scores
   without lowering. Lowering, Shardy's passes and reading them are four fifths
   of Stage 1's time (``benchmarks/stage1_speed.py --phases``); parsing the
   bytecode is a fiftieth of that.

>>> from aoizora.workloads.wan import wan_workload, parse_resolution
>>> from aoizora.candidates.space import enumerate_candidates
>>> from sim.topology import load_slice
>>> wl = wan_workload("wan2.1-14b", parse_resolution("480p"))
>>> space = enumerate_candidates(wl, 4)
>>> whole = space.by_id("data1.fsdp1.context4.tensor1/fsdp/ring")  # 28.6 GB of weights a chip
>>> from aoizora.compile import lower
>>> sweep = score_candidates(wl, [whole], load_slice("v5e:2x2"), lower=lower)
>>> sweep.estimates, sweep.over_hbm[0][1][:60]
((), 'its arguments alone need 28593758344 B per chip (28.59 GB), ')
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from aoizora.cache import JsonCache, shardy_key, stage1_key
from aoizora.candidates.space import (
    Candidate,
    CandidateSpace,
    argument_bytes_per_chip,
    candidate_to_json,
    with_splash_blocks,
)
from aoizora.errors import AoizoraError, PlanError
from aoizora.fanout import FanOut
from aoizora.stage1.program import ShardyModule
from aoizora.stage1.q1 import (
    Stage1Estimate,
    estimate_from_json,
    estimate_module,
    estimate_to_json,
    human_bytes,
)
from aoizora.stage1.shardy import (
    Stage1Error,
    module_bytecode,
    propagated_module,
    read_bytecode,
    read_mlir_module,
)
from aoizora.stage1.tiles import SplashCall, tile_gain_s, tile_limit_bytes, tile_limit_kib
from aoizora.workloads.base import Workload
from sim.compute import ComputeModel, compute_model_of
from sim.splash_tiles import BASE_TILE
from sim.topology import Slice

__all__ = [
    "Lower",
    "check_tile_fits",
    "LoweringTarget",
    "Stage1Sweep",
    "over_hbm_reason",
    "score_candidate",
    "score_candidates",
    "with_tiles",
]

# How to trace and lower one candidate for a slice, no compile: the planner passes
# aoizora.compile.lower. Stage 1 comes before compiling in the pipeline, so it does
# not import it (tests/test_layout.py); a module-level function pickles by reference
# to the workers.
Lower = Callable[[Workload, Candidate, Slice], Any]
# What the lowering depends on in the slice, as a key part: aoizora.compile.lowering_target.
LoweringTarget = Callable[[Candidate, Slice], str]

# Chunks per worker: enough to even out the load (a ring-attention candidate costs
# ten times a gather_kv one), few enough that a chunk shares its jax caches.
_CHUNKS_PER_WORKER = 4


@dataclass(frozen=True)
class Stage1Sweep:
    """Stage 1's per-candidate outcomes, each list in candidate order.

    ``estimates`` are the scored candidates; ``failed`` ``(candidate id, error)``
    of those whose lowering or estimate failed; ``over_hbm`` ``(candidate id,
    reason)`` of those whose arguments alone exceed the device's HBM (not
    lowered); ``cache_hits`` how many estimates came from the cache;
    ``module_hits`` how many of the others were scored from a stored module,
    not lowered.
    """

    estimates: tuple[Stage1Estimate, ...]
    failed: tuple[tuple[str, str], ...]
    over_hbm: tuple[tuple[str, str], ...]
    cache_hits: int = 0
    module_hits: int = 0


def over_hbm_reason(workload: Workload, candidate: Candidate, hbm_bytes: float) -> str | None:
    """Why ``candidate`` cannot fit in ``hbm_bytes`` per device before it is lowered
    (its arguments alone are bigger), or ``None`` if its arguments fit."""
    args = argument_bytes_per_chip(workload, candidate)
    if args <= hbm_bytes:
        return None
    return (
        f"its arguments alone need {args} B per chip ({human_bytes(args)}), over the "
        f"{hbm_bytes:.0f} B HBM budget ({human_bytes(hbm_bytes)}); not lowered"
    )


@dataclass(frozen=True)
class _Modules:
    """Where Stage 1 stores and finds programs after Shardy's passes."""

    cache: JsonCache
    target: LoweringTarget


def _stored_module(
    workload: Workload, candidate: Candidate, slice_: Slice, *, lower: Lower, modules: _Modules
) -> tuple[ShardyModule, bool]:
    """The candidate's module after Shardy's passes, from ``modules`` when stored (and
    ``True``), else lowered, passed and stored (and ``False``)."""
    key = shardy_key(
        workload=workload.cache_id,
        candidate=json.dumps(candidate_to_json(candidate), sort_keys=True),
        target=modules.target(candidate, slice_),
    )
    got = modules.cache.get(key)
    if got is not None:
        try:
            return read_bytecode(base64.b64decode(got["mlir_bytecode_base64"])), True
        except (Stage1Error, KeyError, TypeError, ValueError):
            pass  # an unreadable entry: lower again and overwrite it
    module = propagated_module(lower(workload, candidate, slice_))
    data = base64.b64encode(module_bytecode(module)).decode("ascii")
    modules.cache.put(key, {"mlir_bytecode_base64": data})
    return read_mlir_module(module), False


def _score(
    workload: Workload,
    candidate: Candidate,
    slice_: Slice,
    *,
    lower: Lower,
    modules: _Modules | None = None,
) -> tuple[Stage1Estimate, bool]:
    """:func:`score_candidate`, and whether its module came from ``modules``."""
    if modules is None:
        module, stored = propagated_module(lower(workload, candidate, slice_)), False
        read = read_mlir_module(module)
    else:
        read, stored = _stored_module(workload, candidate, slice_, lower=lower, modules=modules)
    est = estimate_module(
        read, mesh_axis_sizes=candidate.mesh_sizes,
        # a program runs on one device (tpu7x: half a chip)
        chip=slice_.chip.per_device(), candidate_id=candidate.id, slice_=slice_,
    )  # fmt: skip
    return est, stored


def score_candidate(
    workload: Workload, candidate: Candidate, slice_: Slice, *, lower: Lower
) -> Stage1Estimate:
    """Lower ``candidate`` for ``slice_`` with ``lower`` and score its Stage-1 estimate.

    Raises :class:`~aoizora.errors.AoizoraError` when lowering or the estimate fails.
    """
    return _score(workload, candidate, slice_, lower=lower)[0]


# (id, estimate or error, seconds, whether the module was read from the modules cache)
_Scored = tuple[str, "Stage1Estimate | str", float, bool]
_Task = tuple[Workload, tuple[Candidate, ...], Slice, Lower, "_Modules | None"]


def _score_chunk(task: _Task) -> list[_Scored]:
    """Score a chunk of candidates in one process (a fan-out task)."""
    workload, candidates, slice_, lower, modules = task
    out: list[_Scored] = []
    for cand in candidates:
        t0 = time.perf_counter()
        try:
            est, stored = _score(workload, cand, slice_, lower=lower, modules=modules)
            out.append((cand.id, est, time.perf_counter() - t0, stored))
        except AoizoraError as exc:
            out.append((cand.id, str(exc), time.perf_counter() - t0, False))
    return out


def _chunks(items: Sequence[Candidate], n: int) -> list[tuple[Candidate, ...]]:
    """``items`` cut into at most ``n`` runs of consecutive items, sizes within one."""
    n = max(1, min(n, len(items)))
    size, extra = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        stop = start + size + (1 if i < extra else 0)
        out.append(tuple(items[start:stop]))
        start = stop
    return out


def _scored(
    task: tuple[Workload, Slice, Lower, _Modules | None],
    todo: Sequence[Candidate],
    pool: FanOut | None,
) -> Iterator[_Scored]:
    """Every candidate of ``todo`` scored, in order: serially, or over ``pool``."""
    workload, slice_, lower, modules = task
    if pool is None or pool.label == "serial" or len(todo) < 2:
        for cand in todo:
            yield from _score_chunk((workload, (cand,), slice_, lower, modules))
        return
    workers = pool.workers if pool.workers > 1 else 2  # a Ray cluster: still chunk
    chunks = _chunks(todo, workers * _CHUNKS_PER_WORKER)
    tasks = [(workload, c, slice_, lower, modules) for c in chunks]
    for done in pool.imap(_score_chunk, tasks):
        yield from done


def _split(
    workload: Workload,
    candidates: Sequence[Candidate],
    slice_: Slice,
    *,
    cache: JsonCache | None,
    skip_over_hbm: bool,
) -> tuple[list[tuple[str, str]], dict[str, Stage1Estimate], list[Candidate], dict[str, str]]:
    """``(over HBM, cached estimates, to score, estimate keys)`` of ``candidates``."""
    hbm = slice_.chip.per_device().memory_budget_bytes
    over: list[tuple[str, str]] = []
    found: dict[str, Stage1Estimate] = {}
    todo: list[Candidate] = []
    keys: dict[str, str] = {}
    for cand in candidates:
        reason = over_hbm_reason(workload, cand, hbm) if skip_over_hbm else None
        if reason is not None:
            over.append((cand.id, reason))
            continue
        keys[cand.id] = stage1_key(
            workload_name=workload.cache_id, candidate_id=cand.id, slice_=slice_
        )
        cached = cache.get(keys[cand.id]) if cache is not None else None
        if cached is not None:
            found[cand.id] = estimate_from_json(cached)
        else:
            todo.append(cand)
    return over, found, todo, keys


def score_candidates(
    workload: Workload,
    candidates: Sequence[Candidate],
    slice_: Slice,
    *,
    lower: Lower,
    cache: JsonCache | None = None,
    pool: FanOut | None = None,
    progress: Callable[[str], None] | None = None,
    skip_over_hbm: bool = True,
    modules: JsonCache | None = None,
    target: LoweringTarget | None = None,
) -> Stage1Sweep:
    """Stage 1 for every candidate (see the module docstring), results in candidate order.

    ``lower`` traces and lowers one candidate (:data:`Lower`); ``pool`` fans that
    out (``None`` or a serial pool: this process); ``progress`` receives one line
    per candidate; ``skip_over_hbm=False`` lowers and scores even the candidates
    proven over HBM (for checks). ``modules`` stores and serves programs after
    Shardy's passes under ``target`` (:data:`LoweringTarget`; both or neither).
    """
    say = progress or (lambda _: None)
    n = len(candidates)
    over, found, todo, keys = _split(
        workload, candidates, slice_, cache=cache, skip_over_hbm=skip_over_hbm
    )
    hits = len(found)
    if over:
        say(f"stage 1: {len(over)} of {n} candidates need more than HBM for their arguments alone")
    if hits:
        say(f"stage 1: {hits} of {n} estimates from the cache")
    stored = None if modules is None or target is None else _Modules(modules, target)
    failed: dict[str, str] = {}
    module_hits = 0
    width = len(str(len(todo)))
    scored = _scored((workload, slice_, lower, stored), todo, pool)
    for i, (cid, got, seconds, reused) in enumerate(scored, start=1):
        head = f"[stage 1 {i:{width}d}/{len(todo)}] {cid}"
        if isinstance(got, str):
            failed[cid] = got
            say(f"{head}: failed: {got}")
            continue
        if cache is not None:
            cache.put(keys[cid], estimate_to_json(got))
        found[cid] = got
        module_hits += reused
        how = ", stored module" if reused else ""
        say(f"{head}: Q1 {got.q1_s * 1e3:.2f} ms ({seconds:.2f} s{how})")
    order = [c.id for c in candidates]
    return Stage1Sweep(
        estimates=tuple(found[c] for c in order if c in found),
        failed=tuple((c, failed[c]) for c in order if c in failed),
        over_hbm=tuple(over),
        cache_hits=hits,
        module_hits=module_hits,
    )


def check_tile_fits(
    calls: Sequence[SplashCall], model: ComputeModel, tile: tuple[int, int, int]
) -> None:
    """Refuse a ``--splash-blocks`` tile whose VMEM the core cannot hold (kernel's model)."""
    kernel = model.params.splash_kernel
    if kernel is None or tile_limit_bytes(calls, kernel, tile) is not None:
        return
    need = max(kernel.vmem_needed_bytes(tile, d, dv) for _, _, _, d, dv, _ in calls)
    raise PlanError(
        f"--splash-blocks {','.join(map(str, tile))}: the splash kernel needs about "
        f"{need / 2**20:.0f} MiB of scoped VMEM at these blocks, more than the core's "
        f"{kernel.vmem_bytes >> 20} MiB; give smaller blocks, e.g. --splash-blocks 512,2048,512"
    )


def with_tiles(
    sweep: Stage1Sweep,
    space: CandidateSpace,
    slice_: Slice,
    fixed: tuple[int, int, int] | None,
) -> tuple[Stage1Sweep, dict[str, Candidate]]:
    """``sweep`` with each estimate under its tiled candidate's id (the splash tile
    Stage 1 planned, :mod:`aoizora.stage1.tiles`), and every legal candidate by id, in the
    space's order (those Stage 1 did not score keep their own). A ``fixed`` tile replaces
    the planned one, and its Q1 that tile's."""
    legal = {c.id: c for c in space.legal}
    tiled: dict[str, Candidate] = {}
    estimates = []
    model = compute_model_of(slice_.chip.per_device())
    for e in sweep.estimates:
        if fixed is not None:
            gain_s = tile_gain_s(e.splash_calls, model, fixed) - e.splash_gain_s
            tile = None if fixed == BASE_TILE or not e.splash_calls else fixed
            e = replace(e, q1_s=e.q1_s + gain_s, compute_s=e.compute_s + gain_s,
                        splash_blocks=tile, splash_gain_s=e.splash_gain_s + gain_s)  # fmt: skip
        limit = tile_limit_kib(e.splash_calls, model, e.splash_blocks)
        if fixed is not None and e.splash_blocks is not None:
            check_tile_fits(e.splash_calls, model, fixed)
        tiled[e.candidate_id] = with_splash_blocks(
            legal[e.candidate_id], e.splash_blocks, scoped_vmem_kib=limit
        )
        estimates.append(replace(e, candidate_id=tiled[e.candidate_id].id))
    by_id = {(c := tiled.get(cid, legal[cid])).id: c for cid in legal}  # in the space's order
    return replace(sweep, estimates=tuple(estimates)), by_id
