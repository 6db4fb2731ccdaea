"""The program zoo (issue 56): 235 programs of five families timed on a TPU v5e chip, split
once by a seed into a fit half and a held-out half (validation/README.md, "The program zoo").

These tests hold the split (and that no rule reads the held-out rows), the rules the zoo
brought (a row window runs XLA's naive emitter where libtpu's compiled kernel has no cycle
estimate; a splash call over heads under 128 lanes costs ``narrow_head_factor`` more; a
reduction kernel streams its input at the read rate, as a matmul its operand),
and the compute model's error per family on the held-out half: each program as the chip ran
it (its HLO) priced op by op against its profile's device time."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path

import pytest

from aoizora.hlo.layouts import naive_window, sublane_reduce_fill, vreg_fill
from aoizora.hlo.text import Computation, Instruction
from aoizora.studies.explain import Explanation, instructions_by_name, op_works
from aoizora.studies.zoo import (
    ZooRow,
    explain_row,
    family_report,
    fit_compiler_cycle_s,
    fit_lane_transpose_s,
    fit_narrow_head_factor,
    halves,
    ran_program,
    read_rows,
)
from aoizora.zoo import catalog, program, split
from sim.compute import ComputeModel, Work, compute_model_of
from sim.topology import load_slice
from tests.aoizora.compute.profiled import window_fusions

V5E = Path(__file__).resolve().parents[3] / "validation" / "v5e"
ZOO = V5E / "zoo"
PROGRAMS = ZOO / "programs"
CHIP = load_slice("v5e:1x1").chip
ROWS = read_rows(ZOO / "rows.jsonl")
FIT, HELD = halves(ROWS)
# The second draw (p235-p394), timed after every rule of the first was chosen; split once
# by the same seed into halves of its own
DRAW2 = ZOO / "draw2"
ROWS2 = read_rows(DRAW2 / "rows.jsonl")
FIT2, HELD2 = halves(ROWS2)
# The third draw: the zoo's next 80 convolutional programs (p396-p807), timed on the chip
# before any rule for convolutions was chosen on them (validation/README.md, section 20).
ROWS3 = read_rows(ZOO / "draw3" / "rows.jsonl")
# The fourth draw: every program p808-p967, timed after every rule above was chosen and
# before any was chosen on it.
ROWS4 = read_rows(ZOO / "draw4" / "rows.jsonl")
# The fifth draw: p968-p1047, timed after the lane transpose and sublane reduce rules were
# chosen (on the first four draws' fit halves).
ROWS5 = read_rows(ZOO / "draw5" / "rows.jsonl")
# The sixth draw: p1048-p1127, timed after the bare and fused matmul rates were chosen.
ROWS6 = read_rows(ZOO / "draw6" / "rows.jsonl")
# The seventh draw: p1128-p1207, timed after the compiler's cycle estimate was chosen for
# convolutions with a window of their own (on the first six draws' fit halves).
ROWS7 = read_rows(ZOO / "draw7" / "rows.jsonl")
# The eighth draw: p1208-p1287, timed after the same rule, its seventh draw seen.
ROWS8 = read_rows(ZOO / "draw8" / "rows.jsonl")


DRAWS = ((ROWS, PROGRAMS), (ROWS2, DRAW2 / "programs"), (ROWS3, ZOO / "draw3" / "programs"),
         (ROWS4, ZOO / "draw4" / "programs"), (ROWS5, ZOO / "draw5" / "programs"),
         (ROWS6, ZOO / "draw6" / "programs"), (ROWS7, ZOO / "draw7" / "programs"),
         (ROWS8, ZOO / "draw8" / "programs"))  # fmt: skip
HELD_ALL = [r for rows, _ in DRAWS for r in halves(rows)[1]]


MODEL = compute_model_of(CHIP)
MODEL_WITHOUT_TRANSPOSES = ComputeModel(
    CHIP.bf16_flops_per_s, CHIP.hbm_bandwidth_bytes_per_s,
    dataclasses.replace(CHIP.compute, lane_transpose_s_per_element=0.0),
)  # fmt: skip
MODEL_ALL_FUSED = ComputeModel(  # every matmul kernel at the fused rate (before the bare rule)
    CHIP.bf16_flops_per_s, CHIP.hbm_bandwidth_bytes_per_s,
    dataclasses.replace(CHIP.compute, bare_matmul_efficiency=0.0),
)  # fmt: skip


def _programs(program_id: str) -> Path:
    return next(p for rows, p in DRAWS for r in rows if r.id == program_id)


@cache
def _explained(program_id: str) -> Explanation:
    row, programs = next((r, p) for rows, p in DRAWS for r in rows if r.id == program_id)
    return explain_row(row, programs, CHIP)


def _device_errors(rows: list[ZooRow]) -> dict[str, float]:
    """Each row's priced device time as a figure against its measured time (so that
    :func:`family_report` gives the device-level relative error)."""
    out = {}
    for r in rows:
        e = _explained(r.id)
        out[r.id] = e.predicted_s / e.step_s * r.measured_s
    return out


def test_the_rows_are_the_programs_the_zoo_draws() -> None:
    assert len(ROWS) == 235 and [r.id for r in ROWS] == [f"p{i:03d}" for i in range(235)]
    for r in ROWS:
        drawn = program(int(r.id[1:]))
        assert r.family == drawn.family
        assert json.loads(json.dumps(dict(drawn.params))) == r.params  # lists for tuples
    assert catalog(240)[17] == program(17) and catalog(18)[17] == program(17)
    assert [r.id for r in ROWS2] == [f"p{i:03d}" for i in range(235, 395)]
    for r in ROWS2:
        assert r.family == program(int(r.id[1:])).family


def _digest(ids: Iterable[str]) -> str:
    """The first 16 hex digits of the SHA-256 of the sorted ids: a half's fingerprint."""
    return hashlib.sha256(",".join(sorted(ids)).encode()).hexdigest()[:16]


