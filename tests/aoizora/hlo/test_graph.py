# ruff: noqa: E501  (HLO text lines are long by nature)
"""Graph rules on hand-written HLO for forms no compile here produced.

Generic ``async-start``/``async-done``, send/recv, conditionals, calls, mesh
groups with ``device_ids`` and sub-axes, and while conditions in other
directions. Every text is first accepted by jaxlib's own parser, so the
grammar is real; groups are checked against jaxlib's expansion.
"""

from __future__ import annotations

import pytest

from aoizora.hlo.graph import graph_from_text
from aoizora.hlo.nodes import CollectiveDone, CollectiveStart, ComputeSegment, SubRegion
from tests.aoizora.hlo.compiled import jaxlib_groups

ASYNC = """HloModule m, is_scheduled=true, num_partitions=8

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}

%wrapped (a: f32[256,128]) -> f32[256,128] {
  %a = f32[256,128]{1,0} parameter(0)
  ROOT %ar = f32[256,128]{1,0} all-reduce(%a), channel_id=3, replica_groups=mesh['x'=2,'y'=4], device_ids=(0,2,4,6,1,3,5,7) {'y':(2)2}, use_global_device_ids=true, to_apply=%add
}

ENTRY %main (p: f32[256,128], w: f32[128,128]) -> f32[256,128] {
  %p = f32[256,128]{1,0} parameter(0)
  %w = f32[128,128]{1,0} parameter(1)
  %start = ((f32[256,128]{1,0}), f32[256,128]{1,0}) async-start(%p), calls=%wrapped
  %d = f32[256,128]{1,0} dot(%p, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %done = f32[256,128]{1,0} async-done(%start)
  %ag-start = (f32[256,128]{1,0}, f32[512,128]{1,0}) all-gather-start(%done), channel_id=4, replica_groups=[4,2]<=[2,4]T(1,0), dimensions={0}, use_global_device_ids=true
  %ag-done = f32[512,128]{1,0} all-gather-done(%ag-start)
  ROOT %out = f32[256,128]{1,0} add(%d, %done)
}
"""

SENDRECV = """HloModule m, is_scheduled=true, num_partitions=4

ENTRY %main (p: f32[1024]) -> f32[1024] {
  %p = f32[1024]{0} parameter(0)
  %tok = token[] after-all()
  %recv = (f32[1024]{0}, u32[], token[]) recv(%tok), channel_id=7, frontend_attributes={_xla_send_recv_source_target_pairs="{{0,1},{1,2},{2,3}}"}
  %send = (f32[1024]{0}, u32[], token[]) send(%p, %tok), channel_id=7, frontend_attributes={_xla_send_recv_source_target_pairs="{{0,1},{1,2},{2,3}}"}
  %recv-done = (f32[1024]{0}, token[]) recv-done(%recv), channel_id=7
  %send-done = token[] send-done(%send), channel_id=7
  ROOT %data = f32[1024]{0} get-tuple-element(%recv-done), index=0
}
"""

CONTROL = """HloModule m, is_scheduled=true, num_partitions=4

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}

%callee (a: f32[64]) -> f32[64] {
  %a = f32[64]{0} parameter(0)
  ROOT %ar = f32[64]{0} all-reduce(%a), channel_id=1, replica_groups={{0,1},{2,3}}, use_global_device_ids=true, to_apply=%add
}

%yes (b: f32[64]) -> f32[64] {
  %b = f32[64]{0} parameter(0)
  ROOT %cp = f32[64]{0} collective-permute(%b), channel_id=2, source_target_pairs={{0,1},{1,0}}
}

%no (c: f32[64]) -> f32[64] {
  ROOT %c = f32[64]{0} parameter(0)
}

%cond (t: (s32[], f32[64])) -> pred[] {
  %t = (s32[], f32[64]{0}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %lim = s32[] constant(0)
  ROOT %cmp = pred[] compare(%i, %lim), direction=GT
}

%body (u: (s32[], f32[64])) -> (s32[], f32[64]) {
  %u = (s32[], f32[64]{0}) parameter(0)
  %j = s32[] get-tuple-element(%u), index=0
  %v = f32[64]{0} get-tuple-element(%u), index=1
  %g = f32[128]{0} all-gather(%v), channel_id=3, replica_groups={{0,2},{1,3}}, dimensions={0}, use_global_device_ids=true
  %sl = f32[64]{0} slice(%g), slice={[0:64]}
  %three = s32[] constant(3)
  %k = s32[] subtract(%j, %three)
  ROOT %r = (s32[], f32[64]{0}) tuple(%k, %sl)
}

ENTRY %main (p: f32[64], q: pred[]) -> f32[64] {
  %p = f32[64]{0} parameter(0)
  %q = pred[] parameter(1)
  %c1 = f32[64]{0} call(%p), to_apply=%callee
  %c2 = f32[64]{0} conditional(%q, %c1, %c1), true_computation=%yes, false_computation=%no
  %ten = s32[] constant(10)
  %init = (s32[], f32[64]{0}) tuple(%ten, %c2)
  %loop = (s32[], f32[64]{0}) while(%init), condition=%cond, body=%body
  ROOT %out = f32[64]{0} get-tuple-element(%loop), index=1
}
"""


def _jaxlib_accepts(text: str) -> None:
    from jax._src.lib import xla_client as xc

    xc.hlo.hlo_module_from_text(text)


