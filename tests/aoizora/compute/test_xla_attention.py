"""XLA attention (einsums and an f32 softmax) priced op by op against the chip (issue 40):
six ``--workload`` steps profiled on a TPU v5e chip (validation/v5e/workloads/profiles).

XLA lowers the softmax's row max to a reduce-window over the whole row; counted as
window x elements it priced the softmax 2.4x too slow at 4,096 tokens, and its slow
emitter over rows of 8,192 (406 ps an element) was unknown to the model."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from aoizora.hlo.compute import CostModel, row_windows, window_taps
from aoizora.hlo.profile import load_profile, read_text_file
from aoizora.hlo.text import parse_module
from aoizora.studies.compute_fit import ProfiledStep, load_profiled_steps
from aoizora.studies.explain import explain, op_prices
from sim.compute import compute_model_of
from sim.topology import load_slice

PROFILES = Path(__file__).resolve().parents[3] / "validation" / "v5e" / "workloads" / "profiles"
V5E = load_slice("v5e:1x1")
# row id -> (the factory, the softmax fusion, the row length): examples/dit_block.py
SOFTMAX = {
    "m-7551dddcb4-winner": ("make_h128_s2048", "fusion.77", 2048),
    "m-6204a10677-winner": ("make_h128_s4096", "fusion.76", 4096),
    "m-9bdc7e7c87-winner": ("make_h128_s8192", "fusion.65", 8192),
    "m-37cc90e4d0-winner": ("make_h64_s4096", "fusion.72", 4096),
    "m-eb3712330e-winner": ("make_h64_s8192", "fusion.62", 8192),
    "m-730af86ce7-winner": ("make_h128_s5120", "fusion.65", 5120),
    "m-77b07cd127-winner": ("make_h128_s6144", "fusion.65", 6144),
    "m-62cdd5af28-winner": ("make_h64_s6144", "fusion.62", 6144),
    # test rows: planned and measured after the rates were fitted, never fitted
    "m-9e58a30983-winner": ("make_h64_s2048", "fusion.89", 2048),
    "m-f9c7e1c649-winner": ("make_h128_s1024", "fusion.80", 1024),
    "m-6a55dae7d5-winner": ("make_h128_s3072", "fusion.74", 3072),
    "m-00f6ff5dea-winner": ("make_h128_s4608", "fusion.69", 4608),
    "m-782293c1ee-winner": ("make_h64_s5120", "fusion.62", 5120),
    "m-f6e531e379-winner": ("make_h64_s7168", "fusion.62", 7168),
    "m-0a6f2b9676-winner": ("make_h64_s256", "fusion.93", 256),
    "m-fc514b8267-winner": ("make_h64_s1024", "fusion.86", 1024),
    "m-038654f860-winner": ("make_h128_s1024_b4", "fusion.83", 1024),
}
TEST_ROWS = frozenset(list(SOFTMAX)[-9:])


@pytest.fixture(scope="module")
def steps() -> dict[str, ProfiledStep]:
    return {s.name: s for s in load_profiled_steps(PROFILES)}


def test_every_workload_step_is_priced_within_10_percent(steps: dict[str, ProfiledStep]) -> None:
    """The compiled programs priced op by op against their profiles: 2,048 tokens +3.7 %,
    4,096 -0.1 % (12x128; -13.7 % before the stream rate) and +4.5 % (16x64; +10.3 % before
    its output projection's window joined the contraction, +8.6 % before the read rate),
    5,120 -0.0 % (-14.6 %), 6,144 +0.0 % and +0.1 %, 8,192 +0.1 % and +0.1 % (the four the
    slow emitter's rate and its growth were fitted to; +6.3/+6.4 and -5.6/-5.6 % at one rate),
    tiny_block -10.5 % (11 % allowed there; -9.0 % before its one kernel with a convolution
    window of its own, 18 us on the chip, was priced 30 -> 28 us beside the compiler's
    estimate: docs/simulator.md, "Convolutions with a window of their own"); the nine test
    rows +1.6, +2.9, +3.4, -0.6, -0.2, +2.4, +2.0, +1.2 and +1.8 % (MAPE 1.8 %; 4.4 % before
    the read rate)."""
    assert set(steps) == {*SOFTMAX, "m-2b4c26a776-winner"}
    errors = {}
    for name, step in steps.items():
        e = explain(step.profile, step.module, op_prices(step.module, V5E.chip))
        errors[name] = e.predicted_s / e.step_s - 1
        bound = 0.11 if name == "m-2b4c26a776-winner" else 0.10
        assert abs(errors[name]) < bound, (name, e.predicted_s, e.step_s)
    assert sum(abs(errors[n]) for n in TEST_ROWS) / len(TEST_ROWS) < 0.03


def test_every_workload_category_is_within_10_percent(steps: dict[str, ProfiledStep]) -> None:
    """Category by category (issue 40, item 4): every category of at least 1 % of the step
    but the async waits within 10 % in all 18 programs (12 of 18 before kernels in VMEM
    paid their own fixed cost and relayouts between 8-row tiles their own rate: element-wise
    +15..+20 % on four, the input's transpose +10..+27 % on four). The rates were fitted
    to five Wan steps, never to these. The async waits (1-3 % of two short steps) are a
    copy queued behind the cross-program prefetch (docs/simulator.md, "Async copies").
    The element-wise category of make_h128_s1024_b4 is -10.8 % (12 % allowed there): its
    two 12.6 MB reductions, priced at the read rate since the program zoo (+9 % before), no
    longer hide a variance in VMEM summed across lanes (8.9 us, priced 5.0 us): such
    reductions run 1.2-1.6x their on-chip price in the zoo and the Wan and VAE profiles
    alike, a rule not built yet (validation/README.md, section 20)."""
    for name, step in sorted(steps.items()):
        e = explain(step.profile, step.module, op_prices(step.module, V5E.chip))
        for c in e.categories():
            if c.category in ("async", "collectives") or max(c.measured_s, c.predicted_s) < (
                0.01 * e.step_s
            ):
                continue
            bound = 12.0 if c.category == "elementwise/reduce" else 10.0
            if (name, c.category) == ("m-2b4c26a776-winner", "matmul"):
                bound = 11.0  # -10.3 % (-8.8 before): the docstring of the step test above
            assert abs(c.error_percent) <= bound, (name, c.category, c.error_percent)


@pytest.mark.parametrize("row", sorted(SOFTMAX))
def test_the_value_product_reads_its_probabilities_at_the_read_rate(row: str) -> None:
    """The attention-value matmul reads the f32 probabilities once and writes a bf16 output
    an eighth or less their size: on the chip it streams them at 0.92-0.93 of the HBM peak,
    which ``hbm_read_efficiency`` (fitted to Wan steps' projections, never to these) prices
    within 3 %; at ``hbm_efficiency``, the rate of a pass that reads and writes alike, it
    came out 12-14 % slow."""
    module = parse_module(read_text_file(PROFILES / f"{row}.hlo.txt.gz"))
    costs = CostModel(module)
    model = compute_model_of(V5E.chip)
    works = {i.name: costs.instruction(module.entry, i) for i in module.entry.instructions
             if i.opcode == "fusion"}  # fmt: skip
    name, work = max(works.items(), key=lambda kv: kv[1].hbm_read_excess_bytes)
    assert work.matmuls and work.hbm_read_excess_bytes >= 0.85 * work.hbm_bytes
    assert model.hbm_s(work) > 1.3 * model.mxu_s(work)  # the reads bound it, not the MXU
    measured = load_profile(PROFILES / f"{row}.ops.json.gz").op(name).per_step_s
    assert model.time_s(work) == pytest.approx(measured, rel=0.03)
    mixed = compute_model_of(
        dataclasses.replace(
            V5E.chip, compute=dataclasses.replace(V5E.chip.compute, hbm_read_efficiency=0.0)
        )
    )
    assert mixed.time_s(work) / measured - 1 > 0.10


@pytest.mark.parametrize("row", sorted(SOFTMAX))
def test_the_softmax_row_max_is_one_reduce_and_slow_only_over_long_rows(row: str) -> None:
    _, fusion, length = SOFTMAX[row]
    module = parse_module(read_text_file(PROFILES / f"{row}.hlo.txt.gz"))
    instr = module.entry.by_name[fusion]
    work = CostModel(module).instruction(module.entry, instr)
    ((n, elements),) = work.row_windows
    assert n == length
    windows = [i for c in module.computations.values() for i in c.instructions
               if i.opcode == "reduce-window"]  # fmt: skip
    assert windows and all(window_taps(i) == 1 and row_windows(i) for i in windows)
    model = compute_model_of(V5E.chip)
    measured = load_profile(PROFILES / f"{row}.ops.json.gz").op(fusion).per_step_s
    slow = model.row_window_s(work)
    if length >= model.params.row_window_slow_from:
        p = model.params
        growth = (n / p.row_window_slow_from) ** p.row_window_tap_growth
        assert slow == pytest.approx(elements * (2 * n - 1) * p.row_window_tap_s * growth)
        # the tap's rate at 6,144 and its growth through 8,192 fitted to those four: each
        # within 0.1 %; 7,168, a test row, +2.4 % (one rate for every length: +6.7 % and
        # -5.9 % at 6,144 and 8,192, +2.2 % at 7,168)
        tolerance = 0.03 if row in TEST_ROWS else 0.001
        assert model.time_s(work) == pytest.approx(measured, rel=tolerance)
    else:
        # fused with the score matmul (256-3,072 tokens, 4,096 at 16x64): the matmul's
        # output bounds it, within 8 %; alone (4,096 at 12x128, 5,120): its rows streamed
        # from HBM at row_window_stream_s, the two it was fitted to within 1 %, the test
        # rows (4,608; 5,120 at 16x64) within 3 %
        alone = not work.matmuls
        assert slow == pytest.approx(elements * model.params.row_window_stream_s if alone else 0)
        tolerance = (0.03 if row in TEST_ROWS else 0.01) if alone else 0.08
        assert model.time_s(work) == pytest.approx(measured, rel=tolerance)
        taps = dataclasses.replace(work, other_flops=work.other_flops + elements * (2 * n - 2))
        if n >= 1024:  # 1.9x at 1,024 tokens, 2.4-7.7x from 2,048 (1.1x at 256)
            assert model.time_s(taps) / measured > 1.9
