"""An async copy's wait (``copy-done``, ``slice-done``): the DMA streams at the HBM peak in the
time the kernels issued beside it leave HBM idle, and the done waits for the rest
(sim.compute.ComputeModel.dma_wait_s, docs/simulator.md "Async copies")."""

from __future__ import annotations

from pathlib import Path

import pytest

from aoizora.hlo.text import parse_module
from aoizora.studies.explain import Explanation, op_works
from sim.compute import ComputeModel, ComputeParams, Work
from sim.topology import load_slice

V5E = load_slice("v5e:1x1")
PROFILES = Path(__file__).resolve().parents[3] / "validation" / "v5e"

_MODULE = """HloModule m
%f (p: f32[1024,1024]) -> f32[1024,1024] {
  %p = f32[1024,1024]{1,0} parameter(0)
  ROOT %e = f32[1024,1024]{1,0} exponential(%p)
}
ENTRY %e (a: f32[1024,1024], b: f32[256,1024]) -> f32[1024,1024] {
  %a = f32[1024,1024]{1,0} parameter(0)
  %b = f32[256,1024]{1,0} parameter(1)
  %cs = (f32[256,1024]{1,0:S(1)}, f32[256,1024]{1,0}, u32[]{:S(2)}) copy-start(%b)%PREFETCH%
  %x = f32[1024,1024]{1,0} fusion(%a), kind=kLoop, calls=%f
  %cd = f32[256,1024]{1,0:S(1)} copy-done(%cs)
  ROOT %y = f32[1024,1024]{1,0} fusion(%x), kind=kLoop, calls=%f
}"""


def test_a_done_waits_for_what_the_kernels_beside_it_leave() -> None:
    works = op_works(parse_module(_MODULE.replace("%PREFETCH%", "")))
    wait, count = works["cd"]
    assert count == 1
    assert wait.dma_bytes == 256 * 1024 * 4  # the done's array
    assert wait.beside == (works["x"][0],)  # the one kernel between start and done
    model = V5E.chip.per_device().compute_model()
    beside = works["x"][0]
    idle = max(0.0, model.time_s(beside) - model.hbm_s(beside))
    expected = max(0.0, wait.dma_bytes / model.hbm_bandwidth_bytes_per_s - idle)
    assert model.time_s(wait) == pytest.approx(expected)
    # an HBM-bound exponential leaves HBM idle only for its fixed cost per kernel
    overhead = model.params.kernel_overhead_s
    assert model.hbm_s(beside) + overhead == pytest.approx(model.time_s(beside))
    assert model.time_s(wait) == pytest.approx(
        wait.dma_bytes / model.hbm_bandwidth_bytes_per_s - overhead
    )


def test_a_cross_program_prefetch_waits_nothing() -> None:
    hlo = _MODULE.replace("%PREFETCH%", ", cross_program_prefetch_index=0")
    assert "cd" not in op_works(parse_module(hlo))


def test_compute_bound_kernels_hide_the_dma() -> None:
    """A kernel with 2 s of compute and 1 s of HBM traffic hides 1 s of DMA: a DMA of 0.5 s
    at the peak waits nothing, one of 3 s waits 2 s."""
    model = ComputeModel(10.0, 100.0, ComputeParams(hbm_efficiency=0.5))
    busy = Work(other_flops=20.0, hbm_bytes=50.0)
    assert model.time_s(busy) == pytest.approx(2.0) and model.hbm_s(busy) == pytest.approx(1.0)
    assert model.time_s(Work(dma_bytes=50.0, beside=(busy,))) == 0.0
    assert model.time_s(Work(dma_bytes=300.0, beside=(busy,))) == pytest.approx(2.0)
    assert model.time_s(Work(dma_bytes=300.0)) == pytest.approx(3.0)  # nothing beside


def test_the_decodes_waits_are_priced_as_measured(
    decodes_explained: dict[str, Explanation],
) -> None:
    """Over the profiled VAE decodes (5 to 45 ms of waits each, 0.2-2 % of a decode):
    priced 277 ms against 259 ms measured over the 16 the model was built on, 13 within 10 %;
    with the six held out since (validation/v5e/heldout5) 396 against 374 ms over 22, 15
    within 10 % (the new ones -10.6, -6.2, +3.7, +6.9, +19.0 and +23.8 %); unpriced they were
    -100 %. Since kernels in VMEM pay their own fixed cost and relayouts between 8-row tiles
    their own rate (the time beside a wait that leaves HBM idle shrinks): still 397 against
    374 ms, 14 within 10 % (one wait moved from -9.9 to -10.3 %), each moving 1.4 points
    at most."""
    measured = predicted = 0.0
    close = 0
    decodes = list(decodes_explained.values())
    assert len(decodes) >= 16
    for e in decodes:
        (row,) = [c for c in e.categories() if c.category == "async"]
        measured += row.measured_s
        predicted += row.predicted_s
        close += abs(row.predicted_s / row.measured_s - 1) <= 0.10
    assert predicted == pytest.approx(measured, rel=0.10)
    assert close >= 0.6 * len(decodes)
