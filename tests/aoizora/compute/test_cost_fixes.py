"""The pricing bugs a v5e profile found, each pinned by a small module and by the real HLO
that showed it (validation/v5e/profiles): a stacked weight sliced one fusion deeper, async
slices priced as copies, arrays in VMEM priced as HBM traffic, and the attention kernel
priced not being the one compiled."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from aoizora.hlo.compute import CostModel
from aoizora.hlo.graph import build_graph
from aoizora.hlo.profile import load_profile, read_text_file
from aoizora.hlo.text import parse_module
from aoizora.replay import opaque_work
from aoizora.studies.compute_fit import ProfiledStep
from sim.compute import Attention, Work, compute_model_of
from sim.topology import load_chip

LAYERS, D = 30, 256
LAYER_BYTES = D * D * 2  # one layer's bf16 [256, 256] weight

_NESTED = f"""HloModule m
%inner (w: bf16[{LAYERS},{D},{D}], i: s32[]) -> bf16[1,{D},{D}] {{
  %w = bf16[{LAYERS},{D},{D}]{{2,1,0}} parameter(0)
  %i = s32[] parameter(1)
  %z = s32[] constant(0)
  ROOT %ds = bf16[1,{D},{D}]{{2,1,0}} dynamic-slice(%w, %i, %z, %z), {{SIZES}}
}}
%outer (x: bf16[64,{D}], w: bf16[{LAYERS},{D},{D}], i: s32[]) -> bf16[64,{D}] {{
  %x = bf16[64,{D}]{{1,0}} parameter(0)
  %w = bf16[{LAYERS},{D},{D}]{{2,1,0}} parameter(1)
  %i = s32[] parameter(2)
  %layer = bf16[1,{D},{D}]{{2,1,0}} fusion(%w, %i), kind=kLoop, calls=%inner
  %b = bf16[{D},{D}]{{1,0}} bitcast(%layer)
  ROOT %d = bf16[64,{D}]{{1,0}} dot(%x, %b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}
ENTRY %e (x: bf16[64,{D}], w: bf16[{LAYERS},{D},{D}], i: s32[]) -> bf16[64,{D}] {{
  %x = bf16[64,{D}]{{1,0}} parameter(0)
  %w = bf16[{LAYERS},{D},{D}]{{2,1,0}} parameter(1)
  %i = s32[] parameter(2)
  ROOT %f = bf16[64,{D}]{{1,0}} fusion(%x, %w, %i), kind=kOutput, calls=%outer
}}""".replace("{SIZES}", f"dynamic_slice_sizes={{1,{D},{D}}}")  # fmt: skip


def test_a_stacked_weight_sliced_in_a_nested_fusion_reads_one_layer() -> None:
    m = parse_module(_NESTED)
    summary = CostModel(m).fusion(m.entry.root)
    assert summary.param_read_bytes[1] == LAYER_BYTES  # not all 30 layers
    x_bytes, index_bytes, out_bytes = 64 * D * 2, 4, 64 * D * 2
    assert summary.param_read_bytes == (x_bytes, LAYER_BYTES, index_bytes)
    assert summary.work.hbm_bytes == x_bytes + LAYER_BYTES + index_bytes + out_bytes


_VIEW = f"""HloModule m
%view (p: bf16[64,{D}]) -> bf16[64,{D},1] {{
  %p = bf16[64,{D}]{{1,0}} parameter(0)
  ROOT %b = bf16[64,{D},1]{{2,1,0}} bitcast(%p)
}}
%outer (x: bf16[64,{D}], w: bf16[{D},{D}]) -> bf16[64,{D}] {{
  %x = bf16[64,{D}]{{1,0}} parameter(0)
  %w = bf16[{D},{D}]{{1,0}} parameter(1)
  %v = bf16[64,{D},1]{{2,1,0}} fusion(%x), kind=kLoop, calls=%view
  %b = bf16[64,{D}]{{1,0}} bitcast(%v)
  ROOT %d = bf16[64,{D}]{{1,0}} dot(%b, %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}
ENTRY %e (x: bf16[64,{D}], w: bf16[{D},{D}]) -> bf16[64,{D}] {{
  %x = bf16[64,{D}]{{1,0}} parameter(0)
  %w = bf16[{D},{D}]{{1,0}} parameter(1)
  ROOT %f = bf16[64,{D}]{{1,0}} fusion(%x, %w), kind=kOutput, calls=%outer
}}"""  # fmt: skip


def test_an_operand_a_nested_fusion_only_views_is_read_whole() -> None:
    """A nested fusion that returns a bitcast of its parameter (libtpu's windowed dots
    do this with their activations) passes the whole operand to its consumer: the read
    is not lost (stage1/test_windowed.py saw it as the loop's missing bytes)."""
    m = parse_module(_VIEW)
    summary = CostModel(m).fusion(m.entry.root)
    assert summary.param_read_bytes == (64 * D * 2, D * D * 2)


def test_the_5b_ffn_reads_one_layer_of_its_stacked_weights(
    v5e_steps: dict[str, ProfiledStep],
) -> None:
    """The TI2V-5B FFN fusions of the real step: under 2 layers' weights each (they read
    all 30 before the fix, +251 ms of a 406 ms step)."""
    module = v5e_steps["m-80c6028188-winner"].module
    costs = CostModel(module)
    ffn_weight = 3072 * 14336 * 2
    for name in ("convolution_add_fusion.13", "fusion.271"):
        instr = next(i for c in module.computations.values() for i in c.instructions
                     if i.name == name)  # fmt: skip
        assert costs.fusion(instr).matmuls
        assert ffn_weight <= costs.fusion(instr).work.hbm_bytes < 2 * ffn_weight + 2e8


_ASYNC = """HloModule m
ENTRY %e (p: bf16[2,4096,1536]) -> bf16[1,4096,1536] {
  %p = bf16[2,4096,1536]{2,1,0} parameter(0)
  %s = ((bf16[2,4096,1536]{2,1,0}), bf16[1,4096,1536]{2,1,0}, u32[]{:S(2)}) SLICE
  ROOT %d = bf16[1,4096,1536]{2,1,0} slice-done(%s)
}""".replace("SLICE", "slice-start(%p), slice={[0:1], [0:4096], [0:1536]}")  # fmt: skip


def test_async_slices_cost_no_compute(v5e_steps: dict[str, ProfiledStep]) -> None:
    m = parse_module(_ASYNC)
    costs = CostModel(m)
    assert [i.opcode for i in m.entry.instructions] == ["parameter", "slice-start", "slice-done"]
    for instr in m.entry.instructions:
        w = costs.instruction(m.entry, instr)
        assert w.hbm_bytes == w.onchip_bytes == w.flops == 0
    module = v5e_steps["m-24893bf72f-winner"].module
    costs = CostModel(module)
    priced = [
        costs.instruction(c, i) for c in module.computations.values() for i in c.instructions
        if i.opcode in ("slice-start", "slice-done")
    ]  # fmt: skip
    assert priced and all(w == Work() for w in priced)


def test_arrays_in_vmem_are_on_chip_traffic_not_hbm() -> None:
    m = parse_module("""HloModule m
ENTRY %e (p: bf16[1024,1024]) -> bf16[1024,1024] {
  %p = bf16[1024,1024]{1,0:T(8,128)(2,1)S(1)} parameter(0)
  %c = bf16[1024,1024]{0,1:T(8,128)(2,1)S(1)} copy(%p)
  ROOT %h = bf16[1024,1024]{1,0:T(8,128)(2,1)} copy(%c)
}""")
    costs = CostModel(m)
    by = m.entry.by_name
    vmem_to_vmem = costs.instruction(m.entry, by["c"])
    vmem_to_hbm = costs.instruction(m.entry, by["h"])
    size = 1024 * 1024 * 2
    assert (vmem_to_vmem.hbm_bytes, vmem_to_vmem.onchip_copy_bytes) == (0, 2 * size)
    assert (vmem_to_hbm.hbm_bytes, vmem_to_hbm.onchip_copy_bytes) == (size, size)
    model = load_chip("v5e").compute_model()
    p = model.params
    # a relayout in VMEM runs at the measured rate of its tiles (8 rows both sides), not at
    # HBM's, and pays a VMEM kernel's fixed cost
    assert vmem_to_vmem.onchip_copy_full_tile_bytes == 2 * size
    assert p.onchip_full_tile_copy_bandwidth_bytes_per_s and p.vmem_kernel_overhead_s
    assert model.time_s(vmem_to_vmem) == pytest.approx(
        2 * size / p.onchip_full_tile_copy_bandwidth_bytes_per_s + p.vmem_kernel_overhead_s
    )
    # a generation without measured on-chip rates prices them as HBM bytes, as before
    v6e = load_chip("v6e").compute_model()
    assert v6e.hbm_s(vmem_to_vmem) == pytest.approx(v6e.hbm_s(Work(hbm_bytes=2 * size)))


def test_relayouts_are_classed_by_the_tiles_they_cut() -> None:
    """Between 8-row tiles: the full-tile on-chip rate; out of 2-row bf16 tiles into 8-row
    ones in HBM: the retile rate; an f32 source, a result in VMEM or 8-row tiles cut into
    2-row ones: neither (docs/simulator.md, "Kernels in VMEM and relayouts")."""
    m = parse_module("""HloModule m
ENTRY %e (p: bf16[8,1024,40], q: f32[8,1024,40]) -> bf16[8,1024,40] {
  %p = bf16[8,1024,40]{2,1,0:T(2,128)(2,1)S(1)} parameter(0)
  %q = f32[8,1024,40]{2,1,0:T(2,128)} parameter(1)
  %retile = bf16[8,1024,40]{1,2,0:T(8,128)(2,1)} copy(%p)
  %f32 = f32[8,1024,40]{1,2,0:T(8,128)} copy(%q)
  %into_vmem = bf16[8,1024,40]{1,2,0:T(8,128)(2,1)S(1)} copy(%p)
  %full = bf16[8,1024,40]{2,1,0:T(8,128)(2,1)S(1)} transpose(%into_vmem), dimensions={0,1,2}
  ROOT %cut = bf16[8,1024,40]{1,2,0:T(2,128)(2,1)S(1)} copy(%full)
}""")
    costs = CostModel(m)
    work = {i.name: costs.instruction(m.entry, i) for i in m.entry.instructions}
    assert work["retile"].hbm_retile_copy_bytes == work["retile"].hbm_bytes > 0
    for name in ("f32", "into_vmem", "full", "cut"):
        assert work[name].hbm_retile_copy_bytes == 0, name
    assert work["full"].onchip_copy_full_tile_bytes == work["full"].onchip_copy_bytes > 0
    for name in ("retile", "f32", "into_vmem", "cut"):
        assert work[name].onchip_copy_full_tile_bytes == 0, name
    model = load_chip("v5e").compute_model()
    p = model.params
    # the retile streams slower than a plain HBM pass of its bytes: the chip measured so
    plain = replace(work["retile"], hbm_retile_copy_bytes=0.0)
    assert model.hbm_s(work["retile"]) == pytest.approx(
        model.hbm_s(plain) * p.hbm_efficiency / p.hbm_retile_copy_efficiency
    )


def test_the_compiled_attention_kernel_is_the_one_priced(
    v5e_steps: dict[str, ProfiledStep],
) -> None:
    """The step compiles jax's splash kernel (block 512): it is priced as splash with its
    grid, whatever the generation's default; a pinned kernel (a measurement's or the
    user's) still wins."""
    graph = build_graph(v5e_steps["m-24893bf72f-winner"].module)
    calls = [opaque_work(n).attention[0] for n in graph.opaques if opaque_work(n).attention]
    assert len(calls) == 2
    assert {(a.kernel, a.block_q, a.block_kv) for a in calls} == {("splash", 512, 512)}
    params = load_chip("v5e").compute
    custom = params.with_kernel("custom")
    a = calls[0]
    assert params.kernel_for(a) == "splash" and custom.kernel_for(a) == "custom"
    assert params.kernel_for(Attention(1, 512, 512, 128, 128)) == params.attention_kernel
    # the grid costs what the fit says: steps and q blocks of the padded 9728-token call
    self_attention = max(calls, key=lambda c: c.kv_length)
    steps, q_blocks = self_attention.grid()
    assert (steps, q_blocks) == (24 * 19 * 19, 24 * 19)


_PROFILES = Path(__file__).resolve().parents[3] / "validation" / "v5e" / "profiles"
_VAE_PROFILES = sorted(_PROFILES.glob("*-vae.ops.json.gz"))


@pytest.mark.parametrize("ops", _VAE_PROFILES, ids=lambda p: p.name[:16])
def test_a_convolution_to_few_channels_runs_latched_on_its_weights(ops: Path) -> None:
    """The VAEs' last convolutions (96 channels to 3 RGB, 256 to 12 patch channels) stream
    3 or 12 weight rows per tile: they cannot latch their activations, and on the chip ran
    at n / 128 of the MXU's columns -- 25 % slower to 13 % faster than priced so, where the
    better-free-dimension rule had them HBM-bound and 4.8x fast (-79 %)."""
    hlo = parse_module(read_text_file(str(ops).replace(".ops.json.gz", ".hlo.txt.gz")))
    profile = load_profile(ops, module=hlo.name)
    costs = CostModel(hlo)
    model = compute_model_of(load_chip("v5e"))
    narrow = [(op, costs.instruction(c, i)) for c in hlo.computations.values()
              for i in c.instructions if i.opcode == "fusion"
              for op in profile.ops if op.name == i.name]  # fmt: skip
    narrow = [
        (op, w)
        for op, w in narrow
        if w.matmuls
        and max(m.n for m in w.matmuls) < 64
        and op.per_step_s / op.count_per_step > 1e-4
    ]  # fmt: skip (not 2 us kernels)
    assert narrow
    for op, work in narrow:
        measured = op.per_step_s / op.count_per_step
        assert model.mxu_s(work) > model.hbm_s(work), op.name
        assert -0.13 <= model.time_s(work) / measured - 1 <= 0.25, op.name
        padded = sum(m.flops for m in work.matmuls) / model.peak_flops_per_s
        assert padded / measured < 0.1  # the positions could not fill the columns