def test_generic_async_and_all_gather_start() -> None:
    _jaxlib_accepts(ASYNC)
    g = graph_from_text(ASYNC)
    ar, ag = g.collectives
    assert (ar.kind, ar.via, ar.is_async, ar.group_form) == (
        "all-reduce",
        "async-wrapper",
        True,
        "mesh",
    )
    # device_ids (0,2,4,6,1,3,5,7) on a 2x4 mesh, sub-axis 'y':(2)2 -> pairs along y's minor half
    assert ar.groups == ((0, 2), (4, 6), (1, 3), (5, 7))
    assert (ag.kind, ag.via, ag.groups) == (
        "all-gather",
        "async-op",
        ((0, 4), (1, 5), (2, 6), (3, 7)),
    )
    assert ag.operand_bytes == 256 * 128 * 4 and ag.result_bytes == ag.buffer_bytes == 512 * 128 * 4
    steps = g.regions[0].steps
    window = steps[steps.index(CollectiveStart(0)) + 1 : steps.index(CollectiveDone(0))]
    assert [type(s) for s in window] == [ComputeSegment]  # the dot overlaps the all-reduce
    assert window[0].flops == 2 * 256 * 128 * 128
    assert ag.depends_on == ("c0",)
    assert {(c.kind, c.channel_id, c.groups) for c in g.collectives} == jaxlib_groups(ASYNC)


def test_send_recv_is_one_collective() -> None:
    _jaxlib_accepts(SENDRECV)
    g = graph_from_text(SENDRECV)
    (c,) = g.collectives
    assert (c.kind, c.pairs, c.buffer_bytes, c.is_async) == (
        "send",
        ((0, 1), (1, 2), (2, 3)),
        4096,
        True,
    )
    steps = g.regions[0].steps
    assert steps == (CollectiveStart(0), CollectiveDone(0))
    assert g.to_json_dict()["collectives"] == [
        {"kind": "send", "pairs": [[0, 1], [1, 2], [2, 3]], "bytes_per_device": 4096, "count": 1}
    ]


def test_call_conditional_and_counting_down_loop() -> None:
    _jaxlib_accepts(CONTROL)
    g = graph_from_text(CONTROL)
    kinds = {r.kind: r for r in g.regions}
    assert set(kinds) == {"entry", "call", "branch", "while"}
    loop = kinds["while"]
    # i = 10; while i > 0: i -= 3  -> 10, 7, 4, 1: four iterations
    assert (loop.trip_count, loop.trip_count_source, loop.count) == (4, "derived", 4)
    by_kind = {c.kind: c for c in g.collectives}
    assert by_kind["all-gather"].count == 4 and by_kind["all-reduce"].count == 1
    assert by_kind["collective-permute"].pairs == ((0, 1), (1, 0))
    entry_subs = [s for s in g.regions[0].steps if isinstance(s, SubRegion)]
    assert [s.kind for s in entry_subs] == ["call", "conditional", "while"]
    assert len(entry_subs[1].regions) == 2
    assert any("conditional %c2" in w for w in g.warnings)


@pytest.mark.parametrize(
    ("direction", "init", "bound", "step", "trips"),
    [
        ("LT", 0, 30, 1, 30),
        ("LE", 0, 30, 1, 31),
        ("LT", 3, 30, 4, 7),
        ("NE", 0, 12, 3, 4),
        ("GE", 9, 0, -3, 4),
    ],
)
def test_trip_count_derivation(
    direction: str, init: int, bound: int, step: int, trips: int
) -> None:
    op = "add" if step > 0 else "subtract"
    text = f"""HloModule m, num_partitions=1

%cond (t: (s32[], f32[4])) -> pred[] {{
  %t = (s32[], f32[4]{{0}}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %n = s32[] constant({bound})
  ROOT %c = pred[] compare(%i, %n), direction={direction}
}}

%body (u: (s32[], f32[4])) -> (s32[], f32[4]) {{
  %u = (s32[], f32[4]{{0}}) parameter(0)
  %j = s32[] get-tuple-element(%u), index=0
  %v = f32[4]{{0}} get-tuple-element(%u), index=1
  %one = s32[] constant({abs(step)})
  %k = s32[] {op}(%j, %one)
  %kk = s32[] copy(%k)
  ROOT %r = (s32[], f32[4]{{0}}) tuple(%kk, %v)
}}

ENTRY %main (p: f32[4]) -> f32[4] {{
  %p = f32[4]{{0}} parameter(0)
  %zero = s32[] constant({init})
  %z = s32[] copy(%zero)
  %init = (s32[], f32[4]{{0}}) tuple(%z, %p)
  %loop = (s32[], f32[4]{{0}}) while(%init), condition=%cond, body=%body
  ROOT %out = f32[4]{{0}} get-tuple-element(%loop), index=1
}}
"""
    _jaxlib_accepts(text)
    g = graph_from_text(text)
    assert g.regions[1].trip_count == trips
    assert g.regions[1].trip_count_source == "derived"


def test_unknown_trip_count_is_reported() -> None:
    text = CONTROL.replace(
        "%lim = s32[] constant(0)", "%lim = s32[] get-tuple-element(%t), index=0"
    )
    g = graph_from_text(text)
    loop = next(r for r in g.regions if r.kind == "while")
    assert (loop.trip_count, loop.trip_count_source) == (1, "unknown")
    assert any("trip count of while %loop" in w for w in g.warnings)


def test_known_trip_count_wins() -> None:
    text = CONTROL.replace(
        "condition=%cond, body=%body",
        'condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"40"}}',
    )
    g = graph_from_text(text)
    loop = next(r for r in g.regions if r.kind == "while")
    assert (loop.trip_count, loop.trip_count_source) == (40, "known_trip_count")
