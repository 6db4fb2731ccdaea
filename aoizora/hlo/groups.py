"""Replica groups and source-target pairs of compiled HLO collectives.

XLA prints ``replica_groups=`` in three forms (openxla/xla
``xla/hlo/ir/replica_group.cc``, ``collective_device_list``; all three occur in
one TPU-compiled module):

1. explicit lists ``{{0,1},{2,3}}``; ``{}`` means one group of every device;
2. iota ``[G,S]<=[d0,d1,...]T(p0,p1,...)``: the groups are the rows of
   ``iota(prod d).reshape(d).transpose(p).reshape(G, S)`` (``T(...)`` optional);
3. mesh axes ``mesh['a'=2,'b'=4] {'b'}`` with an optional
   ``, device_ids=(...)`` after the mesh and sub-axes ``'b':(pre)size``: a group
   holds the devices that vary along the listed axes (in the listed order) while
   the other axes stay fixed. A sub-axis ``(pre)size`` of an axis of size n
   splits it as ``[pre, size, n/(pre*size)]`` (major to minor) and varies the
   middle part; several sub-axes of one axis split it at their ``pre`` sizes.
   Groups come out in row-major order of the fixed axes
   (``MeshAxesReplicaGroupList::flattened_replica_groups``).

``device_ids=(...)`` gives the device at each mesh position (row-major), printed
(``Mesh::ToString``, ``TileAssignment::ArrayToString``) either as a list
``(0,2,1,3)`` or, when the mesh's device assignment is an iota, as its reshape and
transpose ``([2,2]T(1,0))`` = ``iota(4).reshape(2,2).transpose(1,0)`` flattened
(libtpu 0.0.42.1 printed ``mesh['axis_0'=2,'axis_1'=2], device_ids=([2,2]T(1,0))
{'axis_0'}`` for a v5e:2x2 plan; issue 34). The tile-assignment spelling with its
dims first, ``([4]<=[2,2]T(1,0))``, is read as well (jaxlib 0.10.2's own parser
refuses it, but it is the form XLA prints for shardings).
tests/aoizora/hlo/fixtures/replica_groups.txt holds lines as each version printed them.

Ids are logical device ids (``use_global_device_ids=true`` or cross-partition
mode with one replica): id ``i`` is ``mesh.devices.flat[i]``.

Example:
    >>> parse_replica_groups("[4,2]<=[2,4]T(1,0)", num_devices=8).groups
    ((0, 4), (1, 5), (2, 6), (3, 7))
    >>> parse_replica_groups("mesh['a'=2,'b'=4] {'b':(1)2}", num_devices=8).groups
    ((0, 2), (1, 3), (4, 6), (5, 7))
    >>> parse_replica_groups("mesh['a'=2,'b'=2], device_ids=([2,2]T(1,0)) {'a'}",
    ...                      num_devices=4).groups
    ((0, 1), (2, 3))
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from aoizora.errors import HloParseError

__all__ = [
    "MeshAxis",
    "ReplicaGroupError",
    "ReplicaGroups",
    "expand_iota",
    "expand_mesh",
    "expand_mesh_ids",
    "format_iota",
    "format_mesh",
    "parse_pairs",
    "parse_replica_groups",
]

_IOTA_RE = re.compile(r"\[(\d+),(\d+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?")
# device_ids=(...) may nest one level of parentheses: ([2,2]T(1,0)).
_MESH_RE = re.compile(
    r"mesh\[([^\]]*)\]\s*(?:,\s*device_ids=\(((?:[^()]|\([^()]*\))*)\))?\s*\{([^}]*)\}"
)
# An iota device assignment: [reshape dims] with T(perm) (optionally [dims]<= first).
_IDS_IOTA_RE = re.compile(r"(?:\[([\d,]+)\]<=)?\[([\d,]+)\](?:T\(([\d,]+)\))?")
_NAME = r"""(?:'([^']*)'|"([^"]*)"|([A-Za-z_][\w]*))"""
_MESH_AXIS_RE = re.compile(rf"\s*{_NAME}\s*=\s*(\d+)\s*")
_AXIS_REF_RE = re.compile(rf"\s*{_NAME}\s*(?::\s*\((\d+)\)\s*(\d+))?\s*")


