"""End-to-end planner tests on a tiny Wan config compiled for real TPU targets.

One cold plan and one warm plan per slice (module fixtures); every assertion
re-derives what it checks from an independent path where one exists: the
winner's Q2 is replayed again from the compiled HLO with the plan file's device
order, the plan's mesh is built on libtpu's own devices, and the ranking is
re-sorted from the raw scores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from aoizora.candidates.space import enumerate_candidates
from aoizora.hlo.graph import graph_from_text
from aoizora.placement.device_order import DeviceOrder
from aoizora.plan import load_plan
from aoizora.planner import (
    LOGICAL_SEARCH,
    CandidateScores,
    PlanOutcome,
    _stage1_picks,
    run_plan,
)
from aoizora.replay import network_footprint, replay
from aoizora.report.directory import busiest_region, write_report_dir
from aoizora.report.summary import outcome_summary, render_report
from aoizora.stage1.q1 import Stage1Estimate, rank_stage1
from aoizora.stage1.recall import exhaustive_check
from aoizora.timebound import TimeBound
from aoizora.tpu import topology_devices
from aoizora.workloads.wan import WAN_CONFIGS, parse_resolution, wan_workload
from sim.topology import load_slice

pytestmark = pytest.mark.slow

CLIP = parse_resolution("256x256", frames=5)
MODEL = "wan-tiny"


def _plan(slice_name: str, cache_dir: Path, top_k: int = 2) -> PlanOutcome:
    return run_plan(
        wan_workload(MODEL, CLIP),
        load_slice(slice_name),
        top_k=top_k,
        cache_dir=str(cache_dir),
    )


@pytest.fixture(scope="module")
def cache_dir(plan_cache_dir: Path) -> Path:
    return plan_cache_dir


@pytest.fixture(scope="module")
def cold(cache_dir: Path) -> PlanOutcome:
    return _plan("v5e:2x2", cache_dir)


@pytest.fixture(scope="module")
def warm(cold: PlanOutcome, cache_dir: Path) -> PlanOutcome:
    return _plan("v5e:2x2", cache_dir)


def _plan_json(outcome: PlanOutcome) -> str:
    return outcome.plan(model=MODEL, clip=CLIP).to_json()


def test_winner_is_the_minimum_over_every_scored_pair(cold: PlanOutcome) -> None:
    pairs = sorted(
        (p.q2_s, c.candidate.id, p.placement_id) for c in cold.scored for p in c.placements
    )
    assert (cold.winner_q2_s, cold.winner.candidate.id) == pairs[0][:2]
    assert cold.winner_q2_s == min(c.best.q2_s for c in cold.scored)
    for c in cold.scored:
        qs = [p.q2_s for p in c.placements]
        assert qs == sorted(qs)
        assert c.best.q2_s == qs[0] and c.worst.q2_s == qs[-1]


def test_footprint_sharing_is_exact(cold: PlanOutcome) -> None:
    # Every simulated placement's Q2 (the exact shortcut, possibly shared through an
    # equal network footprint) equals a fresh full replay of that placement; its figure
    # adds the host's launch of the call (v5e: measured), the same for every placement.
    launch = cold.slice_.chip.compute.program_launch_s
    assert launch > 0
    for c in cold.scored:
        graph = graph_from_text(c.compile.hlo_text)
        for p in c.placements:
            assert replay(graph, cold.slice_, p.order).step_time_s + launch == pytest.approx(
                p.q2_s, rel=1e-9
            )


def test_every_placement_is_simulated_or_proven_worse(cold: PlanOutcome) -> None:
    # The search leaves nothing open without a deadline; what it did not replay it
    # proved no better than the winner (the bound is at most the winner's Q2).
    assert cold.search is not None and cold.search.open == 0 and cold.search.gap == 0.0
    for c in cold.scored:
        assert c.open == 0
        assert c.num_placements == c.proven_worse + sum(p.num_raw for p in c.placements)
    assert cold.search.bound_s <= cold.winner_q2_s
    timings = dict(cold.timings_s)
    assert set(timings) == {"stage1", "compile", "rank", "total", "winner_compile"}
    assert timings["winner_compile"] == cold.winner.compile.first_compile_s > 0


_ONE_AXIS_HLO = """HloModule m, num_partitions=4
ENTRY %e (p: f32[262144]) -> f32[524288] {
  %p = f32[262144]{0} parameter(0)
  ROOT %ag = f32[524288]{0} all-gather(%p), channel_id=1, replica_groups={{0,1},{2,3}}, \
dimensions={0}, use_global_device_ids=true
}"""


def test_footprint_merges_orders_that_only_move_an_idle_axis() -> None:
    # The all-gather spans the second mesh axis only: swapping the two rows of the
    # mesh (the first axis) moves no flow, so the footprint is equal -- and so is
    # a fresh replay. Reversing a row changes the ring order: a different footprint.
    slice_ = load_slice("v5e:2x2")
    graph = graph_from_text(_ONE_AXIS_HLO)

    def order(ids: tuple[int, ...]) -> DeviceOrder:
        return DeviceOrder.from_physical_ids(ids, mesh_shape=(2, 2), slice_=slice_)

    base, rows_swapped, row_reversed = order((0, 1, 2, 3)), order((2, 3, 0, 1)), order((1, 0, 2, 3))
    assert network_footprint(graph, base) == network_footprint(graph, rows_swapped)
    assert network_footprint(graph, base) != network_footprint(graph, row_reversed)
    assert (
        replay(graph, slice_, base).step_time_s == replay(graph, slice_, rows_swapped).step_time_s
    )


def everyone_sorted(outcome: PlanOutcome) -> list[str]:
    """Feasible candidate ids in Q1 order (ties by id), as Stage 1 ranks them."""
    ests = (*outcome.stage1.kept, *outcome.stage1.dropped_weak)
    return [cid for _, cid in sorted((e.q1_s, e.candidate_id) for e in ests)]


def test_stage1_keeps_top_k_by_q1_and_compiles_them(cold: PlanOutcome) -> None:
    kept = cold.stage1.kept
    assert len(kept) == 2
    everyone = sorted(
        (e.q1_s, e.candidate_id) for e in (*cold.stage1.kept, *cold.stage1.dropped_weak)
    )
    assert [e.candidate_id for e in kept] == [cid for _, cid in everyone[:2]]
    # By default Stage 1 alone decides: it hands over exactly its top-K.
    assert list(cold.stage1_picks) == [e.candidate_id for e in kept]
    # Opt-in (--per-attention-kind): plus the best-Q1 candidate of every attention
    # kind the top-K lacks (recomputed here from the Q1 order and the candidate ids).
    expected = [e.candidate_id for e in kept]
    for e in everyone_sorted(cold):
        kind = e.split("/")[-1]
        if not any(cid.split("/")[-1] == kind for cid in expected):
            expected.append(e)
    by_id = {c.candidate.id: c.candidate for c in cold.scored} | {
        c.id: c for c in enumerate_candidates(cold.workload, cold.slice_.num_chips).legal
    }
    wider = _stage1_picks(cold.stage1, by_id, lambda _: None, per_attention_kind=True)
    assert sorted(wider) == sorted(expected) and wider[: len(kept)] == expected[: len(kept)]
    compiled = {c.candidate.id for c in cold.scored} | {cid for cid, _ in cold.failed}
    assert set(cold.stage1_picks) <= compiled
    for c in cold.scored:
        assert c.in_top_k == (c.candidate.id in cold.stage1_picks)
        assert c.compile.backend == "tpu"
        assert c.compile.feasible is True


def test_baselines_are_ranked_by_the_same_q2(cold: PlanOutcome) -> None:
    names = [b.name for b in cold.baselines]
    assert names == ["existing deployment", "maxdiffusion recipe", LOGICAL_SEARCH]
    by_id = {c.candidate.id: c for c in cold.scored}
    existing = cold.baselines[0]
    assert existing.candidate_id.startswith("data1.fsdp1.context4.tensor1/maxdiffusion/")
    for b in cold.baselines:
        assert b.q2_s is not None and b.q2_s >= cold.winner_q2_s
        scores = by_id[b.candidate_id]
        # The baseline's device order is one of the ranked placements, same Q2.
        match = [p for p in scores.placements if p.order.physical_ids == b.order.physical_ids]
        assert match and match[0].q2_s == b.q2_s
    logical = cold.baselines[-1]
    assert logical.candidate_id == cold.stage1.kept_ids[0]


def test_given_orders_the_deadline_cannot_hold_are_left_out_in_a_line(
    cold: PlanOutcome, fresh_plan_cache: Callable[[str], Path]
) -> None:
    # A search whose deadline is spent at once (a pod slice's share, where one baseline's
    # default order replays for minutes): the first pick's default order is replayed (a
    # plan needs a placement), every other sharding's waits in the heap and, never
    # replayed, is left out of the comparison in one line each; the plan has a winner.
    # (A cache of its own: the session's holds the finished search, which would be read.)
    lines: list[str] = []
    out = run_plan(
        wan_workload(MODEL, CLIP), load_slice("v5e:2x2"), top_k=2,
        cache_dir=str(fresh_plan_cache("deadline")), progress=lines.append,
        search_seconds=1e-9, workers=2,
    )  # fmt: skip
    left = [line for line in lines if "was not replayed before the search's deadline" in line]
    assert left and all(line.endswith("--max-minutes raises it") for line in left)
    assert out.search is not None and out.search.stopped_by == "deadline"
    first = out.compiled_ids[0]
    assert first == cold.stage1_picks[0] and {s.candidate.id for s in out.scored} == {first}
    assert {line.split()[1].rstrip(":") for line in left} == set(out.compiled_ids[1:])
    by_id = {c.candidate.id: c for c in cold.scored}  # the same compile, the same replay
    assert out.winner_q2_s == by_id[first].score_of("default order").q2_s
    for b in out.baselines:  # priced only where their sharding's order was replayed
        assert (b.q2_s is not None) == (b.candidate_id == first), b


def test_a_spent_time_bound_compiles_the_picks_alone_and_says_so(
    cold: PlanOutcome, cache_dir: Path
) -> None:
    # A bound already spent when Stage 1 ends (its estimates are cached here): the picks
    # are compiled (a plan needs them), the baselines are left out in one line naming
    # them and --max-minutes, and the search still runs (MIN_SEARCH_S) to the same winner.
    lines: list[str] = []
    spent = TimeBound(minutes=1.0, seconds=60.0, ends_at=time.monotonic() - 1.0)
    out = run_plan(
        wan_workload(MODEL, CLIP), load_slice("v5e:2x2"), top_k=2, cache_dir=str(cache_dir),
        progress=lines.append, time_bound=spent, workers=2,
    )  # fmt: skip
    assert out.compiled_ids == cold.stage1_picks
    assert [b.name for b in out.baselines] == [LOGICAL_SEARCH]
    cut = [line for line in lines if "--max-minutes raises it" in line]
    assert len(cut) == 1
    assert "left out existing deployment, maxdiffusion recipe; --max-minutes raises it" in cut[0]
    assert "the time bound (1 min, --max-minutes): 0 s left on v5e:2x2" in cut[0]
    winner = min((s for s in cold.scored if s.in_top_k), key=lambda s: s.best.q2_s)
    assert out.winner_q2_s == winner.best.q2_s and out.search is not None
    assert out.search.stopped_by is None  # the tiny search ends well within MIN_SEARCH_S


def test_winner_q2_replays_from_the_plan_file(cold: PlanOutcome, tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    cold.plan(model=MODEL, clip=CLIP).save(path)
    plan = load_plan(path)
    assert plan.candidate_id == cold.winner.candidate.id
    assert plan.predicted.winner_s == cold.winner_q2_s
    slice_ = load_slice("v5e:2x2")
    order = DeviceOrder.from_physical_ids(
        plan.physical_ids, mesh_shape=plan.mesh_shape, slice_=slice_
    )
    graph = graph_from_text(cold.winner.compile.hlo_text)
    launch = slice_.chip.compute.program_launch_s
    assert replay(graph, slice_, order).step_time_s + launch == pytest.approx(
        plan.predicted.winner_s
    )
    mesh = plan.mesh(topology_devices(load_slice("v5e:2x2")))
    assert mesh.axis_names == plan.mesh_axis_names
    for pos, dev in enumerate(mesh.devices.flat):
        assert tuple(dev.coords[:2]) == plan.coords[pos]


def test_warm_run_is_byte_identical_and_uses_the_cache(
    cold: PlanOutcome, warm: PlanOutcome
) -> None:
    assert _plan_json(cold) == _plan_json(warm)
    assert all(c.compile.cache_hit for c in warm.scored)
    assert all(e.nodes == () for e in warm.stage1.kept)  # served from the Stage-1 cache
    # The placement search is read back whole: the same scores, marked cached.
    assert warm.search is not None and warm.search.cached
    assert outcome_summary(warm)["search"]["cached"] is True
    assert [c.placements for c in warm.scored] == [c.placements for c in cold.scored]
    assert [(c.proven_worse, c.open, c.bound_s) for c in warm.scored] == [
        (c.proven_worse, c.open, c.bound_s) for c in cold.scored
    ]


def test_report_labels_latencies_as_simulated(cold: PlanOutcome) -> None:
    text = render_report(cold)
    assert "simulated" in text
    assert cold.winner.candidate.id in text
    for b in cold.baselines:
        assert b.name in text


def test_a_model_with_experts_reports_each_experts_steps(cold: PlanOutcome) -> None:
    # Wan 2.2 A14B's schedule on the tiny model: the experts are arguments of the one
    # compiled step, so the outcome's (sharding, placement) serves both; the summary
    # and the report say so, with each expert's steps (26 + 14 of 40, wan_t2v_A14B.py).
    moe = replace(
        WAN_CONFIGS["wan-tiny"], name="moe-tiny", experts=WAN_CONFIGS["wan2.2-a14b"].experts
    )
    outcome = replace(cold, workload=wan_workload("moe-tiny", CLIP, config=moe))
    summary = outcome_summary(outcome)
    step = cold.winner_q2_s
    assert summary["experts"] == [
        {"name": "high_noise", "steps": 26, "step_s": step},
        {"name": "low_noise", "steps": 14, "step_s": step},
    ]
    assert summary["experts_share_plan"] is True
    assert summary["denoise_s"] == pytest.approx(40 * step)
    text = render_report(outcome)
    assert "experts: high_noise 26 steps, low_noise 14 steps" in text
    assert f"denoising 40 steps = {40 * step:.2f} s" in text
    # A model without experts has none of these fields.
    assert not {"experts", "experts_share_plan", "denoise_s"} & set(outcome_summary(cold))
    assert "experts:" not in render_report(cold)


def _estimate(cid: str, q1: float) -> Stage1Estimate:
    return Stage1Estimate(cid, q1, q1, 0.0, 0.0, (), 1, ())


def test_exhaustive_check_recall_and_spearman(cold: PlanOutcome) -> None:
    # Reuse real scores with made-up Q1 values: recall follows the Q1 order.
    scored: list[CandidateScores] = list(cold.scored)
    by_q2 = sorted(scored, key=lambda c: (c.best.q2_s, c.candidate.id))
    ids = [c.candidate.id for c in by_q2]
    agree = rank_stage1([_estimate(c, i) for i, c in enumerate(ids)], k=2, hbm_bytes=10)
    check = exhaustive_check(agree, scored)
    assert check.winner == ids[0] and check.winner_q1_rank == 1
    assert check.top1_hit and check.kept_hit
    assert check.num_compared == len(ids)
    reverse = rank_stage1([_estimate(c, -i) for i, c in enumerate(ids)], k=1, hbm_bytes=10)
    miss = exhaustive_check(reverse, scored)
    assert not miss.top1_hit and not miss.kept_hit
    assert miss.winner_q1_rank == len(ids)
    # kept_hit asks about what Stage 1 handed over, not only its top-K.
    assert exhaustive_check(reverse, scored, picks=(ids[-1], ids[0])).kept_hit
    distinct_q2 = len({c.best.q2_s for c in scored}) == len(scored)
    if distinct_q2:
        assert check.spearman_q1_q2 == pytest.approx(1.0)
        assert miss.spearman_q1_q2 == pytest.approx(-1.0)


def test_json_summary_lists_every_candidate(cold: PlanOutcome) -> None:
    """``aoizora plan --json``'s ``candidates`` and ``exhaustive`` (names scripts read),
    checked against the outcome they summarise."""
    check = exhaustive_check(cold.stage1, cold.scored, picks=cold.stage1_picks)
    summary = json.loads(json.dumps(outcome_summary(replace(cold, exhaustive=check))))
    rows = summary["candidates"]
    assert [r["id"] for r in rows] == list(cold.legal_ids)
    assert all(
        set(r) - {"memory"}
        == {
            "id",
            "q1_s",
            "stage1_kept",
            "compiled",
            "best_q2_s",
            "placements",
            "memory_bytes_per_chip",
            "splash_blocks",
        }
        and ("memory" in r) == r["compiled"]
        for r in rows
    )
    # the splash tiles each candidate runs: those its id ends in, else maxdiffusion's 512s
    # (wan-tiny at 256x256x5 has 512 tokens: no longer tile fits a call)
    for r in rows:
        suffix = r["id"].rsplit("/splash", 1)[1] if "/splash" in r["id"] else "512x512x512"
        tiles = tuple(int(b) for b in suffix.split("x"))
        if r["q1_s"] is not None:
            blocks = r["splash_blocks"]
            assert (blocks["block_q"], blocks["block_kv"], blocks["block_kv_compute"]) == tiles
    kept = [r["id"] for r in rows if r["stage1_kept"]]
    assert sorted(kept) == sorted(cold.stage1_picks) and len(kept) >= 1
    for r in rows:
        assert (r["best_q2_s"] is not None) == (r["placements"] > 0)
        assert r["best_q2_s"] is None or r["compiled"]
    # Stage 1's picks are the best by Q1 among the candidates it scored.
    worst_kept = max(r["q1_s"] for r in rows if r["stage1_kept"])
    weak = {e.candidate_id for e in cold.stage1.dropped_weak}  # feasible, not kept
    dropped = [r["q1_s"] for r in rows if r["id"] in weak]
    assert all(q >= worst_kept for q in dropped)
    assert summary["exhaustive"] == {
        "winner": check.winner,
        "winner_q1_rank": check.winner_q1_rank,
        "spearman_q1_q2": check.spearman_q1_q2,
        "top1_hit": check.top1_hit,
        "kept_hit": check.kept_hit,
    }
    best = min((r for r in rows if r["best_q2_s"] is not None), key=lambda r: r["best_q2_s"])
    assert check.winner == best["id"]
    assert "exhaustive" not in outcome_summary(cold)  # only with --exhaustive


def test_report_dir_pictures_and_traces(cold: PlanOutcome, tmp_path: Path) -> None:
    written = write_report_dir(cold, tmp_path / "report")
    names = sorted(p.name for p in written)
    assert names == sorted(
        ["link_heatmap.png", "ranking.png", "summary.json", "trace.json", "trace_step.json"]
    )
    for png in ("link_heatmap.png", "ranking.png"):
        data = (tmp_path / "report" / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    # The traces hold one complete event per simulated flow/compute of their region.
    graph = graph_from_text(cold.winner.compile.hlo_text)
    run = replay(graph, cold.slice_, cold.winner_placement.order)
    busiest = busiest_region(run.region_sims, tuple(r.count for r in graph.regions))
    trace = json.loads((tmp_path / "report" / "trace.json").read_text())
    names_in_trace = {e["name"] for e in trace["traceEvents"] if e.get("ph") == "X"}
    sim = run.region_sims[busiest]
    assert {f.id for f in sim.flows} <= names_in_trace
    totals = [
        r.count * sum(link.bytes_carried for link in s.links)
        for r, s in zip(graph.regions, run.region_sims, strict=True)
    ]
    assert totals[busiest] == max(totals)
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["winner"]["q2_s"] == cold.winner_q2_s


def _cli(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, AOIZORA_CACHE_DIR=str(cache))
    return subprocess.run(
        [sys.executable, "-m", "aoizora", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )


def test_cli_plan_on_v5e_2x4(tmp_path: Path, cache_dir: Path) -> None:
    out = tmp_path / "plan.json"
    proc = _cli(
        "plan", "--model", MODEL, "--slice", "v5e:2x4", "--resolution", "256x256",
        "--frames", "5", "--top-k", "2", "--out", str(out), "--json", "--no-clip",
        cache=cache_dir,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout)
    assert summary["slice"] == "v5e:2x4"
    assert "[compile" in proc.stderr  # progress during compiles
    plan = load_plan(out)
    assert "clip_s" not in summary and plan.vae is None and plan.latency is None  # --no-clip
    assert plan.candidate_id == summary["winner"]["candidate"]
    assert plan.predicted.winner_s == summary["winner"]["q2_s"]
    assert len(plan.physical_ids) == 8 and sorted(plan.physical_ids) == list(range(8))
    for b in summary["baselines"]:
        assert b["q2_s"] >= summary["winner"]["q2_s"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--slice", "v5e:3x3x3"], "v5e"),
        (["--slice", "v5e:2x2", "--top-k", "0"], "--top-k"),
        (["--slice", "v5e:2x2", "--resolution", "100x100"], "100x100"),
        (["--slice", "v5e:2x2", "--frames", "6"], "frames"),
    ],
)
def test_cli_plan_bad_input_is_one_line_exit_2(
    args: list[str], needle: str, tmp_path: Path
) -> None:
    proc = _cli("plan", "--model", MODEL, *args, "--out", str(tmp_path / "p.json"), cache=tmp_path)
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("aoizora plan: error:")]
    assert len(lines) == 1 and needle in lines[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
