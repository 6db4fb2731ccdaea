"""Pictures: the trace is valid Chrome trace JSON with one event per node, the heatmap's
numbers are the simulator's link records (and agree with bytes summed over routes),
and the PNGs are real, deterministic PNGs."""

from __future__ import annotations

import json
import struct
from collections import Counter
from pathlib import Path

import pytest

from aoizora.errors import PlanError
from aoizora.report.pictures import (
    RankingEntry,
    chrome_trace,
    link_loads,
    plot_link_heatmap,
    plot_ranking,
    ranking_rows,
    write_chrome_trace,
)
from sim.collectives import collective_flows
from sim.engine import Compute, Flow, simulate
from sim.records import SimResult
from sim.routing import route_link_ids
from sim.topology import Slice, load_slice

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _step(slice_name: str = "v5e:2x4") -> tuple[Slice, list[Flow | Compute], SimResult]:
    """A small 'step': all-gather along x, a compute per chip, all-reduce along y,
    plus two overlapping computes on one chip (they need separate trace lanes)."""
    s = load_slice(slice_name)
    nx, ny = s.shape[0], s.shape[1]
    ag = collective_flows(
        "all-gather",
        [[(x, y) for x in range(nx)] for y in range(ny)],
        buffer_bytes=8e6,
        id_prefix="ag",
    )
    comp = [
        Compute(f"mm{x}{y}", (x, y), 5e-5, after=(ag.done_id,))
        for x in range(nx)
        for y in range(ny)
    ]
    extra = [Compute("side0", (0, 0), 3e-5), Compute("side1", (0, 0), 4e-5, start_s=1e-5)]
    ar = collective_flows(
        "all-reduce",
        [[(x, y) for y in range(ny)] for x in range(nx)],
        buffer_bytes=4e6,
        id_prefix="ar",
        after=tuple(c.id for c in comp),
    )
    nodes: list[Flow | Compute] = [*ag.nodes, *comp, *extra, *ar.nodes]
    return s, nodes, simulate(s, nodes)


def test_trace_is_valid_chrome_json_with_one_event_per_flow_and_compute(tmp_path: Path) -> None:
    s, nodes, result = _step()
    path = write_chrome_trace(chrome_trace(result, s), tmp_path / "step.trace.json")
    data = json.loads(path.read_text())
    events = data["traceEvents"]
    assert isinstance(events, list) and events
    for e in events:
        assert {"ph", "pid", "tid", "name"} <= e.keys()
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] == "X":
            assert isinstance(e["ts"], float | int) and isinstance(e["dur"], float | int)
            assert e["ts"] >= 0 and e["dur"] >= 0
        else:
            assert e["ph"] == "M"
    flows = [n.id for n in nodes if isinstance(n, Flow)]
    computes = [n.id for n in nodes if isinstance(n, Compute)]
    flow_events = Counter(e["name"] for e in events if e.get("cat") == "flow")
    compute_events = Counter(e["name"] for e in events if e.get("cat") == "compute")
    assert flow_events == Counter(flows)  # exactly one per flow
    assert compute_events == Counter(computes)  # exactly one per compute (joins too)
    # Times are the simulator's, in microseconds.
    rec = result.flow(flows[5])
    (ev,) = [e for e in events if e["name"] == flows[5]]
    assert ev["ts"] == pytest.approx(rec.release_s * 1e6)
    assert ev["dur"] == pytest.approx((rec.finish_s - rec.release_s) * 1e6)
    # Every track holds non-overlapping slices (Chrome/Perfetto need proper nesting).
    tracks: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for e in events:
        if e["ph"] == "X":
            tracks.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in tracks.values():
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
            assert start >= end - 1e-9
    # The two overlapping computes on chip (0,0) landed on different lanes.
    side = {e["name"]: e["tid"] for e in events if e["name"] in ("side0", "side1")}
    assert side["side0"] != side["side1"]
    # Every process and link track is named.
    named = {(e["pid"], e["tid"]) for e in events if e["name"] == "thread_name"}
    assert set(tracks) - {(1, i) for i in range(len(s.links))} <= named | {(2, 0)}
    link_names = [e["args"]["name"] for e in events if e["name"] == "thread_name" and e["pid"] == 1]
    assert len(link_names) == len(s.links)
    # The two directions of a length-2 axis are told apart.
    assert "x+ (0, 0)->(1, 0)" in link_names and "x- (1, 0)->(0, 0)" in link_names


