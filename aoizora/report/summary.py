"""The plan report: a text summary of a :class:`~aoizora.planner.PlanOutcome`.

Every latency in it is *simulated* (Q2, the replay of the compiled collectives
in :mod:`sim`), and the report says so; Stage-1 numbers are labelled Q1.

    >>> format_ms(0.0123456)
    '12.35 ms'
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aoizora.plan.fields import compute_model_json
from aoizora.planner import PlanOutcome, SearchSummary
from aoizora.workloads.base import expert_steps, experts_summary
from sim.splash_tiles import BASE_TILE as DEFAULT_TILES
from sim.topology import Chip

__all__ = [
    "candidate_rows",
    "compute_model_json",
    "compute_model_line",
    "format_ms",
    "outcome_summary",
    "render_report",
    "search_line",
]


def compute_model_line(chip: Chip) -> str:
    """One line naming the compute model a report's times come from."""
    m = compute_model_json(chip)
    return (
        f"compute model: attention kernel {m['attention_kernel']} at "
        f"{dict(m['attention_efficiency'])[m['attention_kernel']]:.3g} of the padded MXU peak, "
        f"MXU tile {m['mxu_tile']}, matmul {m['matmul_efficiency']:.2g}, HBM "
        f"{m['hbm_efficiency']:.2g} of peak{_reads(m)}{_launch(m)} ({m['parameter_file']}; "
        "docs/simulator.md)"
    )


def _reads(m: dict[str, Any]) -> str:
    """' (a matmul's read stream 0.92)' where the generation measured that rate (v5e)."""
    rate = m.get("hbm_read_efficiency")
    return f" (a matmul's read stream {rate:.2g})" if rate else ""


def _launch(m: dict[str, Any]) -> str:
    """', kernel launch 0.71 us, call launch 0.79 ms' where the generation measured them
    (v5e): a kernel's fixed cost, and the host's launch of a call in every step figure."""
    kernel_s = m.get("kernel_overhead_s") or 0.0
    call_s = m.get("program_launch_s") or 0.0
    return (f", kernel launch {kernel_s * 1e6:.2g} us" if kernel_s > 0 else "") + (
        f", call launch {call_s * 1e3:.2g} ms" if call_s > 0 else ""
    )


