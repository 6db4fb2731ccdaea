# ruff: noqa: E501  (HLO text lines are long by nature)
"""Every replica-group form XLA prints, as several libtpu versions printed them, against jaxlib.

The oracle is jaxlib's own reading: ``hlo_module_from_text`` parses the value and the
fingerprint printer writes the groups out as explicit lists (``_jaxlib_expand``).
fixtures/replica_groups.txt holds instruction lines verbatim, each headed by the jax and
libtpu that printed it (issue 34: libtpu 0.0.42.1 printed ``device_ids`` as an iota).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aoizora.hlo.graph import graph_from_text
from aoizora.hlo.groups import (
    MeshAxis,
    ReplicaGroupError,
    expand_iota,
    expand_mesh_ids,
    format_mesh,
    parse_replica_groups,
)
from aoizora.hlo.text import parse_module
from tests.aoizora.hlo.test_groups import _jaxlib_expand  # the oracle: jaxlib's reading

FIXTURES = Path(__file__).parent / "fixtures" / "replica_groups.txt"
_SHAPE = re.compile(r"=\s*(\S+)\s+[a-z][a-z0-9\-]*\(")
_OPERANDS = re.compile(r"[a-z][a-z0-9\-]*\(([^)]*)\)")
_CALLS = re.compile(r"to_apply=%([\w.\-]+)")


def _cases() -> list[tuple[str, int, str]]:
    """(printed by, devices, instruction line) of every fixture case."""
    lines = FIXTURES.read_text(encoding="utf-8").splitlines()
    cases = []
    for head, line in zip(lines, lines[1:], strict=False):
        if head.startswith("## "):
            devices = re.search(r"devices=(\d+)", head)
            assert devices is not None, head
            cases.append((head[3:], int(devices.group(1)), line))
    return cases


def _module(line: str, num_devices: int) -> str:
    """A module around one fixture line: its operands as parameters, its reducer defined."""
    line = re.sub(r"^ROOT\s+", "", line)  # some collectives were the root of their computation
    shape = _SHAPE.search(line)
    operands = _OPERANDS.search(line)
    assert shape is not None and operands is not None, line
    params = [
        f"  {name.strip()} = {shape.group(1)} parameter({i})"
        for i, name in enumerate(operands.group(1).split(","))
    ]
    reducers = [
        f"%{name} (x: f32[], y: f32[]) -> f32[] {{\n  %x = f32[] parameter(0)\n"
        f"  %y = f32[] parameter(1)\n  ROOT %a = f32[] add(%x, %y)\n}}\n"
        for name in sorted(set(_CALLS.findall(line)))
    ]
    body = "\n".join([*params, f"  ROOT {line}"])
    return f"HloModule m, num_partitions={num_devices}\n\n{''.join(reducers)}\nENTRY %e {{\n{body}\n}}\n"


def test_fixture_cover_every_form() -> None:
    values = [
        parse_module(_module(line, n)).entry.root.attrs["replica_groups"] for _, n, line in _cases()
    ]
    forms = {
        parse_replica_groups(v, num_devices=n).form
        for v, (_, n, _) in zip(values, _cases(), strict=True)
    }
    assert forms == {"explicit", "iota", "mesh"}
    assert any("T(" in v and v.startswith("[") for v in values)  # iota with a transpose
    assert any("device_ids=([" in v for v in values)  # issue 34's form
    versions = {v for head, _, _ in _cases() for v in re.findall(r"libtpu ([\d.]+\d)", head)}
    assert versions == {"0.0.42.1", "0.0.52"}


@pytest.mark.parametrize(("printed_by", "num_devices", "line"), _cases(), ids=lambda v: str(v)[:40])
def test_fixture_line_matches_jaxlib(printed_by: str, num_devices: int, line: str) -> None:
    module = parse_module(_module(line, num_devices))
    value = module.entry.root.attrs["replica_groups"]
    ours = parse_replica_groups(value, num_devices=num_devices)
    assert ours.groups == _jaxlib_expand(value, num_devices), printed_by
    # the collective graph reads the same groups (the path `aoizora plan` takes)
    (collective,) = graph_from_text(_module(line, num_devices)).collectives
    assert collective.groups == ours.groups and collective.group_form == ours.form


def test_issue_34_line() -> None:
    # libtpu 0.0.42.1 on a v5e host: the mesh's devices are iota(4).reshape(2,2).T, so
    # mesh position (i, j) holds device 2j + i and a group along axis_0 is {2j, 2j+1}.
    value = "mesh['axis_0'=2,'axis_1'=2], device_ids=([2,2]T(1,0)) {'axis_0'}"
    groups = parse_replica_groups(value, num_devices=4)
    assert groups.form == "mesh" and groups.groups == ((0, 1), (2, 3))
    assert groups.groups == _jaxlib_expand(value, 4)
    # the same devices listed explicitly are the same groups
    assert (
        parse_replica_groups(value.replace("[2,2]T(1,0)", "0,2,1,3"), num_devices=4).groups
        == groups.groups
    )


@st.composite
def iota_ids(draw: st.DrawFn) -> tuple[list[str], list[int], str, list[MeshAxis]]:
    """A mesh whose device_ids are an iota ``[r...]T(p...)`` and a group along some axes."""
    sizes = draw(st.lists(st.sampled_from([2, 4]), min_size=1, max_size=3))
    names = [f"ax{i}" for i in range(len(sizes))]
    total = math.prod(sizes)
    factors = draw(st.sampled_from(_factorings(total)))
    perm = list(draw(st.permutations(list(range(len(factors))))))
    # jaxlib prints (and reads) T(...) exactly when there are two or more reshape dims
    ids = f"[{','.join(map(str, factors))}]" + (
        f"T({','.join(map(str, perm))})" if len(factors) > 1 else ""
    )
    chosen = draw(st.permutations(list(range(len(sizes)))))
    k = draw(st.integers(1, len(sizes)))
    return names, sizes, ids, [MeshAxis(names[j]) for j in chosen[:k]]


def _factorings(n: int) -> list[list[int]]:
    """Every ordered factoring of ``n`` into factors >= 2 (at most 3)."""
    out = [[n]]
    for d in range(2, n):
        if n % d == 0:
            out.extend([d, *rest] for rest in _factorings(n // d) if len(rest) < 3)
    return out


@given(iota_ids())
def test_mesh_with_iota_device_ids_matches_jaxlib(
    form: tuple[list[str], list[int], str, list[MeshAxis]],
) -> None:
    names, sizes, ids, axes = form
    total = math.prod(sizes)
    text = format_mesh(names, sizes, ids, axes)
    ours = parse_replica_groups(text, num_devices=total)
    assert ours.form == "mesh"
    assert sorted(d for g in ours.groups for d in g) == list(range(total))
    assert ours.groups == _jaxlib_expand(text, total)


def test_iota_ids_with_dims_prefix() -> None:
    # The tile-assignment spelling "[4]<=[2,2]T(1,0)" names the same devices as "[2,2]T(1,0)";
    # jaxlib 0.10.2 refuses it in device_ids, so the oracle is the short form's expansion.
    assert (
        expand_mesh_ids("[4]<=[2,2]T(1,0)", 4) == expand_mesh_ids("[2,2]T(1,0)", 4) == (0, 2, 1, 3)
    )
    long = "mesh['a'=2,'b'=4], device_ids=([2,4]<=[2,2,2]T(2,1,0)) {'b'}"
    short = "mesh['a'=2,'b'=4], device_ids=([2,2,2]T(2,1,0)) {'b'}"
    assert parse_replica_groups(long, num_devices=8).groups == _jaxlib_expand(short, 8)
    assert expand_mesh_ids("[8]", 8) == tuple(range(8))
    assert expand_iota(1, 8, [2, 4], [1, 0]) == ((0, 4, 1, 5, 2, 6, 3, 7),)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("mesh['a'=2,'b'=4], device_ids=([2,2]T(1,0)) {'b'}", "hold 4 devices but the mesh has 8"),
        ("mesh['a'=2,'b'=2], device_ids=([2,2]T(0,0)) {'b'}", "not a permutation of 0..1"),
        ("mesh['a'=2,'b'=2], device_ids=([8]<=[2,2]T(1,0)) {'b'}", "before '<=' hold 8"),
        ("mesh['a'=2,'b'=2], device_ids=([2,2]X(1,0)) {'b'}", "neither a list of ids nor an iota"),
        ("mesh['a'=2,'b'=2], device_ids=(0,1,1,3) {'b'}", "not a permutation of 0..3"),
        ("mesh['a'=2,'b'=2], device_ids=((1,0)) {'b'}", "'(1' is not a non-negative integer id"),
    ],
)
def test_bad_device_ids(text: str, message: str) -> None:
    with pytest.raises(ReplicaGroupError, match=re.escape(message)):
        parse_replica_groups(text, num_devices=4 if "'b'=2" in text else 8)