def test_the_split_is_made_once_by_its_seed() -> None:
    fit_ids, held_ids = {r.id for r in FIT}, {r.id for r in HELD}
    assert not fit_ids & held_ids and fit_ids | held_ids == {r.id for r in ROWS}
    assert len(fit_ids) - len(held_ids) in (0, 1)
    assert split(sorted(fit_ids | held_ids, reverse=True)) == split(sorted(fit_ids | held_ids))
    # changing the seed or the rows changes the halves
    assert _digest(fit_ids) == "5369ddea34694170"
    for family in ("dit", "decoder", "mlp", "conv", "hybrid"):
        assert any(r.family == family for r in FIT) and any(r.family == family for r in HELD)
    fit2 = {r.id for r in FIT2}
    assert len(fit2) == len(ROWS2) - len(fit2) == 80 and not fit2 & fit_ids
    assert _digest(fit2) == "a2ad4b1cd87781bd"
    assert {r.family for r in ROWS3} == {"conv"}
    later = ((ROWS3, 40, "6909d6ab82f143eb"), (ROWS4, 80, "208c583adc1a14b5"),
             (ROWS5, 40, "721efa6d6f437951"), (ROWS6, 40, "df6d9975edbd9172"),
             (ROWS7, 40, "a02fc69705347a62"), (ROWS8, 40, "6f220c640e6e79f7"))  # fmt: skip
    for rows, size, expected in later:
        fit_n, held_n = halves(rows)
        assert len(fit_n) == len(held_n) == size
        assert _digest(r.id for r in fit_n) == expected


def test_the_third_draw_is_the_zoos_next_80_convolutional_programs() -> None:
    convs = [i for i in range(395, 808) if program(i).family == "conv"]
    assert [r.id for r in ROWS3] == [f"p{i:03d}" for i in convs] and len(convs) == 80
    for r in ROWS3:
        assert json.loads(json.dumps(dict(program(int(r.id[1:])).params))) == r.params


@pytest.mark.parametrize(
    ("rows", "first", "stop"),
    [
        (ROWS4, 808, 968),
        (ROWS5, 968, 1048),
        (ROWS6, 1048, 1128),
        (ROWS7, 1128, 1208),
        (ROWS8, 1208, 1288),
    ],
)
def test_the_fourth_to_eighth_draws_are_every_program_in_their_range(
    rows: list[ZooRow], first: int, stop: int
) -> None:
    assert sorted(r.id for r in rows) == sorted(f"p{i:03d}" for i in range(first, stop))
    assert {r.family for r in rows} == {"dit", "decoder", "mlp", "conv", "hybrid"}
    for r in rows:
        assert json.loads(json.dumps(dict(program(int(r.id[1:])).params))) == r.params