def format_ms(seconds: float | None) -> str:
    """Seconds as milliseconds with two decimals (``'n/a'`` for None)."""
    return "n/a" if seconds is None else f"{seconds * 1e3:.2f} ms"


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]

    def line(cells: tuple[str, ...]) -> str:
        out = [
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(out).rstrip()

    return [line(header), line(tuple("-" * w for w in widths)), *(line(r) for r in rows)]


def _header(outcome: PlanOutcome) -> list[str]:
    wl, s = outcome.workload, outcome.slice_
    backend = outcome.winner.compile.backend
    timings = dict(outcome.timings_s)
    lines = [
        f"AoiZora plan: {wl.name} on {s.name} ({s.num_chips} chips"
        f"{f', {s.num_devices} devices' if s.num_devices != s.num_chips else ''}, "
        f"{s.chip.generation}, "
        f"compiled for {backend.upper()})",
    ]
    if backend != "tpu":
        lines.append("!! CPU FALLBACK: libtpu was not available; these are CPU-compiled programs")
    lines.append(compute_model_line(s.chip))
    extra = len(outcome.stage1_picks) > outcome.stage1.k
    lines.append(
        f"candidates: {outcome.num_legal} legal, {outcome.num_rejected} rejected; "
        f"Stage 1 kept {len(outcome.stage1_picks)} of {outcome.num_legal} "
        f"(top-{outcome.stage1.k} by Q1"
        f"{' plus the best of each attention kind' if extra else ''}; "
        f"{len(outcome.stage1.dropped_infeasible)} over HBM) in "
        f"{timings.get('stage1', 0.0):.1f} s; compiled {len(outcome.scored)} in "
        f"{timings.get('compile', 0.0):.1f} s; ranked "
        f"{sum(c.num_placements or len(c.placements) for c in outcome.scored)} (sharding, "
        f"placement) pairs in {timings.get('rank', 0.0):.1f} s: "
        f"{sum(len(c.placements) for c in outcome.scored)} simulated, "
        f"{sum(c.proven_worse for c in outcome.scored)} proven worse by a bound"
        + ("" if outcome.search is None else f", gap {outcome.search.gap:.2%}")
    )
    if outcome.search is not None:
        lines.append(search_line(outcome.search, outcome.winner_q2_s))
    return lines


_STOPPED = {
    "budget": "the work budget was spent (--search-budget; --search-gap 0 proves the best)",
    "deadline": "--search-seconds passed",
    "gap": "within the --search-gap asked for",
}


def search_line(search: SearchSummary, best_s: float) -> str:
    """How the placement search ended: the best found, the proven bound, the gap, why."""
    head = (
        f"placement search: best {format_ms(best_s)} (simulated), no placement faster than "
        f"{format_ms(min(search.bound_s, best_s))} (proven bound), gap {search.gap:.2%}"
    )
    if search.stopped_by is None:
        return head + "; the best placement is proven"
    spent = f"{search.work:,} work" + (f" of {search.budget:,}" if search.budget else "")
    return (
        f"{head}; {search.open} placements left open: {_STOPPED.get(search.stopped_by, '')} "
        f"({spent})"
    )


def _hbm_cell(outcome: PlanOutcome, candidate_id: str) -> str:
    """A compiled candidate's per-device HBM and its share of the budget, or n/a (a
    baseline priced from its sharding's tiled compile holds what that compile holds)."""
    by_id = {s.candidate.sharding_id: s for s in outcome.scored if s.candidate.splash_blocks}
    by_id |= {s.candidate.id: s for s in outcome.scored}
    scored = by_id.get(candidate_id)
    memory = None if scored is None else outcome.memory(scored.compile)
    if memory is None:
        return "n/a"
    return memory.cell()


def _winner_table(outcome: PlanOutcome) -> list[str]:
    win = outcome.winner_q2_s
    cid = outcome.winner.candidate.id
    rows: list[tuple[str, ...]] = [
        ("winner", cid, outcome.winner_placement.placement_id, format_ms(win), "1.00x",
         _hbm_cell(outcome, cid))
    ]  # fmt: skip
    for b in outcome.baselines:
        speedup = "n/a" if b.q2_s is None else f"{b.q2_s / win:.2f}x"
        rows.append((b.name, b.candidate_id, "default order", format_ms(b.q2_s), speedup,
                     _hbm_cell(outcome, b.candidate_id)))  # fmt: skip
    budget = outcome.slice_.chip.per_device().memory_budget_bytes
    head = ("", "sharding", "placement", "simulated step", "winner speedup",
            f"HBM per device (of {budget / 2**30:.2f} GiB)")  # fmt: skip
    lines = _table(head, rows)
    lines.append("")
    lines.append(
        f"placement spread of the winning sharding (simulated): best "
        f"{format_ms(outcome.winner.best.q2_s)}, worst {format_ms(outcome.winner.worst.q2_s)} "
        f"({outcome.placement_spread:.2f}x over {len(outcome.winner.placements)} simulated "
        "placements; the rest were proven no better than the winner"
        + ("" if not outcome.winner.open else " or left open under the search's bound")
        + ")"
    )
    if not outcome.winner.in_top_k:
        lines.append("note: the winner is a baseline's sharding, not one Stage 1 kept")
    return lines + _vmem_line(outcome)


def _vmem_line(outcome: PlanOutcome) -> list[str]:
    """The winner's scoped VMEM limit, where its splash tiles need more than the default."""
    cand = outcome.winner.candidate
    if cand.scoped_vmem_kib is None or cand.splash_blocks is None:
        return []
    tiles = "x".join(str(b) for b in cand.splash_blocks)
    return [
        f"scoped VMEM limit: {cand.scoped_vmem_kib} KiB ({cand.scoped_vmem_kib / 1024:g} MiB) "
        f"for the splash tiles {tiles}, above the compiler's default; the plan records it "
        "(scoped_vmem_kib), measure and validate compile with it, the maxdiffusion export "
        "passes --xla_tpu_scoped_vmem_limit_kib in LIBTPU_INIT_ARGS"
    ]


def _candidate_table(outcome: PlanOutcome) -> list[str]:
    q1 = {e.candidate_id: e.q1_s for e in (*outcome.stage1.kept, *outcome.stage1.dropped_weak)}
    rows: list[tuple[str, ...]] = []
    for c in sorted(outcome.scored, key=lambda c: (c.best.q2_s, c.candidate.id)):
        mem = c.compile.memory
        rows.append(
            (
                c.candidate.id,
                "yes" if c.in_top_k else "no",
                format_ms(q1.get(c.candidate.id)),
                f"{c.compile.compile_s:.1f} s",
                "n/a" if mem is None else f"{mem.total_bytes / 2**30:.2f} GiB",
                str(len(c.placements)),
                format_ms(c.best.q2_s),
                format_ms(c.worst.q2_s),
            )
        )
    header = ("compiled sharding", "Stage 1", "Q1", "compile", "HBM/device", "placements",
              "best Q2", "worst Q2")  # fmt: skip
    return _table(header, rows)


def _experts(outcome: PlanOutcome) -> list[str]:
    """A model with experts (Wan 2.2 A14B): what each takes and whether one plan serves all."""
    experts = expert_steps(outcome.workload)
    if not experts:
        return []
    step = outcome.winner_q2_s
    total = sum(n for _, n in experts)
    names = ", ".join(f"{name} {n} steps" for name, n in experts)
    return [
        "",
        f"experts: {names}; every expert is resident in HBM (an argument of the compiled "
        f"step, counted in HBM/device)",
        f"one (sharding, placement) serves every expert: yes -- each expert's step is this "
        f"compiled program with its weights as the first argument (identical shapes), "
        f"{format_ms(step)} each (simulated); denoising {total} steps = {total * step:.2f} s",
    ]


def render_report(outcome: PlanOutcome) -> str:
    """The human-readable summary printed by ``aoizora plan``."""
    lines = [*_header(outcome), "", *_winner_table(outcome), *_experts(outcome)]
    lines += ["", *_candidate_table(outcome)]
    for cid, reason in outcome.failed:
        lines.append(f"not ranked: {cid}: {reason}")
    if outcome.exhaustive is not None:
        ex = outcome.exhaustive
        rho = "n/a" if ex.spearman_q1_q2 is None else f"{ex.spearman_q1_q2:.3f}"
        lines += [
            "",
            f"exhaustive check over {ex.num_compared} compiled candidates: best "
            f"{ex.winner} (Q1's #{ex.winner_q1_rank}); Stage-1 top-1 recall {int(ex.top1_hit)}, "
            f"kept-set recall {int(ex.kept_hit)}; Spearman rho(Q1, best Q2) = {rho}",
        ]
    for w in outcome.warnings:
        lines.append(f"warning: {w}")
    return "\n".join(lines) + "\n"


def candidate_rows(outcome: PlanOutcome) -> list[dict[str, Any]]:
    """``aoizora plan --json``'s ``candidates``: one object per legal candidate, in
    candidate order, with the names scripts read.

    ``q1_s`` is null when Stage 1 failed for it or found its arguments alone over HBM
    (not lowered, :mod:`aoizora.stage1.sweep`); ``stage1_kept`` says whether Stage 1
    handed it to Stage 2; ``compiled`` whether a compile produced its program;
    ``best_q2_s`` its best simulated step time (null unless compiled and within HBM);
    ``placements`` how many placements Stage 2 weighed for it (the placement family
    the search covered: simulated, proven worse or left open by a deadline);
    ``memory_bytes_per_chip`` Stage 1's per-device HBM estimate and, once compiled,
    ``memory`` the compiled program's (:mod:`aoizora.plan.memory`); ``splash_blocks`` the
    splash tiles Stage 1 planned for it (``block_q``, ``block_kv``, ``block_kv_compute``).
    """
    q1 = {e.candidate_id: e.q1_s for e in outcome.stage1.estimates}
    mem = {e.candidate_id: e.memory_bytes_per_chip for e in outcome.stage1.estimates}
    tiles = _tiles_by_id(outcome)
    picks = set(outcome.stage1_picks)
    compiled = set(outcome.compiled_ids)
    scored = {s.candidate.id: s for s in outcome.scored}
    rows = []
    for cid in outcome.legal_ids:
        s = scored.get(cid)
        rows.append(
            {
                "id": cid,
                "q1_s": q1.get(cid),
                "stage1_kept": cid in picks,
                "compiled": cid in compiled,
                "best_q2_s": s.best.q2_s if s is not None else None,
                "memory_bytes_per_chip": mem.get(cid),
                "splash_blocks": tiles.get(cid),
                **(_memory_json(outcome, s.compile) if s is not None else {}),
                "placements": (s.num_placements or len(s.placements)) if s is not None else 0,
            }
        )
    return rows


def _tiles_by_id(outcome: PlanOutcome) -> dict[str, dict[str, int]]:
    """Each scored candidate's splash tiles by maxdiffusion's names (the 512s where Stage 1
    planned none), for the candidates whose program calls the splash kernel."""
    names = ("block_q", "block_kv", "block_kv_compute")
    return {
        e.candidate_id: dict(zip(names, e.splash_blocks or DEFAULT_TILES, strict=True))
        for e in outcome.stage1.estimates
        if e.splash_calls
    }


def _memory_json(outcome: PlanOutcome, result: Any) -> dict[str, Any]:
    """``{"memory": {...}}`` (:mod:`aoizora.plan.memory`'s fields) of a compiled program."""
    memory = outcome.memory(result)
    return {} if memory is None else {"memory": memory.to_json()}


def outcome_summary(outcome: PlanOutcome) -> dict[str, Any]:
    """A JSON-ready summary of an outcome (no HLO text); its ``winner``'s
    ``scoped_vmem_kib`` is the VMEM limit (KiB) its splash tiles compile with (null: the
    compiler's default)."""
    return experts_summary(outcome.workload, outcome.winner_q2_s) | {
        "workload": outcome.workload.name,
        "slice": outcome.slice_.name,
        "winner": {
            "candidate": outcome.winner.candidate.id,
            "placement": outcome.winner_placement.placement_id,
            "q2_s": outcome.winner_q2_s,
            "splash_blocks": _tiles_by_id(outcome).get(outcome.winner.candidate.id),
            "scoped_vmem_kib": outcome.winner.candidate.scoped_vmem_kib,
            **_memory_json(outcome, outcome.winner.compile),
        },
        "baselines": [
            {"name": b.name, "candidate": b.candidate_id, "q2_s": b.q2_s, "note": b.note}
            for b in outcome.baselines
        ],
        "placement_spread": outcome.placement_spread,
        "timings_s": dict(outcome.timings_s),
        "compute_model": compute_model_json(outcome.slice_.chip),
        "search": None if outcome.search is None else outcome.search.to_json_dict(),
        "candidates": candidate_rows(outcome),
        **({"exhaustive": outcome.exhaustive.to_json_dict()} if outcome.exhaustive else {}),
    }
