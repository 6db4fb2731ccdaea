"""Stage 1's price of the relayouts XLA puts around a convolution (issue 40): the v5e
``conv_relayout_passes`` is the fit of three measured decodes, the five decodes never
fitted come within 4.5 % (the chunk-2 decode excepted, and said so), and so do the two
decodes of held-out clips planned and measured after the fit (validation/v5e/clips);
only convolutions pay it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from aoizora.stage1.prediction import Node
from aoizora.stage1.q1 import conv_relayout_s
from aoizora.studies.vae_fit import decode_cases, fit_passes
from aoizora.studies.validation.format import read_measurements
from sim.chips import load_chip
from sim.compute import Work, compute_model_of

ROOT = Path(__file__).resolve().parents[2]
ROWS = ROOT / "validation" / "v5e" / "vae" / "rows.csv"
CLIPS = ROOT / "validation" / "v5e" / "clips" / "rows.csv"  # held out: -2.0 % and -3.7 %
FIT = ("m-40a99d5f22-vae", "m-58178b83de-vae", "m-acb5109a39-vae")
CHUNK_2 = "m-80b8d37c33-vae"
V5E = load_chip("v5e")


@pytest.fixture(scope="module")
def cases() -> dict[str, object]:
    rows = (*read_measurements(ROWS), *read_measurements(CLIPS))
    return {c.row_id: c for c in decode_cases(rows, V5E)}


def test_the_shipped_passes_are_the_fit_of_three_decodes(cases: dict) -> None:
    passes = fit_passes([cases[r] for r in FIT])
    assert passes == pytest.approx(V5E.compute.conv_relayout_passes, abs=5e-4)
    for rid, c in cases.items():
        before = c.stage1_s / c.measured_s - 1
        after = c.predicted_s(passes) / c.measured_s - 1
        assert before < -0.15  # without the relayouts Stage 1 was 15-34 % under the chip
        if rid == CHUNK_2:  # its program grows every category; Stage 1 sees 15 % of it
            assert -0.25 < after < -0.15
        else:  # the Wan 2.2 decode at 832x480x21 the farthest, -4.7 %
            assert abs(after) < 0.05, rid


def test_only_convolutions_pay_the_relayouts() -> None:
    model = compute_model_of(V5E)
    rate = model.hbm_bandwidth_bytes_per_s * model.params.hbm_efficiency
    node = Node(0, "compute", "", (), (), 1, 0, 0.0, 1e9, 1, (), "stablehlo.convolution", "k",
                work=Work(hbm_bytes=1e9))  # fmt: skip
    assert conv_relayout_s(node, model) == pytest.approx(1e9 * 1.167 / rate, rel=1e-3)
    assert conv_relayout_s(dataclasses.replace(node, op="stablehlo.dot_general"), model) == 0
    bare = dataclasses.replace(
        model, params=dataclasses.replace(model.params, conv_relayout_passes=0.0)
    )
    assert conv_relayout_s(node, bare) == 0
    # a generation that measured no decode adds nothing
    assert load_chip("v6e").compute.conv_relayout_passes == 0