class ReplicaGroupError(HloParseError):
    """Replica groups or source-target pairs that are malformed or name bad devices."""


@dataclass(frozen=True)
class ReplicaGroups:
    """Expanded replica groups and the printed form they came from.

    ``form`` is ``"explicit"``, ``"iota"``, ``"mesh"`` or ``"all"`` (``{}``).
    """

    form: str
    groups: tuple[tuple[int, ...], ...]
    text: str

    @property
    def group_size(self) -> int:
        return max((len(g) for g in self.groups), default=0)


@dataclass(frozen=True)
class MeshAxis:
    """One axis reference of a mesh-axes group: ``name`` or ``name:(pre)size``."""

    name: str
    pre_size: int | None = None
    size: int | None = None


def expand_iota(
    num_groups: int, group_size: int, reshape_dims: Sequence[int], perm: Sequence[int] | None
) -> tuple[tuple[int, ...], ...]:
    """Groups of ``[num_groups,group_size]<=[reshape_dims]T(perm)``.

    >>> expand_iota(2, 4, [8], None)
    ((0, 1, 2, 3), (4, 5, 6, 7))
    """
    dims = [int(d) for d in reshape_dims]
    total = math.prod(dims)
    if total != num_groups * group_size:
        raise ReplicaGroupError(
            f"iota replica groups [{num_groups},{group_size}]<=[{','.join(map(str, dims))}]: "
            f"the reshape dims hold {total} devices but {num_groups} groups of {group_size} "
            f"need {num_groups * group_size} (e.g. [4,2]<=[2,4]T(1,0))"
        )
    order = list(range(len(dims))) if perm is None else [int(p) for p in perm]
    if sorted(order) != list(range(len(dims))):
        raise ReplicaGroupError(
            f"iota transpose T({','.join(map(str, order))}) is not a permutation of "
            f"0..{len(dims) - 1} (e.g. T(1,0) for two reshape dims)"
        )
    table = np.arange(total, dtype=np.int64).reshape(dims).transpose(order)
    rows = table.reshape(num_groups, group_size).tolist()
    return tuple(tuple(int(v) for v in row) for row in rows)


def format_iota(
    num_groups: int, group_size: int, reshape_dims: Sequence[int], perm: Sequence[int] | None
) -> str:
    """The printed iota form (inverse of the parser)."""
    text = f"[{num_groups},{group_size}]<=[{','.join(str(int(d)) for d in reshape_dims)}]"
    if perm is not None:
        text += f"T({','.join(str(int(p)) for p in perm)})"
    return text


