"""XLA attention's row max alone in its kernel: which ones cost ``row_window_stream_s`` beyond
their bytes (validation/README.md, section 18).

The rule, from the chip: only a whole-row reduce-window read as f32 rows from HBM by XLA's
sublane emitter (17.4-18.1 ps an element over rows of 3,072 to 5,120); with bf16 rows (the
scores' convert fused in: the rope DiTs at 1,024 to 2,560 tokens) or the lane emitter (the
softmax experiment, bf16 and f32, 1,024 to 4,096) it streams its bytes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sim.compute import compute_model_of
from sim.topology import load_chip
from tests.aoizora.compute.profiled import window_fusions

V5E = Path(__file__).resolve().parents[3] / "validation" / "v5e"
MODEL = compute_model_of(load_chip("v5e"))


def _windows(folder: Path, pattern: str) -> list[tuple[str, str, bool, float, float, float]]:
    """(file, emitter, reads f32 rows, measured, priced seconds, window elements) of every
    top-level fusion with a whole-row window and no matmul in the profiles of ``folder``."""
    out = []
    for ops in sorted(folder.glob(pattern)):
        for instr, op, work in window_fusions(ops):
            if work.matmuls:
                continue
            emitter = re.search(r'"emitter":"(\w+)"', instr.attrs.get("backend_config", ""))
            seconds = op.per_step_s / op.count_per_step
            elements = sum(e for _, e in work.row_windows)
            out.append((ops.name, emitter.group(1) if emitter else "", work.row_window_f32_rows,
                        seconds, MODEL.time_s(work), elements))  # fmt: skip
    return out


def test_lane_reduced_rows_stream_their_bytes() -> None:
    """The experiment: 10 softmaxes (bf16 and f32 scores, rows of 1,024 to 4,096) compile to
    the lane emitter; each priced at its bytes within 15 % of the chip (-3.8 to +12.8 %, the
    two 1,024-row kernels of 46 and 90 us the farthest; before the rule the f32 ones were
    priced at the stream cost, 1.4x over)."""
    found = _windows(V5E / "softmax", "*.ops.json.gz")
    assert len(found) == 10
    for name, emitter, f32_rows, measured, priced, _ in found:
        assert emitter == "EmitReduceWindowLane" and not f32_rows, name
        assert priced == pytest.approx(measured, rel=0.15), name


@pytest.mark.parametrize("folder", ["heldout6", "heldout7"])
def test_the_rope_dits_row_max_is_priced_by_what_it_reads(folder: str) -> None:
    """Sublane kernels: bf16 rows at their bytes, f32 rows at the stream cost, each within
    5 % (-3.3 to +2.0 %; the 6,144-row one runs the slow emitter, row_window_tap_s's)."""
    found = _windows(V5E / folder / "profiles", "*-winner.ops.json.gz")
    assert {f[1] for f in found} == {"EmitReduceWindowSublane"}
    assert any(f[2] for f in found) and any(not f[2] for f in found)
    for name, _, _, measured, priced, _ in found:
        assert priced == pytest.approx(measured, rel=0.05), name


def test_the_stream_cost_on_bf16_rows_would_overprice_them() -> None:
    """The rule is what the chip tells apart: bf16 rows ran at 9.3 ps an element, and the
    stream cost (17.5 ps) on them would price each kernel 50 % or more over."""
    found = _windows(V5E / "heldout6" / "profiles", "*-winner.ops.json.gz")
    bf16 = [(measured, elements) for _, _, f32_rows, measured, _, elements in found
            if not f32_rows]  # fmt: skip
    assert len(bf16) >= 4
    for measured, elements in bf16:
        assert MODEL.params.row_window_stream_s * elements > 1.5 * measured