def test_the_narrow_head_factor_is_fitted_on_the_fit_half_only() -> None:
    shipped = CHIP.compute.splash_kernel
    assert shipped is not None
    assert fit_narrow_head_factor(FIT, PROGRAMS, CHIP) == shipped.narrow_head_factor == 1.219
    # the held-out half alone would have given another value: the shipped one is not it
    assert fit_narrow_head_factor(HELD, PROGRAMS, CHIP) != shipped.narrow_head_factor


def test_the_lane_transpose_rate_is_fitted_on_the_fit_halves_only() -> None:
    shipped = CHIP.compute.lane_transpose_s_per_element
    fit = [(r, p) for rows, p in DRAWS[:4] for r in halves(rows)[0]]  # drawn before it
    assert fit_lane_transpose_s(fit) == shipped == 3.861e-12


def test_the_compilers_cycle_is_fitted_on_the_fit_halves_only() -> None:
    """``compiler_cycle_s`` (docs/simulator.md, "Convolutions with a window of their own") is the
    closed form over the fit halves of the six draws timed before it was chosen; their
    held-out halves alone give 6.374e-10 s, a 0.1 % different value."""
    shipped = CHIP.compute.compiler_cycle_s
    fit = [(r, p) for rows, p in DRAWS[:6] for r in halves(rows)[0]]
    assert fit_compiler_cycle_s(fit, CHIP) == shipped == 6.367e-10
    held = fit_compiler_cycle_s([(r, p) for rows, p in DRAWS[:6] for r in halves(rows)[1]], CHIP)
    assert held != shipped and held == pytest.approx(shipped, rel=0.01)


def _lane_transposes(rows: list[ZooRow]) -> list[tuple[float, float, float]]:
    """(measured, priced, priced without the lane transpose rate) of every relayout in VMEM
    that moves a dimension narrower than 128 onto or off the lanes, of 2 us or more an
    execution, in ``rows``' programs as they ran."""
    out = []
    for r in rows:
        programs = _programs(r.id)
        module, profile = ran_program(programs, r.id)
        works = op_works(module)
        for op in profile.ops:
            work, count = works.get(op.name, (None, 0.0))
            if work is None or not work.lane_transpose_elements or op.total_s < 2e-6 * op.events:
                continue
            measured = op.per_step_s
            priced = [m.time_s(work) * count for m in (MODEL, MODEL_WITHOUT_TRANSPOSES)]
            out.append((measured, *priced))
    return out


