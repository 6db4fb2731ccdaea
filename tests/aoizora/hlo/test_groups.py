# ruff: noqa: E501  (HLO text lines are long by nature)
"""Replica groups: the three printed forms against jaxlib's own expansion (Hypothesis)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from aoizora.hlo.groups import (
    MeshAxis,
    ReplicaGroupError,
    expand_iota,
    format_iota,
    format_mesh,
    parse_pairs,
    parse_replica_groups,
)


def _jaxlib_expand(groups_text: str, num_devices: int) -> tuple[tuple[int, ...], ...]:
    """jaxlib's expansion of one replica_groups value (the oracle)."""
    from jax._src.lib import xla_client as xc

    text = f"""HloModule m, num_partitions={num_devices}

add {{
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT a = f32[] add(x, y)
}}

ENTRY e {{
  p = f32[8] parameter(0)
  ROOT ar = f32[8] all-reduce(p), channel_id=1, replica_groups={groups_text}, use_global_device_ids=true, to_apply=add
}}
"""
    printed = xc.hlo.hlo_module_from_text(text).to_string(xc.hlo.HloPrintOptions.fingerprint())
    m = re.search(r"replica_groups=(\{(?:\{[\d,]*\},?)*\})", printed)
    assert m is not None, printed
    inner = m.group(1)[1:-1]
    return tuple(tuple(int(v) for v in g.split(",")) for g in re.findall(r"\{([\d,]+)\}", inner))


@st.composite
def iota_forms(draw: st.DrawFn) -> tuple[int, int, list[int], list[int] | None]:
    dims = draw(st.lists(st.sampled_from([1, 2, 3, 4]), min_size=1, max_size=4))
    total = math.prod(dims)
    divisors = [d for d in range(1, total + 1) if total % d == 0]
    group_size = draw(st.sampled_from(divisors))
    # XLA prints T(...) exactly when there are two or more reshape dims.
    perm = list(draw(st.permutations(list(range(len(dims)))))) if len(dims) > 1 else None
    return total // group_size, group_size, dims, perm


@given(iota_forms())
def test_iota_round_trip_matches_jaxlib(form: tuple[int, int, list[int], list[int] | None]) -> None:
    num_groups, group_size, dims, perm = form
    text = format_iota(num_groups, group_size, dims, perm)
    total = num_groups * group_size
    ours = parse_replica_groups(text, num_devices=total)
    assert ours.form == "iota" and ours.text == text
    assert ours.groups == expand_iota(num_groups, group_size, dims, perm)
    # every device exactly once, and jaxlib agrees
    assert sorted(d for g in ours.groups for d in g) == list(range(total))
    assert ours.groups == _jaxlib_expand(text, total)


@st.composite
def mesh_forms(
    draw: st.DrawFn,
) -> tuple[list[str], list[int], list[int] | None, list[MeshAxis]]:
    sizes = draw(st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=3))
    names = [f"ax{i}" for i in range(len(sizes))]
    total = math.prod(sizes)
    ids: list[int] | None = None
    if total > 1 and draw(st.booleans()):
        perm = list(draw(st.permutations(list(range(total)))))
        ids = None if perm == list(range(total)) else perm  # jaxlib rejects an iota list
    big = [i for i, s in enumerate(sizes) if s >= 4]
    axes: list[MeshAxis]
    if big and draw(st.booleans()):
        i = draw(st.sampled_from(big))
        size = draw(st.sampled_from([d for d in (2, 4) if d < sizes[i]]))
        pre = draw(st.sampled_from([p for p in (1, 2, 4) if sizes[i] % (p * size) == 0]))
        axes = [MeshAxis(names[i], pre, size)]
        others = [j for j in range(len(sizes)) if j != i and sizes[j] > 1]
        if others and draw(st.booleans()):
            axes.append(MeshAxis(names[draw(st.sampled_from(others))]))
    else:
        chosen = draw(st.permutations(list(range(len(sizes)))))
        k = draw(st.integers(1, len(sizes)))
        axes = [MeshAxis(names[j]) for j in chosen[:k]]
    group = math.prod(a.size if a.size else sizes[names.index(a.name)] for a in axes)
    if group < 2:
        axes = [MeshAxis(names[max(range(len(sizes)), key=lambda j: sizes[j])])]
    return names, sizes, ids, axes


@given(mesh_forms())
def test_mesh_round_trip_matches_jaxlib(
    form: tuple[list[str], list[int], list[int] | None, list[MeshAxis]],
) -> None:
    names, sizes, ids, axes = form
    total = math.prod(sizes)
    if math.prod(a.size or sizes[names.index(a.name)] for a in axes) < 2:
        return  # a one-device mesh has no multi-device group (jaxlib rejects it)
    text = format_mesh(names, sizes, ids, axes)
    ours = parse_replica_groups(text, num_devices=total)
    assert ours.form == "mesh"
    assert sorted(d for g in ours.groups for d in g) == list(range(total))
    assert ours.groups == _jaxlib_expand(text, total)


def test_mesh_semantics_by_hand() -> None:
    # A group varies along the listed axes (listed order), others fixed, row-major.
    table = np.arange(8).reshape(2, 4)
    groups = parse_replica_groups("mesh['a'=2,'b'=4] {'b'}", num_devices=8).groups
    assert groups == tuple(tuple(int(v) for v in row) for row in table)
    groups = parse_replica_groups("mesh['a'=2,'b'=4] {'a'}", num_devices=8).groups
    assert groups == tuple(tuple(int(v) for v in col) for col in table.T)
    ids = "mesh['a'=2,'b'=4], device_ids=(0,2,4,6,1,3,5,7) {'b'}"
    assert parse_replica_groups(ids, num_devices=8).groups == ((0, 2, 4, 6), (1, 3, 5, 7))
    sub = "mesh['a'=8] {'a':(1)2,'a':(4)2}"
    assert parse_replica_groups(sub, num_devices=8).groups == ((0, 1, 4, 5), (2, 3, 6, 7))
    assert parse_replica_groups(sub, num_devices=8).groups == _jaxlib_expand(sub, 8)


def test_explicit_and_all() -> None:
    rg = parse_replica_groups("{{0,4},{1,5},{2,6},{3,7}}", num_devices=8)
    assert rg.form == "explicit" and rg.group_size == 2
    assert parse_replica_groups("{}", num_devices=4).groups == ((0, 1, 2, 3),)
    assert parse_pairs("{{0,1},{1,0}}", num_devices=2) == ((0, 1), (1, 0))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{{0,1},{2,8}}", "device 8, outside"),
        ("{{0,1},{1,2}}", "more than once"),
        ("[3,2]<=[4]", "need 6"),
        ("[2,2]<=[2,2]T(0,0)", "not a permutation"),
        ("mesh['a'=2,'b'=4] {'c'}", "not an axis"),
        ("mesh['a'=2,'b'=4] {'b':(1)3}", "does not fit"),
        ("mesh['a'=2,'b'=4], device_ids=(0,1,2) {'b'}", "3 entries"),
        ("{{0,x}}", "not a non-negative integer"),
    ],
)
def test_bad_groups(text: str, message: str) -> None:
    with pytest.raises(ReplicaGroupError, match=re.escape(message)):
        parse_replica_groups(text, num_devices=8)
    with pytest.raises(ReplicaGroupError, match="exactly two"):
        parse_pairs("{{0,1,2}}", num_devices=8)
