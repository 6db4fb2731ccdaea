"""Steps explained op by op against TPU v5e profiles: the categories, the sums, the CLI, and
the per-op prices checked against the replay that prices a plan."""

from __future__ import annotations

import json

import pytest

from aoizora.cli import main
from aoizora.hlo.graph import build_graph
from aoizora.placement.device_order import DeviceOrder
from aoizora.replay import replay
from aoizora.studies.compute_fit import ProfiledStep
from aoizora.studies.explain import Explanation, explain, op_prices
from sim.topology import load_slice
from tests.aoizora.compute.conftest import PROFILES, VAE_ROWS

V5E = load_slice("v5e:1x1")
# The 1.3B 480p steps: 81 frames (the default clip) and 21 frames, both explained op by op.
STEPS_480P = ("probe-wan2.1-1.3b-832x480x81", "m-24893bf72f-winner")


def _explained(step: ProfiledStep) -> Explanation:
    return explain(step.profile, step.module, op_prices(step.module, V5E.chip))


@pytest.mark.parametrize("row", STEPS_480P)
def test_the_13b_480p_step_is_true_category_by_category(
    v5e_steps: dict[str, ProfiledStep], row: str
) -> None:
    """Every category worth 1 % of the step within 10 %, the ops within 2 % of the step,
    the prediction within 5 % (the issue's bar for aoizora measure --profile)."""
    e = _explained(v5e_steps[row])
    assert e.device_ops_s == pytest.approx(e.step_s, rel=0.02)
    assert e.predicted_s == pytest.approx(e.step_s, rel=0.05)
    big = [c for c in e.categories() if c.measured_s >= 0.01 * e.step_s]
    assert {c.category for c in big} >= {"matmul", "attention", "elementwise/reduce"}
    for c in big:
        assert abs(c.error_percent) <= 10.0, (c.category, c.error_percent)


def test_op_prices_add_up_to_the_replayed_step(v5e_steps: dict[str, ProfiledStep]) -> None:
    """One chip has no communication: the plan's replay of the step is its ops' prices."""
    for row in ("m-24893bf72f-winner", "m-80c6028188-winner"):
        module = v5e_steps[row].module
        graph = build_graph(module)
        priced = sum(p.predicted_s for p in op_prices(module, V5E.chip, graph=graph).values())
        result = replay(graph, V5E, DeviceOrder.identity(mesh_shape=(1,), slice_=V5E))
        assert priced == pytest.approx(result.step_time_s, rel=1e-9)


def test_every_op_of_the_trace_is_in_the_hlo_and_control_flow_is_left_out(
    v5e_steps: dict[str, ProfiledStep],
) -> None:
    e = _explained(v5e_steps["m-80c6028188-winner"])
    assert e.unmatched == ()
    assert not any(r.name.startswith("while") for r in e.rows)
    assert sum(c.ops for c in e.categories()) == len(e.rows)


def test_explain_cli_prints_the_json_fields(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    row = "m-24893bf72f-winner"
    picture = tmp_path / "e.png"
    code = main([
        "explain", str(PROFILES / f"{row}.xplane.pb.gz"), str(PROFILES / f"{row}.hlo.txt.gz"),
        "--slice", "v5e:1x1", "--json", "--top", "5", "--picture", str(picture),
    ])  # fmt: skip
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) >= {"module", "device", "step_s", "device_ops_s", "predicted_s",
                         "categories", "ops"}  # fmt: skip
    assert len(data["ops"]) == 5 and data["ops"][0]["category"] == "attention"
    assert picture.read_bytes()[:4] == b"\x89PNG"


def test_explain_cli_refuses_a_missing_hlo_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    row = "m-24893bf72f-winner"
    code = main(["explain", str(PROFILES / f"{row}.ops.json.gz"), "nope.hlo.txt",
                 "--slice", "v5e:1x1"])  # fmt: skip
    assert code == 2 and "cannot read 'nope.hlo.txt'" in capsys.readouterr().err


def _vae_rows(steps: dict[str, ProfiledStep]) -> list[str]:
    rows = sorted(r for r in steps if r.endswith("-vae"))
    assert set(rows) == set(VAE_ROWS), rows  # every decode profiled is named in conftest
    return rows


def test_vae_decodes_are_true_within_5_percent(v5e_steps: dict[str, ProfiledStep]) -> None:
    """Every VAE decode profiled on the chip (aoizora measure, rows of kind vae): the
    compiled program priced op by op within 5 % of the measured decode."""
    for row in _vae_rows(v5e_steps):
        e = _explained(v5e_steps[row])
        assert e.device_ops_s == pytest.approx(e.step_s, rel=0.02), row
        assert e.predicted_s == pytest.approx(e.step_s, rel=0.05), (row, e.predicted_s, e.step_s)