def test_trace_link_tracks_add_up_to_the_simulators_busy_time() -> None:
    s, _, result = _step()
    events = chrome_trace(result, s)["traceEvents"]
    busy: dict[int, float] = {}
    for e in events:
        if e.get("cat") == "link":
            busy[e["tid"]] = busy.get(e["tid"], 0.0) + e["dur"] / 1e6
    for i, rec in enumerate(result.links):
        assert busy.get(i, 0.0) == pytest.approx(rec.busy_s, rel=1e-9, abs=1e-15)


def test_heatmap_values_are_the_simulators_link_records() -> None:
    s, nodes, result = _step()
    loads = link_loads(result)
    assert len(loads.links) == len(result.links) == len(s.links)
    for load, rec, link in zip(loads.links, result.links, s.links, strict=True):
        assert (load.src, load.dst, load.dim, load.wrap) == (rec.src, rec.dst, rec.dim, rec.wrap)
        assert (load.src, load.dst) == (link.src, link.dst)
        assert load.bytes_carried == rec.bytes_carried
        assert load.busy_s == rec.busy_s
        assert load.busy_fraction == pytest.approx(rec.busy_s / result.makespan_s)
        assert 0.0 <= load.busy_fraction <= 1.0 + 1e-12
    # Independently: bytes per link = sum of the sizes of the flows routed over it.
    expected = [0.0] * len(s.links)
    for n in nodes:
        if isinstance(n, Flow):
            for i in route_link_ids(s, n.src, n.dst).tolist():
                expected[i] += n.size_bytes
    assert [lk.bytes_carried for lk in loads.links] == pytest.approx(expected, rel=1e-12)
    assert loads.max_bytes == max(expected) > 0
    assert json.loads(json.dumps(loads.to_json_dict()))["links"][0]["src"] == list(s.links[0].src)


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_heatmap_png_is_a_real_deterministic_png(tmp_path: Path) -> None:
    _, _, result = _step()
    loads = link_loads(result)
    a = plot_link_heatmap(loads, tmp_path / "a.png", title="test step").read_bytes()
    b = plot_link_heatmap(loads, tmp_path / "b.png", title="test step").read_bytes()
    assert a == b
    width, height = _png_size(a)
    assert width > 600 and height > 300 and len(a) > 10_000
    # Wrapped axis and a 3D slice draw too.
    s = load_slice("v5e:2x16")
    ag = collective_flows(
        "all-gather", [[(0, y) for y in range(16)]], buffer_bytes=16e6, id_prefix="g"
    )
    wrapped = link_loads(simulate(s, ag.nodes))
    assert any(lk.wrap and lk.bytes_carried > 0 for lk in wrapped.links)
    assert _png_size(plot_link_heatmap(wrapped, tmp_path / "w.png").read_bytes())[1] > height
    cube = load_slice("v5p:2x2x2")
    ar = collective_flows("all-reduce", [[(0, 0, 0), (0, 0, 1)]], buffer_bytes=1e6, id_prefix="z")
    three_d = link_loads(simulate(cube, ar.nodes))
    _png_size(plot_link_heatmap(three_d, tmp_path / "c.png").read_bytes())


def test_ranking_rows_and_plot(tmp_path: Path) -> None:
    entries = [
        RankingEntry("data2xctx4", "default", 0.120, measured_s=0.125),
        RankingEntry("data2xctx4", "transposed", 0.101),
        RankingEntry("fsdp2xctx4", "default", 0.110),
        RankingEntry("fsdp2xctx4", "snake", 0.101),
    ]
    rows = ranking_rows(entries)
    # Sorted by Q2; the tie at 0.101 keeps input order.
    assert [(r.sharding, r.placement, r.rank) for r in rows] == [
        ("data2xctx4", "transposed", 1),
        ("fsdp2xctx4", "snake", 2),
        ("fsdp2xctx4", "default", 3),
        ("data2xctx4", "default", 4),
    ]
    assert [r.best_in_sharding for r in rows] == [True, True, False, False]
    path = plot_ranking(entries, tmp_path / "rank.png", baselines={"expert": 0.125})
    data = path.read_bytes()
    assert _png_size(data)[0] > 500
    assert (
        plot_ranking(entries, tmp_path / "again.png", baselines={"expert": 0.125}).read_bytes()
        == data
    )
    with pytest.raises(PlanError, match="listed twice"):
        ranking_rows([entries[0], entries[0]])
    with pytest.raises(PlanError, match="nothing to rank"):
        ranking_rows([])