def _axis_split(refs: list[MeshAxis], full: int, name: str) -> tuple[list[int], list[int]]:
    """Reshape of one mesh axis and the positions of ``refs`` in it (listed order)."""
    if len(refs) == 1 and refs[0].pre_size is None:
        return [full], [0]
    if any(r.pre_size is None or r.size is None for r in refs):
        raise ReplicaGroupError(
            f"mesh axis {name!r} is listed whole and as a sub-axis in one replica group "
            f"(list it once, e.g. {{'{name}'}} or {{'{name}':(1)2}})"
        )
    order = sorted(range(len(refs)), key=lambda i: int(refs[i].pre_size or 0))
    dims: list[int] = []
    position = [0] * len(refs)
    prefix = 1
    for i in order:
        pre, size = int(refs[i].pre_size or 0), int(refs[i].size or 0)
        if pre < 1 or size < 2 or full % (pre * size) != 0 or pre % prefix != 0:
            raise ReplicaGroupError(
                f"sub-axis {name!r}:({pre}){size} does not fit axis {name!r} of size {full} "
                f"(need pre >= 1, size >= 2, pre*size dividing {full}, no overlap; "
                f"e.g. '{name}':(1)2)"
            )
        if pre != prefix:
            dims.append(pre // prefix)
            prefix = pre
        position[i] = len(dims)
        dims.append(size)
        prefix *= size
    if prefix != full:
        dims.append(full // prefix)
    return dims, position


def expand_mesh(
    axis_names: Sequence[str],
    axis_sizes: Sequence[int],
    device_ids: Sequence[int] | None,
    axes: Sequence[MeshAxis],
) -> tuple[tuple[int, ...], ...]:
    """Groups of a mesh-axes replica group list (see the module docstring).

    >>> expand_mesh(["a", "b"], [2, 4], None, [MeshAxis("b"), MeshAxis("a")])
    ((0, 4, 1, 5, 2, 6, 3, 7),)
    """
    names = list(axis_names)
    sizes = [int(s) for s in axis_sizes]
    total = math.prod(sizes)
    if device_ids is None:
        table = np.arange(total, dtype=np.int64)
    else:
        table = np.asarray([int(d) for d in device_ids], dtype=np.int64)
        if table.size != total:
            raise ReplicaGroupError(
                f"mesh device_ids has {table.size} entries but the mesh "
                f"{dict(zip(names, sizes, strict=True))} has {total} devices"
            )
    if not axes:
        raise ReplicaGroupError(
            "a mesh-axes replica group lists no axes (e.g. mesh['a'=2,'b'=4] {'b'})"
        )
    by_axis: dict[int, list[MeshAxis]] = {}
    for ref in axes:
        if ref.name not in names:
            raise ReplicaGroupError(
                f"replica group axis {ref.name!r} is not an axis of the mesh "
                f"(axes: {', '.join(repr(n) for n in names)})"
            )
        by_axis.setdefault(names.index(ref.name), []).append(ref)
    reshape: list[int] = []
    offsets: dict[int, list[int]] = {}
    for dim, full in enumerate(sizes):
        refs = by_axis.get(dim)
        if refs is None:
            reshape.append(full)
            continue
        dims, positions = _axis_split(refs, full, names[dim])
        offsets[dim] = [len(reshape) + p for p in positions]
        reshape.extend(dims)
    grouped: list[int] = []
    consumed: dict[int, int] = {}
    for ref in axes:
        dim = names.index(ref.name)
        k = consumed.get(dim, 0)
        consumed[dim] = k + 1
        grouped.append(offsets[dim][k])
    if len(set(grouped)) != len(grouped):
        raise ReplicaGroupError(
            f"replica group axes {[_axis_text(a) for a in axes]} repeat a mesh axis"
        )
    kept = [d for d in range(len(reshape)) if d not in grouped]
    group_size = math.prod(reshape[d] for d in grouped)
    arranged = table.reshape(reshape).transpose(kept + grouped).reshape(-1, group_size)
    return tuple(tuple(int(v) for v in row) for row in arranged.tolist())


def _axis_text(ref: MeshAxis) -> str:
    if ref.pre_size is None:
        return f"'{ref.name}'"
    return f"'{ref.name}':({ref.pre_size}){ref.size}"


def format_mesh(
    axis_names: Sequence[str],
    axis_sizes: Sequence[int],
    device_ids: Sequence[int] | str | None,
    axes: Sequence[MeshAxis],
) -> str:
    """The printed mesh-axes form, as jaxlib 0.10.2 prints it (quoted names).

    ``device_ids`` is a list of ids or the text of an iota (``"[2,2]T(1,0)"``).
    """
    mesh = ",".join(f"'{n}'={int(s)}" for n, s in zip(axis_names, axis_sizes, strict=True))
    text = f"mesh[{mesh}]"
    if isinstance(device_ids, str):
        text += f", device_ids=({device_ids})"
    elif device_ids is not None:
        text += f", device_ids=({','.join(str(int(d)) for d in device_ids)})"
    return text + " {" + ",".join(_axis_text(a) for a in axes) + "}"


def _name(m: re.Match[str]) -> str:
    return next(g for g in m.groups()[:3] if g is not None)


def _parse_int_list(text: str, what: str) -> list[int]:
    items = [t.strip() for t in text.split(",")] if text.strip() else []
    for item in items:
        if not item.isdigit():
            raise ReplicaGroupError(f"{what}: {item!r} is not a non-negative integer id")
    return [int(t) for t in items]


def _parse_mesh(text: str) -> tuple[tuple[int, ...], ...]:
    m = _MESH_RE.fullmatch(text)
    if m is None:
        raise ReplicaGroupError(
            f"mesh replica groups {text!r} are not of the form mesh['a'=2,'b'=4] {{'b'}}, "
            f"optionally with ', device_ids=(0,2,1,3)' or ', device_ids=([2,2]T(1,0))' "
            f"after the mesh"
        )
    names: list[str] = []
    sizes: list[int] = []
    for part in m.group(1).split(","):
        am = _MESH_AXIS_RE.fullmatch(part)
        if am is None:
            raise ReplicaGroupError(f"mesh axis {part.strip()!r} is not 'name'=size")
        names.append(_name(am))
        sizes.append(int(am.group(4)))
    ids = None if m.group(2) is None else expand_mesh_ids(m.group(2), math.prod(sizes))
    axes: list[MeshAxis] = []
    if m.group(3).strip():
        for part in m.group(3).split(","):
            rm = _AXIS_REF_RE.fullmatch(part)
            if rm is None:
                raise ReplicaGroupError(
                    f"replica group axis {part.strip()!r} is not 'name' or 'name':(pre)size"
                )
            pre = None if rm.group(4) is None else int(rm.group(4))
            size = None if rm.group(5) is None else int(rm.group(5))
            axes.append(MeshAxis(_name(rm), pre, size))
    if ids is not None and sorted(ids) != list(range(len(ids))):
        raise ReplicaGroupError(
            f"mesh device_ids ({m.group(2)}) = {list(ids)} are not a permutation of "
            f"0..{len(ids) - 1} (e.g. device_ids=(0,2,1,3) or device_ids=([2,2]T(1,0)))"
        )
    return expand_mesh(names, sizes, ids, axes)


def expand_mesh_ids(text: str, num_devices: int) -> tuple[int, ...]:
    """The device at each mesh position from a ``device_ids=(...)`` value (inside the
    parentheses): a list ``0,2,1,3`` or an iota ``[2,2]T(1,0)`` / ``[4]<=[2,2]T(1,0)``.

    ``num_devices`` (the mesh's size) checks an iota's reshape dims; a list's length is
    checked against the mesh by :func:`expand_mesh`.

    >>> expand_mesh_ids("[2,4]T(1,0)", 8)
    (0, 4, 1, 5, 2, 6, 3, 7)
    >>> expand_mesh_ids("0,2,1,3", 4)
    (0, 2, 1, 3)
    """
    value = text.replace(" ", "")
    if not value.startswith("["):
        return tuple(_parse_int_list(value, "mesh device_ids"))
    m = _IDS_IOTA_RE.fullmatch(value)
    if m is None:
        raise ReplicaGroupError(
            f"mesh device_ids ({text}) are neither a list of ids nor an iota "
            f"[d0,d1]T(p0,p1) (e.g. device_ids=(0,2,1,3) or device_ids=([2,2]T(1,0)))"
        )
    dims = _parse_int_list(m.group(2), "mesh device_ids iota dims")
    perm = None if m.group(3) is None else _parse_int_list(m.group(3), "iota transpose")
    total = math.prod(dims)
    outer = [total] if m.group(1) is None else _parse_int_list(m.group(1), "device_ids dims")
    if total != num_devices:
        raise ReplicaGroupError(
            f"mesh device_ids ({text}) hold {total} devices but the mesh has {num_devices}; "
            f"the reshape dims must multiply to the mesh size (e.g. ([2,2]T(1,0)) for a "
            f"2x2 mesh)"
        )
    if math.prod(outer) != total:
        raise ReplicaGroupError(
            f"mesh device_ids ({text}): the dims {outer} before '<=' hold {math.prod(outer)} "
            f"devices, the reshape dims {dims} hold {total} (e.g. ([4]<=[2,2]T(1,0)))"
        )
    (flat,) = expand_iota(1, total, dims, perm)
    return flat


def _parse_explicit(text: str) -> tuple[tuple[int, ...], ...]:
    inner = text.strip()[1:-1].strip()
    if not inner:
        return ()
    groups: list[tuple[int, ...]] = []
    for m in re.finditer(r"\{([^{}]*)\}|([^\s,{}][^,{}]*)", inner):
        if m.group(2) is not None:
            raise ReplicaGroupError(
                f"explicit replica groups {text!r} contain {m.group(2)!r} outside a group "
                f"(expected e.g. {{{{0,1}},{{2,3}}}})"
            )
        groups.append(tuple(_parse_int_list(m.group(1), "replica group")))
    return tuple(groups)


def _check(groups: tuple[tuple[int, ...], ...], num_devices: int, text: str) -> None:
    seen: set[int] = set()
    for group in groups:
        for device in group:
            if device >= num_devices:
                raise ReplicaGroupError(
                    f"replica groups {text!r} name device {device}, outside the module's "
                    f"{num_devices} devices (valid ids 0..{num_devices - 1}; set by num_partitions)"
                )
            if device in seen:
                raise ReplicaGroupError(
                    f"replica groups {text!r} list device {device} more than once"
                )
            seen.add(device)


def parse_replica_groups(text: str, *, num_devices: int) -> ReplicaGroups:
    """Parse and expand a ``replica_groups=`` value (any of the three forms).

    ``{}`` (no groups) means one group of all ``num_devices`` devices. Raises
    :class:`ReplicaGroupError` on bad syntax or on ids outside ``num_devices``.
    """
    value = text.strip()
    if value.startswith("mesh"):
        form, groups = "mesh", _parse_mesh(value)
    elif value.startswith("["):
        m = _IOTA_RE.fullmatch(value.replace(" ", ""))
        if m is None:
            raise ReplicaGroupError(
                f"iota replica groups {value!r} are not of the form [G,S]<=[d0,d1]T(p0,p1) "
                f"(e.g. [4,2]<=[2,4]T(1,0))"
            )
        dims = _parse_int_list(m.group(3), "iota reshape dims")
        perm = None if m.group(4) is None else _parse_int_list(m.group(4), "iota transpose")
        form, groups = "iota", expand_iota(int(m.group(1)), int(m.group(2)), dims, perm)
    elif value.startswith("{") and value.endswith("}"):
        groups = _parse_explicit(value)
        form = "explicit"
        if not groups:
            form, groups = "all", (tuple(range(num_devices)),)
    else:
        raise ReplicaGroupError(
            f"replica groups {value!r} are in no known form: explicit {{{{0,1}},{{2,3}}}}, "
            f"iota [2,2]<=[4] or mesh['a'=2,'b'=2] {{'b'}}"
        )
    _check(groups, num_devices, value)
    return ReplicaGroups(form=form, groups=groups, text=value)


def parse_pairs(text: str, *, num_devices: int) -> tuple[tuple[int, int], ...]:
    """Parse ``source_target_pairs={{0,1},{1,2}}`` (also the send/recv attribute).

    >>> parse_pairs("{{0,1},{1,0}}", num_devices=2)
    ((0, 1), (1, 0))
    """
    value = text.strip().strip('"')
    if not (value.startswith("{") and value.endswith("}")):
        raise ReplicaGroupError(
            f"source-target pairs {value!r} are not of the form {{{{0,1}},{{1,2}}}}"
        )
    pairs: list[tuple[int, int]] = []
    for group in _parse_explicit(value):
        if len(group) != 2:
            raise ReplicaGroupError(
                f"source-target pair {list(group)} in {value!r} does not have exactly two ids"
            )
        for device in group:
            if device >= num_devices:
                raise ReplicaGroupError(
                    f"source-target pairs {value!r} name device {device}, outside the "
                    f"module's {num_devices} devices (valid ids 0..{num_devices - 1})"
                )
        pairs.append((group[0], group[1]))
    return tuple(pairs)
