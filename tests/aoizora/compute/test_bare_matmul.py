"""Bare and fused matmul kernels (docs/simulator.md, "Bare and fused matmuls"): a matmul
kernel with nothing fused but dtype conversions runs at ``bare_matmul_efficiency``, one with
a bias, norm or activation in it (or in a fusion nested in it) at ``matmul_efficiency``."""

from __future__ import annotations

from dataclasses import replace

import pytest

from aoizora.hlo.compute import CostModel
from aoizora.hlo.text import parse_module
from aoizora.studies.compute_fit import ProfiledStep
from aoizora.studies.explain import op_works
from sim.compute import Matmul, Work, compute_model_of
from sim.topology import load_chip

# One [512, 1024] @ [1024, 2048] kernel; {EPILOGUE} and {PROLOGUE} fill in what is fused.
_KERNEL = """HloModule m
%pro (x: f32[512,1024], s: f32[512,1024]) -> bf16[512,1024] {
  %x = f32[512,1024]{1,0} parameter(0)
  %s = f32[512,1024]{1,0} parameter(1)
  %y = f32[512,1024]{1,0} PROLOGUE
  ROOT %c = bf16[512,1024]{1,0} convert(%y)
}
%f (x: f32[512,1024], s: f32[512,1024], w: bf16[1024,2048], b: f32[512,2048]) -> bf16[512,2048] {
  %x = f32[512,1024]{1,0} parameter(0)
  %s = f32[512,1024]{1,0} parameter(1)
  %w = bf16[1024,2048]{1,0} parameter(2)
  %b = f32[512,2048]{1,0} parameter(3)
  %l = bf16[512,1024]{1,0} fusion(%x, %s), kind=kLoop, calls=%pro
  %d = f32[512,2048]{1,0} dot(%l, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %e = f32[512,2048]{1,0} EPILOGUE
  ROOT %o = bf16[512,2048]{1,0} convert(%e)
}
ENTRY %main ARGS -> bf16[512,2048] {
  %x = f32[512,1024]{1,0} parameter(0)
  %s = f32[512,1024]{1,0} parameter(1)
  %w = bf16[1024,2048]{1,0} parameter(2)
  %b = f32[512,2048]{1,0} parameter(3)
  ROOT %k = bf16[512,2048]{1,0} fusion(%x, %s, %w, %b), kind=kOutput, calls=%f
}""".replace("ARGS", "(x: f32[512,1024], s: f32[512,1024], w: bf16[1024,2048], b: f32[512,2048])")
_COPY_X, _SCALE_X = "copy(%x)", "multiply(%x, %s)"
_NO_EPILOGUE, _BIAS = "copy(%d)", "add(%d, %b)"


def _work(prologue: str, epilogue: str) -> Work:
    module = parse_module(_KERNEL.replace("PROLOGUE", prologue).replace("EPILOGUE", epilogue))
    return CostModel(module).fusion_work(module.entry.root)


@pytest.mark.parametrize(
    ("prologue", "epilogue", "bare"),
    [
        (_COPY_X, _NO_EPILOGUE, True),  # dtype conversions (and copies) only
        (_COPY_X, _BIAS, False),  # a bias added to the output
        (_SCALE_X, _NO_EPILOGUE, False),  # a scale in the nested operand fusion
        (_SCALE_X, _BIAS, False),
    ],
)
def test_a_matmul_kernel_is_bare_exactly_when_nothing_but_conversions_is_fused(
    prologue: str, epilogue: str, bare: bool
) -> None:
    work = _work(prologue, epilogue)
    assert work.matmuls == (Matmul(1, 512, 1024, 2048),)
    assert work.bare_matmul is bare


def test_a_bare_kernel_is_priced_at_the_bare_rate_and_a_fused_one_at_the_fused() -> None:
    """The MXU time of the same matmul at each rate: the padded FLOPs over the peak times
    each efficiency (v5e: 0.973 and 0.903)."""
    model = compute_model_of(load_chip("v5e"))
    p = model.params
    at_peak = 2.0 * 512 * 1024 * 2048 / model.peak_flops_per_s
    bare, fused = _work(_COPY_X, _NO_EPILOGUE), _work(_SCALE_X, _BIAS)
    assert model.mxu_s(bare) == pytest.approx(at_peak / p.bare_matmul_efficiency, rel=1e-12)
    assert model.mxu_s(fused) == pytest.approx(at_peak / p.matmul_efficiency, rel=1e-12)
    assert 0.9 < p.matmul_efficiency < p.bare_matmul_efficiency < 1.0
    # a kernel of several keeps the fused rate unless every one is bare
    assert not (bare + fused).bare_matmul and (bare + bare).bare_matmul
    # a generation that has not measured bare kernels prices them at its one rate
    v6e = compute_model_of(load_chip("v6e"))
    assert v6e.mxu_s(replace(bare, bare_matmul=False)) == v6e.mxu_s(bare)


def test_no_profiled_wan_step_or_decode_moves(v5e_steps: dict[str, ProfiledStep]) -> None:
    """Why the rule leaves the Wan figures alone: the steps' and decodes' MXU-bound matmul
    kernels all fuse a bias, a modulation or an activation; the few bare ones are small (a
    6240 x 384 x 384 kernel of 10 us). Each priced step moves by under 0.01 %."""
    chip = load_chip("v5e")
    model = compute_model_of(chip)
    fused = compute_model_of(replace(chip, compute=replace(chip.compute, bare_matmul_efficiency=0)))
    assert len(v5e_steps) >= 20
    for name, step in v5e_steps.items():
        works = op_works(step.module).values()
        now = sum(model.time_s(w) * n for w, n in works)
        before = sum(fused.time_s(w) * n for w, n in works)
        assert now <= before and now / before > 0.9999, (name, now / before)