def test_held_out_lane_transposes_are_priced_by_their_padded_elements() -> None:
    """The held-out convs' and hybrids' lane-moving relayouts in VMEM (391): priced over
    measured, the median 0.99 and the middle half 0.60-1.22, all of them 0.87 of their
    time; by their bytes alone (the model before the rule) a median 0.49 and 0.50 of their
    time (validation/README.md, section 20)."""
    found = _lane_transposes([r for r in HELD_ALL if r.family in ("conv", "hybrid")])
    assert len(found) >= 300
    now = sorted(p / m for m, p, _ in found)
    before = sorted(b / m for m, _, b in found)
    n = len(now)
    assert 0.9 <= now[n // 2] <= 1.1, now[n // 2]
    assert 0.55 <= now[n // 4] and now[3 * n // 4] <= 1.3, (now[n // 4], now[3 * n // 4])
    measured = sum(m for m, _, _ in found)
    assert 0.8 <= sum(p for _, p, _ in found) / measured <= 1.0
    assert before[n // 2] < 0.6 and sum(b for _, _, b in found) / measured < 0.6  # the rule's


def test_held_out_narrow_head_splash_kernels_are_priced_within_6_percent() -> None:
    """Priced over measured: 0.977-1.060 at the fit (p192, 4,352 tokens: +6.0 %; 1.15-1.25
    measured over priced before the factor)."""
    narrow = [
        r for r in HELD
        if r.family == "dit" and r.params["attention"] == "splash" and r.params["head_dim"] < 128
    ]  # fmt: skip
    assert len(narrow) == 4
    for r in narrow:
        ops = [o for o in _explained(r.id).rows if o.category == "attention"]
        ratio = sum(o.predicted_s or 0.0 for o in ops) / sum(o.measured_s for o in ops)
        assert abs(ratio - 1.0) < 0.061, (r.id, ratio)


def _window_kernels() -> list[tuple[str, bool, float, float]]:
    """(file, naive by its backend config, measured, priced seconds) of every profiled
    fusion with a whole-row window in the repository's v5e profiles and the zoo."""
    model = compute_model_of(CHIP)
    out = []
    files = [*sorted(V5E.glob("*/profiles/*.ops.json.gz")), *sorted(PROGRAMS.glob("*.ops.json.gz")),
             *sorted((DRAW2 / "programs").glob("*.ops.json.gz"))]  # fmt: skip
    for ops in files:
        for instr, op, work in window_fusions(ops):
            row = max(n for n, _ in work.row_windows)
            naive = naive_window(instr.attrs.get("backend_config", ""), row)
            if naive is not None:
                out.append((ops.name, naive, op.per_step_s, model.time_s(work) * op.count_per_step))
    return out


def test_a_row_window_is_slow_exactly_where_its_kernel_window_does_not_hold_the_row() -> None:
    kernels = _window_kernels()
    naive = [k for k in kernels if k[1]]
    assert len(naive) >= 22 and len(kernels) - len(naive) >= 90
    for name, _, measured, priced in naive:  # rows of 5,632 to 8,192: 0.2-0.8 s a step
        assert abs(priced / measured - 1.0) < 0.10, (name, measured, priced)
    # every kernel whose window holds its row runs at the rate of its bytes (the model's
    # price without the naive emitter): the second draw's p394 among them, rows of 5,376
    # with no cycle estimate, priced 12.6x its time when the missing estimate said naive
    for name, _, measured, priced in (k for k in kernels if not k[1]):
        assert priced < 1.5 * measured, (name, measured, priced)
    e = _explained("p394")
    assert abs(e.predicted_s / e.step_s - 1.0) < 0.03, e.predicted_s / e.step_s
    # the zoo's four DiTs whose 5,632-5,888-token rows ran the naive emitter (below the
    # 6,144 tokens the row length rule put it at): whole programs within 5 %
    for pid in ("p147", "p177", "p194", "p209"):
        e = _explained(pid)
        assert abs(e.predicted_s / e.step_s - 1.0) < 0.05, pid


def _reduction_ratios(rows: list[ZooRow], model: ComputeModel) -> list[float]:
    """Measured over priced time of every kernel of ``rows`` that reduces what it reads
    from HBM (reads beyond its writes at least half its bytes, no matmul) from 8 MB up."""
    ratios = []
    for row in rows:
        module, profile = ran_program(PROGRAMS, row.id)
        works = op_works(module)
        for op in profile.ops:
            work = works.get(op.name, (None, 0.0))[0]
            if work is None or work.matmuls or work.attention or work.hbm_bytes < 8e6:
                continue
            if work.hbm_read_excess_bytes >= work.hbm_bytes / 2:
                ratios.append(op.per_step_s / op.count_per_step / model.time_s(work))
    return ratios


@pytest.mark.parametrize("half", ["fit", "held"])
def test_reduction_kernels_stream_at_the_read_rate(half: str) -> None:
    """A kernel that reduces what it reads (a softmax's sums, a norm's statistics) streams
    its reads beyond its writes at ``hbm_read_efficiency``, as a matmul its operand. Chosen
    on the fit half: its 163 such kernels took a median 0.90 of their price at the
    read-and-write rate (40 % of them within 10 %), 1.00 at the read rate (87 %); the
    held-out half's 147: 0.89 (34 %) before, 0.99 (86 %) after."""
    rows = FIT if half == "fit" else HELD
    ratios = sorted(_reduction_ratios(rows, CHIP.per_device().compute_model()))
    assert len(ratios) >= 100
    median = ratios[len(ratios) // 2]
    assert 0.97 <= median <= 1.03, median
    assert sum(0.9 <= r <= 1.1 for r in ratios) >= 0.7 * len(ratios)


# The held-out half, each program as it ran priced against its profile: the figures the
# zoo's report gives (validation/README.md, "The program zoo"), as regression gates. The
# hybrids' 3.36 -> 3.67 % with the small-tile reshape rule (every draw's held-out half
# 4.19 -> 3.99 %).
# With the bare rate and the cost per fused op (docs/simulator.md, "Bare and fused matmuls"):
# mlp 4.88 -> 2.64 %, hybrid 3.47 -> 3.69 %, all 3.74 -> 3.34 %. Convolutions with a window
# of their own at the geometric mean with the compiler's estimate: conv 6.53 -> 6.95 %, all 3.34 %.
HELD_MAPE = {"dit": 2.5, "decoder": 2.5, "hybrid": 4.0, "mlp": 3.0, "conv": 7.2, "all": 3.5}


@pytest.mark.parametrize("family", sorted(HELD_MAPE))
def test_held_out_half_per_family(family: str) -> None:
    report = {f.family: f for f in family_report(HELD, _device_errors(HELD))}
    got = report[family]
    assert got.count >= 14
    assert got.mape * 100 <= HELD_MAPE[family], (family, got)


# Every draw's held-out half together (477 programs): the second and fourth to eighth
# draws were timed after the rules before them were chosen, the third (convs) before any rule
# for convolutions; no rule read them (validation/README.md, section 20).
# Bare matmul kernels at their own rate, then a cost per op fused into a matmul kernel, over
# the first five draws' 357: mlp 5.51 -> 4.37 -> 2.65 %, all 3.99 -> 3.81 -> 3.53 %; with the
# sixth's 40: conv 5.91, hybrid 3.83, decoder 2.57, mlp 2.57, dit 1.89, all 3.47 %.
# Convolutions with a window of their own beside the compiler's estimate: conv 5.22, decoder
# 2.37, dit 1.81, all 3.20 %; with the seventh's 40 (timed after that rule; 3.65 -> 3.80 %
# there): conv 5.39, decoder 2.60, dit 1.83, hybrid 3.62, mlp 2.57, all 3.25 % (3.48 % and
# conv 5.97 % without the rule); with the eighth's 40 (3.55 -> 3.31 % over the 477): conv
# 5.48, decoder 2.59, dit 2.01, hybrid 3.66, mlp 2.61 %.
EVERY_HELD_MAPE = {"dit": 2.1, "decoder": 3.0, "hybrid": 4.0, "mlp": 3.0, "conv": 5.6, "all": 3.4}


@pytest.mark.parametrize("family", sorted(EVERY_HELD_MAPE))
def test_every_draws_held_out_half_per_family(family: str) -> None:
    report = {f.family: f for f in family_report(HELD_ALL, _device_errors(HELD_ALL))}
    got = report[family]
    assert got.count >= 40
    assert got.mape * 100 <= EVERY_HELD_MAPE[family], (family, got)


@pytest.mark.parametrize(("rows", "percent", "beyond"), [(ROWS7, 3.41, 13), (ROWS8, 3.53, 17)])
def test_the_draws_timed_after_the_compilers_estimate_was_chosen(
    rows: list[ZooRow], percent: float, beyond: int
) -> None:
    """The seventh and eighth draws (80 programs each) were timed after the rule for
    convolutions with a window of their own was chosen: device level 3.23 -> 3.41 % and
    3.52 -> 3.53 % over all 80 (13 and 16 -> 17 beyond 6 %); their convs 6.51 -> 7.71 % and
    6.47 -> 7.04 % (their large-channel convolutions, where libtpu's estimate is 10-15 % under
    what they ran and ours within 5 %, are pulled down), their DiTs and hybrids better (the
    eighth's held-out half 4.32 -> 3.95 %). The rule does not carry to these draws' convs;
    the gates hold the figures they got."""
    errors = [abs(_explained(r.id).predicted_s / _explained(r.id).step_s - 1) for r in rows]
    assert len(errors) == 80
    assert sum(errors) / 80 * 100 <= percent + 0.05
    assert sum(e > 0.06 for e in errors) <= beyond


def _priced_ops(
    rows: list[ZooRow],
    pick: Callable[[Computation, Instruction, Work], int],
    models: tuple[ComputeModel, ...] = (MODEL,),
) -> list[tuple[float, ...]]:
    """(``pick``'s value, measured, priced by each of ``models``) of every op of 2 us or
    more an execution for which ``pick`` is not 0, in ``rows``' programs as they ran."""
    out = []
    for r in rows:
        programs = _programs(r.id)
        module, profile = ran_program(programs, r.id)
        where = instructions_by_name(module)
        works = op_works(module)
        for op in profile.ops:
            found, (work, count) = where.get(op.name), works.get(op.name, (None, 0.0))
            if found is None or work is None or op.total_s < 2e-6 * op.events:
                continue
            picked = pick(*found, work)
            if picked:
                out.append((picked, op.per_step_s, *(m.time_s(work) * count for m in models)))
    return out


def test_held_out_sublane_reductions_are_priced_by_their_vregs() -> None:
    """The held-out convs' and hybrids' reductions over the rows of f32 arrays in VMEM in
    tiles of 1-4 rows (a GroupNorm's statistics, 1-4 channels a group: 175), each vreg
    holding one tile: priced over measured a median 0.87 (at their bytes, the model before
    the rule, 0.1-0.45); the rule reads no measurement (validation/README.md, section 20)."""
    rows = [r for r in HELD_ALL if r.family in ("conv", "hybrid")]
    found = _priced_ops(rows, lambda c, i, _: sublane_reduce_fill(c, i) - 1)
    over = sorted(p / m for _, m, p in found)
    assert len(over) >= 150
    assert 0.8 <= over[len(over) // 2] <= 1.1, over[len(over) // 2]
    assert 0.75 <= over[len(over) // 10] and over[9 * len(over) // 10] <= 1.5


def _small_tile_move(comp: Computation, instr: Instruction, work: Work) -> int:
    if instr.opcode not in ("reshape", "broadcast"):
        return 0
    shapes = [comp.by_name[o].shape for o in instr.operands] + [instr.shape]
    return max(vreg_fill(s) for s in shapes) - 1


def test_held_out_small_tile_reshapes_are_priced_by_their_vregs() -> None:
    """The held-out convs' and hybrids' reshapes and broadcasts in VMEM into or out of f32
    tiles of 1-4 rows (a GroupNorm's ``[.., C] -> [.., 32, C/32]``; 532 of 2 us or more):
    priced over measured a median 1.11, the middle half 0.89-1.78 -- over, but by their
    bytes they were under, and the held-out half's MAPE fell with the rule
    (validation/README.md, section 20)."""
    rows = [r for r in HELD_ALL if r.family in ("conv", "hybrid")]
    found = sorted(p / m for _, m, p in _priced_ops(rows, _small_tile_move))
    assert len(found) >= 50
    assert 0.8 <= found[len(found) // 2] <= 1.25, found[len(found) // 2]


def _bare_mxu_bound(comp: Computation, instr: Instruction, work: Work) -> int:
    """1 for a bare matmul kernel (nothing fused but dtype conversions) bound by the MXU
    that ran 20 us or more: its time is its matmuls'."""
    del comp, instr
    return int(work.bare_matmul and MODEL.mxu_s(work) > max(MODEL.hbm_s(work), 20e-6))


def test_held_out_bare_matmul_kernels_run_at_the_bare_kernels_rate() -> None:
    """The held-out MLP stacks' and hybrids' MXU-bound matmul kernels with nothing fused
    but dtype conversions (``FusionSummary.vector_ops`` false; 99): measured over priced a
    median 1.00, the middle half 0.99-1.04, at ``bare_matmul_efficiency`` (fitted to
    standalone matmul kernels, never to the zoo); 0.93 at the fused projections' rate, the
    model before the rule (docs/simulator.md, "Bare and fused matmuls")."""
    rows = [r for r in HELD_ALL if r.family in ("mlp", "hybrid")]
    found = _priced_ops(rows, _bare_mxu_bound, (MODEL, MODEL_ALL_FUSED))
    assert len(found) >= 40
    now = sorted(m / p for _, m, p, _ in found)
    before = sorted(m / b for _, m, _, b in found)
    n = len(now)
    assert 0.97 <= now[n // 2] <= 1.03, now[n // 2]
    assert before[n // 2] <= 0.95, before[n // 2]


def test_the_sixth_draw_timed_after_the_matmul_rates_is_within_3_percent() -> None:
    """The sixth draw (80 programs, every family) was timed after ``bare_matmul_efficiency``
    and ``matmul_fused_op_cost`` were chosen, neither on it: device level, MAPE 2.71 % over
    all 80 (3.54 % before the two rules, 3.34 % with the bare rate alone), 10 beyond 6 %
    (16 before); its held-out half 2.89 % (validation/README.md, section 20). With the
    rule for convolutions with a window of their own (its cycle fitted on every draw's fit
    half, this one's too): 2.26 %, 9 beyond 6 %, its held-out half 2.09 %."""
    errors = {r.id: abs(_explained(r.id).predicted_s / _explained(r.id).step_s - 1) for r in ROWS6}
    assert len(errors) == 80
    assert sum(errors.values()) / len(errors) <= 0.025
    assert sum(e > 0.06 for e in errors.values()) <= 9
    held = [errors[r.id] for r in halves(ROWS6)[1]]
    assert sum(held) / len(held) <= 0.025
