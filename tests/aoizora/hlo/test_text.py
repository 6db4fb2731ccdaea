# ruff: noqa: E501  (HLO text lines are long by nature)
"""Shapes and the text parser: layouts, tuples, multi-form lines, and errors naming the line."""

from __future__ import annotations

import pytest

from aoizora.errors import HloParseError
from aoizora.hlo.graph import graph_from_text
from aoizora.hlo.nodes import ComputeSegment
from aoizora.hlo.shapes import Shape, ShapeSyntaxError, parse_shape
from aoizora.hlo.text import parse_module, split_top_level

GOOD = """HloModule m, is_scheduled=true, num_partitions=4

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}

ENTRY %main (p: f32[8,128]) -> f32[8,128] {
  %p = f32[8,128]{1,0:T(8,128)S(1)} parameter(0)
  %q = f32[8,128]{1,0:T(8,128)} frobnicate(%p), flavour={a,b}
  ROOT %ar = f32[8,128]{1,0:T(8,128)} all-reduce(%q), channel_id=1, replica_groups={{0,1},{2,3}}, use_global_device_ids=true, to_apply=%add, backend_config={"debug":"x{,}y","n":[1,{"a":2}]}
}
"""


@pytest.mark.parametrize(
    ("text", "size", "leaves"),
    [
        ("f32[32,64]{1,0:T(8,128)S(1)}", 32 * 64 * 4, 1),
        ("bf16[5,64,256]{2,1,0:T(8,128)(2,1)S(1)}", 5 * 64 * 256 * 2, 1),
        ("f32[]{:T(128)}", 4, 1),
        (
            "(f32[32,64]{1,0:T(8,128)}, f32[32,64]{1,0:T(8,128)S(1)}, u32[]{:S(2)}, u32[]{:S(2)})",
            2 * 32 * 64 * 4 + 8,
            4,
        ),
        ("(s32[], /*index=1*/(bf16[2], pred[3]), token[])", 4 + 4 + 3, 4),
        ("s4[3]{0}", 2, 1),  # 12 bits round up to 2 bytes
        ("f32[<=10,4]", 160, 1),  # a bounded dynamic dim counts its bound
        ("()", 0, 0),
    ],
)
def test_shape_sizes(text: str, size: int, leaves: int) -> None:
    shape, end = parse_shape(text + " tail", 0)
    assert shape.size_bytes == size
    assert len(shape.leaves()) == leaves if shape.is_tuple else leaves == 1
    assert text.endswith(text[end - 1])  # the shape ends at its last character
    assert (text + " tail")[end:] == " tail"


def test_shape_str_and_errors() -> None:
    shape, _ = parse_shape("(f32[2,3]{1,0}, u8[])", 0)
    assert str(shape) == "(f32[2,3], u8[])"
    assert shape.tuple_shapes[0] == Shape("f32", (2, 3))
    with pytest.raises(ShapeSyntaxError, match="unknown element type 'q7'"):
        parse_shape("q7[2]", 0)
    with pytest.raises(ShapeSyntaxError, match="expected a shape"):
        parse_shape("%x", 0)


def test_split_top_level_keeps_nesting_and_strings() -> None:
    parts, end = split_top_level('a={1,2}, b="x,)}", c=(3,[4,5]))!', 0, ")")
    assert parts == ["a={1,2}", 'b="x,)}"', "c=(3,[4,5])"]
    assert end == len('a={1,2}, b="x,)}", c=(3,[4,5]))')
    with pytest.raises(ValueError, match="missing"):
        split_top_level("a={1,2", 0, None)


def test_parse_good_module() -> None:
    m = parse_module(GOOD)
    assert m.num_partitions == 4 and m.is_scheduled and m.entry_name == "main"
    root = m.entry.root
    assert root.opcode == "all-reduce" and root.operands == ("q",)
    assert root.attrs["channel_id"] == "1"
    assert root.attrs["backend_config"] == '{"debug":"x{,}y","n":[1,{"a":2}]}'
    assert root.called() == ("add",)
    assert [i.name for i in m.entry.instructions] == ["p", "q", "ar"]
    assert m.computations["add"].parameter(1) is not None


def test_unknown_opcode_passes_through_as_compute() -> None:
    g = graph_from_text(GOOD)
    steps = g.regions[0].steps
    assert isinstance(steps[0], ComputeSegment)  # frobnicate: 1 read + 1 write of 4 KiB
    # %p lives in memory space S(1) (on chip): its read is not HBM traffic, the write is.
    (work,) = steps[0].kernels
    assert (work.hbm_bytes, work.onchip_bytes) == (8 * 128 * 4, 8 * 128 * 4)
    assert steps[0].bytes_accessed == 8 * 128 * 4
    assert [c.kind for c in g.collectives] == ["all-reduce"]


def test_operands_with_shapes_are_accepted() -> None:
    text = GOOD.replace("frobnicate(%p)", "frobnicate(f32[8,128]{1,0} %p)")
    assert parse_module(text).entry.by_name["q"].operands == ("p",)


@pytest.mark.parametrize(
    ("mutate", "line", "message"),
    [
        (lambda t: t[: t.index("  ROOT %ar")], 9, "not closed"),
        (lambda t: t.replace("HloModule m,", "HloModul m,"), 1, "HloModule"),
        (lambda t: t.replace("frobnicate(%p)", "frobnicate(%nope)"), 11, "operand %nope"),
        (
            lambda t: t.replace("f32[8,128]{1,0:T(8,128)} frobnicate", "f99[8] frobnicate"),
            11,
            "unknown element type",
        ),
        (lambda t: t.replace("%q = f32", "%q == f32"), 11, "shape"),
        (
            lambda t: t.replace("frobnicate(%p), flavour={a,b}", "frobnicate(%p), flavour={a,b"),
            11,
            "attribute list",
        ),
        (lambda t: t.replace("to_apply=%add", "to_apply=%sub"), 12, "%sub, which is not defined"),
        (lambda t: t.replace("num_partitions=4", "num_partitions=zero"), 1, "num_partitions"),
        (lambda t: t.replace("{{0,1},{2,3}}", "{{0,1},{2,9}}"), 12, "device 9"),
        (lambda t: t.replace("{{0,1},{2,3}}", "[2,2]<=[5]"), 12, "iota"),
        (lambda t: t.replace("{{0,1},{2,3}}", "sideways(0,1)"), 12, "no known form"),
        (lambda t: t.replace("ENTRY %main", "%main"), 0, "no ENTRY"),
        (
            lambda t: t.replace(
                "  %p = f32[8,128]{1,0:T(8,128)S(1)} parameter(0)\n", "  garbage\n"
            ),
            10,
            "expected an instruction",
        ),
    ],
)
def test_bad_input_names_the_line(mutate, line: int, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(HloParseError, match=message) as info:
        graph_from_text(mutate(GOOD))
    if line:
        assert str(info.value).startswith(f"line {line}:")


def test_garbled_bytes_and_empty_text() -> None:
    with pytest.raises(HloParseError, match="line 1"):
        graph_from_text("")
    with pytest.raises(HloParseError):
        graph_from_text(GOOD.replace("{", "<", 3))
