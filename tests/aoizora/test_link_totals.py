"""Link totals over a whole step equal an independent per-link sum over the compiled collectives.

The what-if table's link utilisation and the heatmap read the simulator's link
records; a loop body's records must count once per trip. The check sums, per
link, every collective's flow bytes x its runs per step x the links its route
crosses -- the graph's collectives and the routing function, not the engine's
accounting or the regions.
"""

from __future__ import annotations

import pytest

from aoizora.hlo.graph import graph_from_text
from aoizora.placement.device_order import DeviceOrder
from aoizora.replay import collective_link_bytes, replay, step_link_totals
from aoizora.report.pictures.heatmap import link_loads
from aoizora.studies.whatif import step_utilisation
from sim.topology import load_slice
from tests.aoizora.hlo import compiled


@pytest.mark.parametrize("fixture", ["scan_tpu", "transformer_4x4"])
def test_step_link_bytes_match_an_independent_sum(fixture: str) -> None:
    fx = getattr(compiled, fixture)()
    graph = graph_from_text(fx.text)
    assert any(r.count > 1 for r in graph.regions)  # a loop: the case the bug was about
    slice_ = load_slice(fx.slice_name)
    order = DeviceOrder.identity(mesh_shape=fx.mesh_shape, slice_=slice_)
    result = replay(graph, slice_, order)
    totals = {(t.src, t.dst): t for t in step_link_totals(result, graph)}
    expected = collective_link_bytes(graph, slice_, order)
    assert expected and sum(expected.values()) > 0
    for key, nbytes in expected.items():
        assert totals[key].bytes_carried == pytest.approx(nbytes, rel=0.01), key
    assert all(t.bytes_carried == 0 for k, t in totals.items() if k not in expected)
    # Utilisation is busy time over the step: at least the bytes at full bandwidth, at most 1.
    peak, mean = step_utilisation(result, graph)
    for t in totals.values():
        assert t.busy_s >= t.bytes_carried / t.bandwidth_bytes_per_s * (1 - 1e-9)
        assert t.busy_s <= result.step_time_s * (1 + 1e-9)
    busiest = max(totals.values(), key=lambda t: t.busy_s)
    assert peak == pytest.approx(busiest.busy_s / result.step_time_s)
    assert 0 < mean <= peak <= 1
    # The heatmap's per-run numbers (--report: one region, per run of it) add up, times
    # each region's runs, to the same independent sum.
    heat: dict[tuple, float] = {}
    for region, sim in zip(graph.regions, result.region_sims, strict=True):
        for load in link_loads(sim).links:
            key = (load.src, load.dst)
            heat[key] = heat.get(key, 0.0) + load.bytes_carried * region.count
    for key, nbytes in expected.items():
        assert heat[key] == pytest.approx(nbytes, rel=0.01), key
    # The entry region alone (the old figure) misses the loop's traffic.
    entry = sum(rec.bytes_carried for rec in result.sim.links)
    assert entry < sum(t.bytes_carried for t in totals.values())
