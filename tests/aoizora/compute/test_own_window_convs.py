"""Convolutions with a window of their own (docs/simulator.md, "Convolutions with a window of
their own"): a compiled kernel whose convolution's taps are a window over its input carries
libtpu's own cycle estimate (``Work.compiler_cycles``), and a generation that measured the
estimate's cycle (``compiler_cycle_s``) prices it at the geometric mean of both (its fixed
cost apart); TPU's
windows standing for a batch, dots and programs before layout keep our price alone."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from aoizora.hlo.compute import CostModel
from aoizora.hlo.fused import has_own_window
from aoizora.hlo.text import parse_module
from aoizora.studies.compute_fit import ProfiledStep
from aoizora.studies.explain import op_works
from sim.compute import Work, compute_model_of
from sim.topology import load_chip

_CONV = """HloModule m
ENTRY %e (x: bf16[1,34,34,128], w: bf16[3,3,128,64]) -> bf16[1,32,32,64] {
  %x = bf16[1,34,34,128]{3,2,1,0} parameter(0)
  %w = bf16[3,3,128,64]{3,2,1,0} parameter(1)
  ROOT %c = bf16[1,32,32,64]{3,2,1,0} convolution(%x, %w), window={WINDOW}, LABELS, CONFIG
}""".replace("LABELS", "dim_labels=b01f_01io->b01f")
_CONFIG = 'backend_config={"emitter":"EmitAllBatchInSublanes","estimated_cycles":"%d"}'


def _conv(window: str, cycles: int) -> Work:
    module = parse_module(_CONV.replace("WINDOW", window).replace("CONFIG", _CONFIG % cycles))
    return CostModel(module).instruction(module.entry, module.entry.root)


def test_a_3x3_convolution_carries_the_compilers_estimate_and_a_batch_window_not() -> None:
    assert _conv("size=3x3", 20480).compiler_cycles == 20480.0
    assert _conv("size=3x3 pad=1_1x1_1", 20480).compiler_cycles == 20480.0
    # no estimate (INT64_MAX), a window standing for a batch, a dilated input, one tap
    assert _conv("size=3x3", 2**63 - 1).compiler_cycles == 0.0
    assert _conv("size=3x3 pad=2_2x2_2", 20480).compiler_cycles == 0.0
    assert _conv("size=3x3 lhs_dilate=2x2", 20480).compiler_cycles == 0.0
    assert _conv("size=1x1", 20480).compiler_cycles == 0.0


def test_its_price_is_the_geometric_mean_of_ours_and_the_compilers() -> None:
    chip = load_chip("v5e")
    model = compute_model_of(chip)
    alone = compute_model_of(replace(chip, compute=replace(chip.compute, compiler_cycle_s=0)))
    s = model.params.compiler_cycle_s
    assert 6.0e-10 < s < 6.8e-10  # the estimate's cycle: 1/1.47 .. 1/1.67 GHz
    for cycles in (2_000, 20_480, 200_000):
        work = _conv("size=3x3", cycles)
        fixed = model.overhead_s(work)
        ours, theirs = alone.time_s(work) - fixed, cycles * s
        price = model.time_s(work) - fixed
        assert fixed == model.params.kernel_overhead_s > 0
        assert price == pytest.approx(math.sqrt(ours * theirs), rel=1e-12)
        assert min(ours, theirs) <= price <= max(ours, theirs)
    # a generation that has not measured the cycle prices it as before
    v6e = load_chip("v6e")
    assert v6e.compute.compiler_cycle_s == 0
    work = _conv("size=3x3", 20480)
    assert compute_model_of(v6e).time_s(work) == compute_model_of(v6e).time_s(
        replace(work, compiler_cycles=0.0)
    )
    # kernels added up keep the estimate only where each has one
    assert (work + work).compiler_cycles == 40960 and (work + Work()).compiler_cycles == 0


def test_the_decodes_convolutions_have_windows_of_their_own_and_the_steps_move_little(
    v5e_steps: dict[str, ProfiledStep],
) -> None:
    """The decodes' 3x3 and 3x3x3 convolutions have windows of their own; the DiT steps'
    only such kernels are their patch embeddings (a 1x2x2 window), a few microseconds of a
    step: the steps move by under 0.1 %."""
    chip = load_chip("v5e")
    model = compute_model_of(chip)
    alone = compute_model_of(replace(chip, compute=replace(chip.compute, compiler_cycle_s=0)))
    assert len(v5e_steps) >= 20
    for name, step in v5e_steps.items():
        works = list(op_works(step.module).values())
        priced = [w for w, _ in works if w.compiler_cycles]
        convs = [
            i for c in step.module.computations.values() for i in c.instructions
            if has_own_window(i)
        ]  # fmt: skip
        assert bool(priced) == bool(convs), name
        ratio = sum(model.time_s(w) * n for w, n in works) / sum(
            alone.time_s(w) * n for w, n in works
        )
        if name.endswith("-vae"):
            assert len(priced) >= 20, name
        else:
            assert abs(ratio - 1.0) < 0.001, (name, ratio)
