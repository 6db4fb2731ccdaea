"""Real compiles (libtpu AOT v5e:2x2/2x4/4x4 and CPU with 8 host devices) through the graph.

On every fixture, every collective's expanded groups must equal jaxlib's own
expansion, and bytes/kinds/counts must match what the compiled function
implies (an independent count from its shapes and mesh).
"""

from __future__ import annotations

import pytest

from aoizora.hlo.graph import build_graph
from aoizora.hlo.nodes import (
    CollectiveDone,
    CollectiveGraph,
    CollectiveStart,
    ComputeSegment,
    SubRegion,
)
from aoizora.hlo.text import parse_module
from tests.aoizora.hlo import compiled
from tests.aoizora.hlo.compiled import Fixture

pytestmark = pytest.mark.slow

FIXTURES = [
    "kinds_tpu",
    "kinds_cpu",
    "scan_tpu",
    "scan_cpu",
    "permute_2x2",
    "jit_4x4",
    "transformer_4x4",
]


def _fixture(name: str) -> Fixture:
    fixture: Fixture = getattr(compiled, name)()
    return fixture


def _graph(name: str) -> CollectiveGraph:
    return build_graph(parse_module(_fixture(name).text))


def _by_kind(graph: CollectiveGraph, kind: str) -> list[int]:
    return [c.id for c in graph.collectives if c.kind == kind]


@pytest.mark.parametrize("name", FIXTURES)
def test_groups_equal_jaxlib_expansion(name: str) -> None:
    fixture = _fixture(name)
    oracle = compiled.jaxlib_groups(fixture.text)
    module = parse_module(fixture.text)
    graph = build_graph(module)
    assert graph.collectives, "every fixture has collectives"
    for c in graph.collectives:
        groups = tuple(c.pairs) if c.pairs else c.groups
        assert (c.kind, c.channel_id, groups) in oracle, (c, sorted(oracle))
    # and every collective instruction jaxlib sees is one we expanded identically
    ours = set()
    from aoizora.hlo.compute import collective_base
    from aoizora.hlo.groups import parse_pairs, parse_replica_groups

    for comp in module.computations.values():
        for instr in comp.instructions:
            base = collective_base(instr.opcode)
            if base is None or instr.opcode.endswith("-done"):
                continue
            ch = instr.attrs.get("channel_id")
            if base == "collective-permute":
                g = parse_pairs(instr.attrs["source_target_pairs"], num_devices=module.num_devices)
            else:
                g = parse_replica_groups(
                    instr.attrs.get("replica_groups", "{}"), num_devices=module.num_devices
                ).groups
            ours.add((base, int(ch) if ch else None, tuple(g)))
    assert ours == oracle


def test_every_replica_group_form_is_produced() -> None:
    forms = {c.group_form for name in FIXTURES for c in _graph(name).collectives}
    assert {"explicit", "iota", "mesh", "pairs"} <= forms


@pytest.mark.parametrize("name", ["kinds_tpu", "kinds_cpu"])
def test_five_kinds_bytes_and_groups(name: str) -> None:
    fixture = _fixture(name)
    facts = fixture.facts
    graph = _graph(name)
    kinds = sorted(c.kind for c in graph.collectives)
    if name == "kinds_cpu":
        assert kinds == sorted(
            ["all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute"]
        )
    else:
        # libtpu lowers a small psum_scatter to an all-reduce plus a per-device slice
        assert kinds == sorted(
            ["all-gather", "all-reduce", "all-reduce", "all-to-all", "collective-permute"]
        )
    for c in graph.collectives:
        assert c.count == 1
        expected = facts[c.kind]
        assert c.buffer_bytes == expected, c
        if c.kind == "collective-permute":
            assert c.pairs == facts["pairs"]
        elif c.kind == "all-reduce" and c.groups == facts["a_groups"]:
            pass  # psum over "a"
        else:
            assert c.groups == facts["b_groups"], c
    # independent total: all-gather 4x shard + four kinds moving one shard each
    from tests.aoizora.hlo.compiled import SHARD_BYTES

    assert graph.total_collective_bytes() == 8 * SHARD_BYTES


def test_async_permute_pairs_overlap_compute() -> None:
    graph = _graph("kinds_tpu")
    (cp,) = _by_kind(graph, "collective-permute")
    assert graph.collectives[cp].is_async and graph.collectives[cp].via == "async-op"
    steps = graph.regions[0].steps
    start = steps.index(CollectiveStart(cp))
    done = steps.index(CollectiveDone(cp))
    between = steps[start + 1 : done]
    # libtpu schedules compute and other (synchronous) collectives inside its window
    assert any(isinstance(s, ComputeSegment) for s in between)
    assert sum(isinstance(s, CollectiveStart) for s in between) >= 1
    assert all(not graph.collectives[c].is_async for c in range(len(graph.collectives)) if c != cp)


