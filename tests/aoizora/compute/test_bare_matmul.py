"""Bare and fused matmul kernels (docs/simulator.md, "Bare and fused matmuls"): a matmul
kernel with nothing fused but dtype conversions runs at ``bare_matmul_efficiency``; each
element-wise op fused into one (or into a fusion nested in it) adds
``matmul_fused_op_cost`` to the inverse of that; a convolution with spatial taps, and a
program before layout, keep ``matmul_efficiency``."""

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
    ("prologue", "epilogue", "ops"),
    [
        (_COPY_X, _NO_EPILOGUE, 0),  # dtype conversions (and copies) only
        (_COPY_X, _BIAS, 1),  # a bias added to the output
        (_SCALE_X, _NO_EPILOGUE, 1),  # a scale in the nested operand fusion
        (_SCALE_X, _BIAS, 2),
        ("tanh(%x)", "maximum(%d, %b)", 2),
    ],
)
def test_a_matmul_kernel_counts_the_element_wise_ops_fused_into_it(
    prologue: str, epilogue: str, ops: int
) -> None:
    work = _work(prologue, epilogue)
    assert work.matmuls == (Matmul(1, 512, 1024, 2048),)
    assert work.bare_matmul is (ops == 0) and work.fused_vector_ops == ops


def test_a_convolution_with_spatial_taps_keeps_the_fused_rate() -> None:
    """A 3x3 convolution's kernel (its own emitters) is not counted: it stays at
    ``matmul_efficiency``, as the VAE decodes' convolutions were fitted."""
    module = parse_module(
        """HloModule m
ENTRY %e (x: bf16[1,34,34,128], w: bf16[3,3,128,128]) -> bf16[1,32,32,128] {
  %x = bf16[1,34,34,128]{3,2,1,0} parameter(0)
  %w = bf16[3,3,128,128]{3,2,1,0} parameter(1)
  ROOT %c = bf16[1,32,32,128]{3,2,1,0} convolution(%x, %w), window={size=3x3}, LABELS
}""".replace("LABELS", "dim_labels=b01f_01io->b01f")
    )
    work = CostModel(module).instruction(module.entry, module.entry.root)
    assert work.matmuls and work.fused_vector_ops is None
    model = compute_model_of(load_chip("v5e"))
    at_peak = sum(m.padded_flops(128) for m in work.matmuls) / model.peak_flops_per_s
    assert model.mxu_s(replace(work, bare_matmul=False)) == pytest.approx(
        at_peak / model.params.matmul_efficiency, rel=1e-12
    )


def test_a_bare_kernel_is_priced_at_the_bare_rate_and_a_fused_one_at_the_fused() -> None:
    """The MXU time of the same matmul at each rate: the padded FLOPs over the peak times
    each efficiency (v5e: 0.973 and 0.903)."""
    model = compute_model_of(load_chip("v5e"))
    p = model.params
    at_peak = 2.0 * 512 * 1024 * 2048 / model.peak_flops_per_s
    bare, fused = _work(_COPY_X, _NO_EPILOGUE), _work(_SCALE_X, _BIAS)
    assert model.mxu_s(bare) == pytest.approx(at_peak / p.bare_matmul_efficiency, rel=1e-12)
    two_ops = 1 / p.bare_matmul_efficiency + 2 * p.matmul_fused_op_cost
    assert model.mxu_s(fused) == pytest.approx(at_peak * two_ops, rel=1e-12)
    assert 0.9 < p.matmul_efficiency < 1 / two_ops < p.bare_matmul_efficiency < 1.0
    # before layout (no compiled kernel says what is fused): the steps' one fused rate
    unknown = replace(fused, fused_vector_ops=None)
    assert model.mxu_s(unknown) == pytest.approx(at_peak / p.matmul_efficiency, rel=1e-12)
    # a kernel of several keeps the fused rate unless every one is bare
    assert not (bare + fused).bare_matmul and (bare + bare).bare_matmul
    assert (bare + fused).fused_vector_ops == 2 and (fused + unknown).fused_vector_ops is None
    # a generation that has not measured bare kernels prices them at its one rate
    v6e = compute_model_of(load_chip("v6e"))
    assert v6e.mxu_s(replace(bare, bare_matmul=False)) == v6e.mxu_s(bare)


def test_the_wan_steps_move_little_and_the_decodes_not_at_all(
    v5e_steps: dict[str, ProfiledStep],
) -> None:
    """The steps' MXU-bound matmul kernels all fuse something (the few bare ones are small:
    a 6240 x 384 x 384 kernel of 10 us), and the cost per fused op was fitted to the five
    fit steps' kernels, so the rules move each priced Wan step by under 0.5 % (0.4 at most,
    +0.19 -> +0.57 %); the decodes' kernels are convolutions with spatial taps: under
    0.05 %."""
    chip = load_chip("v5e")
    # the rule for convolutions with a window of their own apart (test_own_window_convs.py)
    chip = replace(chip, compute=replace(chip.compute, compiler_cycle_s=0))
    model = compute_model_of(chip)
    one_rate = replace(chip.compute, bare_matmul_efficiency=0)  # the model before the rules
    before = compute_model_of(replace(chip, compute=one_rate))
    assert len(v5e_steps) >= 20
    for name, step in v5e_steps.items():
        works = op_works(step.module).values()
        ratio = sum(model.time_s(w) * n for w, n in works) / sum(
            before.time_s(w) * n for w, n in works
        )
        assert abs(ratio - 1.0) < (0.0005 if name.endswith("-vae") else 0.005), (name, ratio)