def test_the_wan21_vae_needs_its_tiled_footprint(
    v5e_steps: dict[str, ProfiledStep], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Wan 2.1 decoder's 96 channels take 128 lanes: priced by their payload instead,
    every Wan 2.1 decode comes out more than 5 % under the chip (as it did before tiled
    bytes), while the Wan 2.2 decoder (256 channels) barely moves."""
    from aoizora.hlo import shapes

    rows = _vae_rows(v5e_steps)
    tiled = {r: _explained(v5e_steps[r]).predicted_s for r in rows}
    monkeypatch.setattr(shapes.Shape, "stored_bytes", property(lambda s: s.size_bytes))
    for row in rows:
        e = _explained(v5e_steps[row])
        if VAE_ROWS[row].startswith("wan2.1-vae"):
            assert e.predicted_s < 0.95 * e.step_s, (row, e.predicted_s, e.step_s)
        else:
            assert e.predicted_s == pytest.approx(tiled[row], rel=0.03), row


def test_a_slice_across_a_tile_reads_the_whole_tile(v5e_steps: dict[str, ProfiledStep]) -> None:
    """The chunk-2 decode's causal cache keeps frames 6-7 of 8 (dimension 1 tiled by 8 rows):
    the chip ran those slices (14 of them) at the time of reading all 8 frames and writing 2
    (2.55x the window's bytes). Priced by their window, the 'other' category was 17 % under;
    priced by the tiles they touch, every one is within 5 % and the category within 5 %. An
    aligned slice (the 8-frame copies beside them) costs what it did: its window is its tiles."""
    from aoizora.hlo.compute import slice_read_bytes

    step = v5e_steps["m-80b8d37c33-vae"]
    e = _explained(step)
    across = aligned = 0
    for comp in step.module.computations.values():
        for instr in comp.instructions:
            if instr.opcode != "slice" or instr.shape.memory_space:
                continue
            source = comp.by_name[instr.operands[0]].shape
            read = slice_read_bytes(source, instr)
            assert instr.shape.size_bytes <= read <= source.size_bytes
            if read > instr.shape.size_bytes:
                across += 1
            else:
                aligned += 1
    assert across >= 14 and aligned >= 14, (across, aligned)
    rows = {r.name: r for r in e.rows}
    slices = [r for r in rows.values() if r.name.startswith("slice.") and r.measured_s > 1e-3]
    assert len(slices) >= 21
    for r in slices:
        assert r.predicted_s == pytest.approx(r.measured_s, rel=0.05), (r.name, r.predicted_s)
    other = next(c for c in e.categories() if c.category == "other")
    assert abs(other.error_percent) <= 5.0, other.error_percent


def test_a_category_under_a_microsecond_has_no_percentage(
    v5e_steps: dict[str, ProfiledStep],
) -> None:
    """The Wan steps' custom calls that launch no kernel (sharding and buffer bookkeeping)
    sum to nanoseconds on the device and are priced 0: no percentage (was -100 %). A
    category with a kernel's worth of time keeps its error, however wrong."""
    import math

    from aoizora.studies.explain import CATEGORY_FLOOR_S, CategoryRow

    e = _explained(v5e_steps["m-24893bf72f-winner"])
    calls = {c.category: c for c in e.categories()}["custom calls"]
    assert 0 < calls.measured_s < CATEGORY_FLOOR_S and calls.predicted_s == 0
    assert math.isnan(calls.error_percent)
    data = {c["category"]: c for c in e.to_json_dict(top=1)["categories"]}
    assert data["custom calls"]["error_percent"] is None
    assert CategoryRow("async", 3, 2e-6, 0.0).error_percent == -100.0
    assert CategoryRow("async", 3, 0.0, 2e-6).error_percent == math.inf
    assert math.isnan(CategoryRow("other", 1, 4e-7, 6e-7).error_percent)
    assert CategoryRow("other", 1, 4e-6, 6e-6).error_percent == pytest.approx(50.0)


def test_a_fusion_of_compiler_bookkeeping_is_not_a_custom_call() -> None:
    """A dynamic-update-slice into an ``AllocateBuffer`` (a decode's causal-cache write) is
    a data movement, element-wise, not a custom call; XLA's ``online-softmax`` kernel in
    the same decode (the mid block's attention) stays one."""
    from aoizora.hlo.profile import load_profile, read_text_file
    from aoizora.hlo.text import parse_module
    from tests.aoizora.compute.test_heldout import HELDOUT

    base = HELDOUT.with_name("heldout5") / "profiles" / "m-1b1248e7d0-vae"
    module = parse_module(read_text_file(base.with_name(base.name + ".hlo.txt.gz")))
    profile = load_profile(base.with_name(base.name + ".ops.json.gz"), module=module.name)
    rows = explain(profile, module, op_prices(module, V5E.chip)).rows
    filled = {r.category for r in rows if "constant_dynamic-update-slice_fusion" in r.name}
    kernels = {r.category for r in rows if r.name.startswith("online-softmax")}
    assert filled == {"elementwise/reduce"} and kernels == {"custom calls"}


_GATHERS = """HloModule m
ENTRY %e (a: bf16[4,60,2,104,512], b: bf16[4,60,2,104,384], c: f32[4,60,2,104,384]) -> () {
  %a = bf16[4,60,2,104,512]{4,2,1,3,0:T(2,128)(2,1)} parameter(0)
  %b = bf16[4,60,2,104,384]{4,2,1,3,0:T(2,128)(2,1)S(1)} parameter(1)
  %c = f32[4,60,2,104,384]{4,2,1,3,0:T(2,128)} parameter(2)
  %hbm = bf16[4,120,104,512]{3,1,2,0:T(8,128)(2,1)} reshape(%a)
  %vmem = bf16[4,120,104,384]{3,1,2,0:T(8,128)(2,1)} reshape(%b)
  %into_vmem = bf16[4,120,104,384]{3,1,2,0:T(8,128)(2,1)S(1)} reshape(%b)
  %f32 = f32[4,120,104,384]{3,1,2,0:T(8,128)} reshape(%c)
  ROOT %t = (bf16[4,120,104,512], bf16[4,120,104,384]) tuple(%hbm, %vmem)
}"""


def test_the_row_doubling_reshape_is_a_tile_gather() -> None:
    """A bf16 reshape out of 2-row tiles into 8-row ones in HBM is a tile gather, its source
    in HBM (read and written) or in VMEM (written), aligned when the minor dimension is a
    multiple of 512; into VMEM or in f32 it is not."""
    from aoizora.hlo.compute import CostModel
    from aoizora.hlo.text import parse_module

    m = parse_module(_GATHERS)
    costs = CostModel(m)
    gathers = {i.name: costs.instruction(m.entry, i).tile_gathers for i in m.entry.instructions}
    pixels = 4 * 120 * 104  # of the output, each 512 or 384 bf16 channels
    assert gathers["hbm"] == ((False, True, 2 * pixels * 512 * 2),)  # read and written
    assert gathers["vmem"] == ((True, False, pixels * 384 * 2),)  # written
    assert gathers["into_vmem"] == () and gathers["f32"] == ()


def test_every_decodes_other_category_is_within_10_percent(
    decodes_explained: dict[str, Explanation],
) -> None:
    """The up-sampling's row-doubling reshapes priced at the rates measured alone on the
    chip (sim.tile_gather; validation/README.md, section 17): every profiled decode's
    'other' category within 10 % (without them 7 of the 22 were -10.1 to -14.4 %)."""
    assert len(decodes_explained) >= 22
    for name, e in decodes_explained.items():
        (other,) = [c for c in e.categories() if c.category == "other"]
        assert other.predicted_s == pytest.approx(other.measured_s, rel=0.10), name


def test_the_measured_gathers_are_priced_at_their_groups_rates() -> None:
    """The experiment the rates were fitted to: each gather within 2 % of its measured
    time (the rate of its group is the group's median; 18 gathers in four groups)."""
    from aoizora.hlo.compute import CostModel
    from aoizora.hlo.profile import load_profile, read_text_file
    from aoizora.hlo.text import parse_module

    found = 0
    for ops in sorted((PROFILES.parent / "upsample").glob("*.ops.json.gz")):
        hlo = parse_module(read_text_file(str(ops).replace(".ops.json.gz", ".hlo.txt.gz")))
        costs, model = CostModel(hlo), V5E.chip.per_device().compute_model()
        where = {i.name: (c, i) for c in hlo.computations.values() for i in c.instructions}
        for op in load_profile(ops, module=hlo.name).ops:
            comp, instr = where.get(op.name, (None, None))
            if comp is None or instr is None:
                continue
            work = costs.instruction(comp, instr)
            if work.tile_gathers:
                found += 1
                assert model.time_s(work) == pytest.approx(op.per_step_s, rel=0.02), ops.name
    assert found >= 18


def test_every_decodes_convolutions_are_priced_within_4_percent(
    decodes_explained: dict[str, Explanation],
) -> None:
    """Every decode profiled on the chip (24), its matmul kernels (the convolutions, priced
    beside the compiler's estimate: docs/simulator.md, "Convolutions with a window of their
    own"; test_own_window_convs.py) against what they ran: within 4 % each (-3.6 .. +1.1 %;
    with our price alone -5.2 .. +5.4 %), and every op of it within 2 % (-1.9 .. -0.1 %;
    alone -2.6 .. +2.9 %)."""
    assert len(decodes_explained) >= 20
    convs, every = {}, {}
    for name, e in decodes_explained.items():
        rows = [r for r in e.rows if r.category == "matmul"]
        measured = sum(r.measured_s for r in rows)
        convs[name] = sum(r.predicted_s or 0.0 for r in rows) / measured - 1.0
        every[name] = e.predicted_s / e.device_ops_s - 1.0
    assert max(abs(x) for x in convs.values()) < 0.04, convs
    assert max(abs(x) for x in every.values()) < 0.02, every