@pytest.mark.parametrize(
    ("name", "source"), [("scan_tpu", "derived"), ("scan_cpu", "known_trip_count")]
)
def test_scan_trip_count(name: str, source: str) -> None:
    fixture = _fixture(name)
    graph = _graph(name)
    loops = [r for r in graph.regions if r.kind == "while"]
    assert len(loops) == 1
    assert loops[0].trip_count == fixture.facts["trip_count"]
    assert loops[0].trip_count_source == source
    assert isinstance(graph.regions[0].steps[-1], SubRegion) or any(
        isinstance(s, SubRegion) for s in graph.regions[0].steps
    )
    body = {c.kind: c for c in graph.collectives if c.region == loops[0].id}
    assert set(body) == {"all-gather", "all-reduce"}
    assert all(c.count == fixture.facts["trip_count"] for c in body.values())
    # psum of the f32 carry; all-gather output = one layer's weight (f32 on CPU, bf16 on TPU,
    # which converts the scanned weights once before the loop)
    assert body["all-reduce"].buffer_bytes == fixture.facts["carry_bytes"]
    elem = 2 if name == "scan_tpu" else 4
    assert body["all-gather"].buffer_bytes == fixture.facts["weight_elems"] * elem
    assert body["all-reduce"].depends_on == (f"c{body['all-gather'].id}",)
    # the body's matmul: 2 * 64 * 256 * 256 flops per iteration
    flops = sum(s.flops for s in loops[0].steps if isinstance(s, ComputeSegment))
    assert flops >= 2 * 64 * 256 * 256


def test_permute_ring_on_2x2() -> None:
    fixture = _fixture("permute_2x2")
    graph = _graph("permute_2x2")
    (cp,) = _by_kind(graph, "collective-permute")
    assert graph.collectives[cp].pairs == fixture.facts["pairs"]
    assert graph.collectives[cp].buffer_bytes == fixture.facts["bytes"]
    (ar,) = _by_kind(graph, "all-reduce")
    assert graph.collectives[ar].groups == ((0, 1, 2, 3),)
    assert graph.collectives[ar].depends_on == (f"c{cp}",)


@pytest.mark.pinned_libtpu
def test_jit_4x4_iota_collectives() -> None:
    fixture = _fixture("jit_4x4")
    graph = _graph("jit_4x4")
    assert {c.group_form for c in graph.collectives} == {"iota"}
    (ag,) = _by_kind(graph, "all-gather")
    (ar,) = _by_kind(graph, "all-reduce")
    assert graph.collectives[ag].buffer_bytes == fixture.facts["all-gather"]
    assert graph.collectives[ar].buffer_bytes == fixture.facts["all-reduce"]
    # w1 sharded over data on dim 0: gathered among devices sharing a "model" index
    assert graph.collectives[ag].groups == tuple(
        tuple(d + 4 * i for i in range(4)) for d in range(4)
    )
    assert graph.collectives[ar].groups == tuple(tuple(range(4 * i, 4 * i + 4)) for i in range(4))


def test_transformer_async_collective_fusions() -> None:
    fixture = _fixture("transformer_4x4")
    graph = _graph("transformer_4x4")
    (loop,) = [r for r in graph.regions if r.kind == "while"]
    assert loop.trip_count == fixture.facts["layers"] and loop.trip_count_source == "derived"
    fused = [c for c in graph.collectives if c.via == "async-fusion"]
    assert fused and all(c.is_async and c.kind == "all-gather" for c in fused)
    # one logical collective per (kind, channel) and region: start, overlap and done
    # fusions mention the same channel three times
    keys = [(c.region, c.kind, c.channel_id) for c in graph.collectives]
    assert len(keys) == len(set(keys))
    module = parse_module(fixture.text)
    mentions = sum(
        1
        for comp in module.computations.values()
        for i in comp.instructions
        if i.opcode == "all-gather" and i.attrs.get("channel_id") == str(fused[0].channel_id)
    )
    assert mentions >= 3
    steps = loop.steps
    for c in fused:
        start, done = steps.index(CollectiveStart(c.id)), steps.index(CollectiveDone(c.id))
        assert any(isinstance(s, ComputeSegment) and s.flops > 0 for s in steps[start:done])
    assert any(c.group_form == "mesh" for c in graph.collectives)
    assert [o.target for o in graph.opaques] == ["tpu_custom_call"]
    assert graph.opaques[0].count == fixture.facts["layers"]
    # the largest gathers are w1/w2 gathered over "seq" (8 ways): output (D/2) x F bf16
    d, f = compiled.TF_D, compiled.TF_F
    gathered = {c.buffer_bytes for c in graph.collectives if c.kind == "all-gather"}
    assert max(gathered) == (d // 2) * f * 2
