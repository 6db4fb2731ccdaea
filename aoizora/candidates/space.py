"""The sharding candidate space: mesh shapes x rule sets x attention kinds, with legality.

A :class:`Candidate` is one logical sharding: named mesh axes with sizes (a
factorisation of the chip count), a rule set (logical axis -> mesh axes) and an
attention kind. It says nothing about placement; the device order is chosen later.
The mesh axes are the workload's (:attr:`~aoizora.workloads.base.Workload.mesh_axis_names`:
every axis its rule sets name, unless it fixes them, as Wan does with
``data, fsdp, context, tensor``); a candidate id spells each axis with its size.

:func:`enumerate_candidates` lists every combination in a deterministic order and
splits them into legal ones and rejected ones, each rejection with its reasons:

* a dimension not divisible by its sharding degree (e.g. 12 heads over tensor=8,
  the CFG batch of 2 over data=4); a paddable dimension (the token sequence) costs
  padding instead, which the workload may limit;
* a mesh axis of size > 1 that no rule uses (every chip along it would repeat the
  same work);
* the workload's own checks (Wan: CFG batch <= 2 on data, Ulysses heads divisibility,
  padding over 1 %);
* the same shardings as an earlier candidate (a duplicate).

    >>> from aoizora.workloads.wan import wan_workload
    >>> from aoizora.workloads.wan import parse_resolution
    >>> space = enumerate_candidates(wan_workload("wan2.1-1.3b", parse_resolution("480p")), 4)
    >>> space.legal[0].id
    'data1.fsdp1.context1.tensor4/maxdiffusion/gather_kv'

A model of your own names its own axes:

    >>> import jax, jax.numpy as jnp
    >>> from aoizora.workloads.base import user_workload
    >>> mlp = user_workload(
    ...     "mlp", lambda w, x: x @ w,
    ...     (jax.ShapeDtypeStruct((64, 256), jnp.float32),
    ...      jax.ShapeDtypeStruct((8, 64), jnp.float32)),
    ...     (("embed", "mlp"), ("batch", "embed")), out_logical_axes=("batch", "mlp"),
    ...     rule_sets=(Rules.of("dp_tp", [("batch", "dp"), ("mlp", "tp")]),))
    >>> [c.id for c in enumerate_candidates(mlp, 4)]
    ['dp1.tp4/dp_tp/none', 'dp2.tp2/dp_tp/none', 'dp4.tp1/dp_tp/none']
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import jax

from aoizora.errors import CandidateError, WorkloadError
from aoizora.workloads.attention import spec_axes
from aoizora.workloads.base import Workload
from aoizora.workloads.rules import (
    Rules,
    is_logical_axes,
    logical_to_pspec,
    rules_from_json,
    rules_to_json,
    sharding_degree,
)
from aoizora.workloads.splash import check_blocks

__all__ = [
    "Candidate",
    "Rejected",
    "CandidateSpace",
    "mesh_shapes",
    "make_candidate",
    "check_candidate",
    "enumerate_candidates",
    "candidate_to_json",
    "argument_bytes_per_chip",
    "candidate_from_json",
    "with_splash_blocks",
]


@dataclass(frozen=True)
class Candidate:
    """One logical sharding: mesh axes and sizes, a rule set, an attention kind.

    ``id`` is stable text, e.g. ``"data2.fsdp1.context2.tensor1/maxdiffusion/gather_kv"``;
    a candidate with planned splash tiles ends in them,
    ``".../gather_kv/splash512x2048x512"`` (:func:`with_splash_blocks`).
    """

    mesh_axis_names: tuple[str, ...]
    mesh_shape: tuple[int, ...]
    rules_id: str
    rules: Rules
    attention: str
    # The splash tiles (block_q, block_kv, block_kv_compute) Stage 1 planned for it;
    # None: maxdiffusion's 512 (aoizora.workloads.splash.DEFAULT_BLOCKS), as baselines run.
    splash_blocks: tuple[int, int, int] | None = None
    # The compiler's scoped VMEM limit (KiB) its tiles need, when above the default
    # (``--xla_tpu_scoped_vmem_limit_kib``; sim.splash_kernel); None: the default.
    scoped_vmem_kib: int | None = None

    def __post_init__(self) -> None:
        if len(self.mesh_axis_names) != len(self.mesh_shape) or any(s < 1 for s in self.mesh_shape):
            example = [1] * (len(self.mesh_axis_names) - 1) + [2]
            raise CandidateError(
                f"mesh shape {list(self.mesh_shape)} does not match axis names "
                f"{list(self.mesh_axis_names)}; give one positive size per axis, e.g. {example}"
            )
        if self.rules.name != self.rules_id:
            raise CandidateError(
                f"candidate rules_id {self.rules_id!r} differs from its rules' name "
                f"{self.rules.name!r}"
            )

    @property
    def id(self) -> str:
        mesh = ".".join(
            f"{n}{s}" for n, s in zip(self.mesh_axis_names, self.mesh_shape, strict=True)
        )
        tiles = (
            ""
            if self.splash_blocks is None
            else "/splash" + "x".join(str(b) for b in self.splash_blocks)
        )
        if self.scoped_vmem_kib is not None:
            tiles += f"@vmem{self.scoped_vmem_kib // 1024}MiB"
        return f"{mesh}/{self.rules_id}/{self.attention}{tiles}"

    @property
    def sharding_id(self) -> str:
        """The id without the splash tiles: the logical sharding alone."""
        return self.id if self.splash_blocks is None else self.id.rsplit("/", 1)[0]

    @property
    def num_chips(self) -> int:
        return math.prod(self.mesh_shape)

    @property
    def mesh_sizes(self) -> dict[str, int]:
        """Axis name -> size, in mesh order."""
        return dict(zip(self.mesh_axis_names, self.mesh_shape, strict=True))


@dataclass(frozen=True)
class Rejected:
    """An illegal candidate with every reason found."""

    candidate: Candidate
    reasons: tuple[str, ...]

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons)


@dataclass(frozen=True)
class CandidateSpace:
    """Legal candidates (deterministic order) and rejected ones with reasons."""

    workload: str
    num_chips: int
    legal: tuple[Candidate, ...]
    rejected: tuple[Rejected, ...]

    def __iter__(self) -> Iterator[Candidate]:
        return iter(self.legal)

    def __len__(self) -> int:
        return len(self.legal)

    def by_id(self, candidate_id: str) -> Candidate:
        for c in self.legal:
            if c.id == candidate_id:
                return c
        for r in self.rejected:
            if r.candidate.id == candidate_id:
                raise CandidateError(f"candidate {candidate_id!r} is illegal: {r.reason}")
        raise CandidateError(
            f"no candidate {candidate_id!r} for {self.workload} on {self.num_chips} chips; "
            f"e.g. {self.legal[0].id if self.legal else '(none legal)'}"
        )


def mesh_shapes(num_chips: int, num_axes: int) -> tuple[tuple[int, ...], ...]:
    """Every ordered factorisation of ``num_chips`` into ``num_axes`` sizes, sorted.

    >>> mesh_shapes(4, 2)
    ((1, 4), (2, 2), (4, 1))
    """
    if num_chips < 1 or num_axes < 1:
        raise CandidateError(
            f"mesh of {num_chips} chips over {num_axes} axes: both must be >= 1 (e.g. 8 over 4)"
        )
    if num_axes == 1:
        return ((num_chips,),)
    out: list[tuple[int, ...]] = []
    for first in range(1, num_chips + 1):
        if num_chips % first == 0:
            out.extend((first, *rest) for rest in mesh_shapes(num_chips // first, num_axes - 1))
    return tuple(sorted(out))


def make_candidate(
    workload: Workload,
    mesh_shape: Sequence[int] | Mapping[str, int],
    rules_id: str,
    attention: str,
) -> Candidate:
    """A candidate of ``workload`` over its mesh axes (not checked; see :func:`check_candidate`).

    ``mesh_shape`` gives one size per mesh axis of the workload, in order, or a
    mapping of axis name -> size (axes left out have size 1):

        >>> from aoizora.workloads.wan import wan_workload, parse_resolution
        >>> wl = wan_workload("wan2.1-1.3b", parse_resolution("480p"))
        >>> make_candidate(wl, {"data": 2, "context": 4}, "maxdiffusion", "gather_kv").id
        'data2.fsdp1.context4.tensor1/maxdiffusion/gather_kv'
    """
    names = workload.mesh_axis_names
    if isinstance(mesh_shape, Mapping):
        unknown = sorted(set(mesh_shape) - set(names))
        if unknown:
            raise CandidateError(
                f"mesh axes {unknown} are not mesh axes of {workload.name}; its axes are "
                f"{list(names)}, e.g. {{{names[0]!r}: 2}}"
            )
        mesh_shape = tuple(mesh_shape.get(n, 1) for n in names)
    return Candidate(
        mesh_axis_names=names,
        mesh_shape=tuple(int(s) for s in mesh_shape),
        rules_id=rules_id,
        rules=workload.rules(rules_id),
        attention=attention,
    )


_Row = tuple[str, tuple[int, ...], tuple[str | None, ...], tuple[str, ...]]


def _arrays(workload: Workload) -> list[_Row]:
    """(label, shape, logical axes, paddable) of every arg, result and probe."""
    rows: list[_Row] = [
        (name, tuple(leaf.shape), ax, ()) for name, leaf, ax in workload.arg_leaves()
    ]
    out_leaves = jax.tree.leaves_with_path(workload.abstract_out)
    out_axes = jax.tree.leaves(workload.out_logical_axes, is_leaf=is_logical_axes)
    for (path, leaf), ax in zip(out_leaves, out_axes, strict=True):
        rows.append((f"result{jax.tree_util.keystr(path)}", tuple(leaf.shape), ax, ()))
    for p in workload.probes:
        rows.append((f"probe {p.name}", p.shape, p.logical_axes, p.paddable))
    return rows


def check_candidate(workload: Workload, candidate: Candidate) -> tuple[str, ...]:
    """Every reason ``candidate`` is illegal for ``workload`` (empty = legal)."""
    sizes = candidate.mesh_sizes
    names = candidate.mesh_axis_names
    reasons: list[str] = []
    if candidate.attention not in workload.attention_kinds:
        reasons.append(
            f"attention {candidate.attention!r} is not implemented by {workload.name}; "
            f"use one of {list(workload.attention_kinds)}"
        )
    used: set[str] = set()
    seen: set[tuple[str | None, int, int]] = set()
    for label, shape, axes, paddable in _arrays(workload):
        try:
            spec = logical_to_pspec(axes, candidate.rules, names, sizes)
        except WorkloadError as exc:
            reasons.append(str(exc))
            break
        for dim, (size, logical, entry) in enumerate(zip(shape, axes, spec, strict=True)):
            if entry is None:
                continue
            used.update((entry,) if isinstance(entry, str) else entry)
            degree = sharding_degree(entry, sizes)
            if size % degree and logical not in paddable and (logical, size, degree) not in seen:
                seen.add((logical, size, degree))
                reasons.append(
                    f"{label} dim {dim} ({logical}, size {size}) is not divisible by its "
                    f"sharding degree {degree} (mesh axes {entry}); choose sizes dividing {size}"
                )
    idle = [n for n in names if sizes[n] > 1 and n not in used]
    for n in idle:
        reasons.append(
            f"mesh axis {n!r} (size {sizes[n]}) shards nothing under rules "
            f"{candidate.rules_id!r}: every chip along it would repeat the same work"
        )
    if workload.check is not None:
        reasons.extend(workload.check(sizes, candidate.rules, candidate.attention))
    return tuple(reasons)


def _signature(workload: Workload, candidate: Candidate) -> tuple[object, ...]:
    """What decides the compiled program, up to the names of the mesh axes.

    Axes of size 1 shard nothing (``logical_to_pspec`` drops them); the others are
    named by their position among the non-trivial axes. So ``data2.fsdp2.context1``
    under one rule set and ``data2.fsdp1.context2`` under another, sharding every
    array the same way, share a signature: they compile to the same program with
    other axis names (checked: their simulated step times are equal, and the
    exhaustive planner benchmark shows every such pair tied), and one is enough.

    Two axes next to each other in mesh order that every array uses together, as
    the pair ``(a, b)`` in that order, act as one axis of size ``|a| * |b|``: jax
    numbers a tuple of mesh axes row-major, exactly as one merged axis would be
    (and the attention kinds count sequence chunks the same way). So
    ``data2.fsdp2.context2`` under rules that always shard by ``(fsdp, context)``
    is ``data2.fsdp1.context4`` under rules that shard by ``context`` alone.
    Checked on 1.3B 480p v5e:2x4 with every candidate compiled and ranked
    (``benchmarks/stage1_recall.py --slice v5e:2x4``): of the 15 such pairs, 13
    have equal best simulated steps (to 1e-10) and in the other two (``usp_u2`` on
    ``data1.fsdp2.context4`` and ``data1.fsdp4.context2``) the kept one-axis twin
    is 1.2 % faster: its placement space orders the eight chunks more freely.
    """
    sizes = candidate.mesh_sizes
    specs = [
        logical_to_pspec(axes, candidate.rules, candidate.mesh_axis_names, sizes)
        for _, _, axes, _ in _arrays(workload)
    ]
    entries = [spec_axes(e) for spec in specs for e in spec if e is not None]
    groups = _merged_axes([n for n in candidate.mesh_axis_names if sizes[n] > 1], entries)
    group_of = {name: i for i, group in enumerate(groups) for name in group}

    def canonical(entry: str | tuple[str, ...] | None) -> tuple[int, ...] | None:
        if entry is None:
            return None
        names = spec_axes(entry)
        # the first axis of each merged group stands for the whole group
        return tuple(group_of[n] for n in names if groups[group_of[n]][0] == n)

    shape = tuple(math.prod(sizes[n] for n in group) for group in groups)
    canon = tuple(tuple(canonical(e) for e in spec) for spec in specs)
    return (shape, candidate.attention, canon)


def _merged_axes(live: Sequence[str], entries: Sequence[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """``live`` (mesh order) cut into runs of neighbours that act as one axis.

    A run acts as one axis when every entry naming any of its axes names all of
    them, next to each other, in one order shared by every such entry. Each run is
    returned in that order (which may reverse mesh order: ``("context", "fsdp")``
    numbers the chunks context-major, as a mesh with the two axes swapped would;
    which device holds which chunk is the placement's business, searched anyway).

    >>> _merged_axes(["data", "fsdp", "context"], [("data",), ("context", "fsdp")])
    [('data',), ('context', 'fsdp')]
    >>> _merged_axes(["data", "fsdp", "context"], [("fsdp", "context"), ("fsdp",)])
    [('data',), ('fsdp',), ('context',)]
    """
    groups: list[tuple[str, ...]] = []
    for name in live:
        merged = _run_order((*groups[-1], name), entries) if groups else None
        if merged is not None:
            groups[-1] = merged
        else:
            groups.append((name,))
    return groups


def _run_order(axes: tuple[str, ...], entries: Sequence[tuple[str, ...]]) -> tuple[str, ...] | None:
    """The one order in which every entry naming any of ``axes`` names them all,
    next to each other; ``None`` if there is no such order or no entry names them."""
    order: tuple[str, ...] | None = None
    wanted = set(axes)
    for entry in entries:
        hits = [i for i, a in enumerate(entry) if a in wanted]
        if not hits:
            continue
        run = entry[hits[0] : hits[0] + len(axes)]
        if len(hits) != len(axes) or set(run) != wanted or (order is not None and run != order):
            return None
        order = run
    return order


def enumerate_candidates(workload: Workload, num_chips: int) -> CandidateSpace:
    """All candidates over ``num_chips``: legal ones first-found order, rejected with reasons.

    The mesh has the workload's axes (``workload.mesh_axis_names``). Order: mesh
    shapes ascending (lexicographic over those axes), then the workload's rule sets in
    order, then its attention kinds in order.
    """
    legal: list[Candidate] = []
    rejected: list[Rejected] = []
    signatures: dict[tuple[object, ...], str] = {}
    names = workload.mesh_axis_names
    for shape in mesh_shapes(num_chips, len(names)):
        for rules in workload.rule_sets:
            for attention in workload.attention_kinds:
                cand = Candidate(names, shape, rules.name, rules, attention)
                reasons = check_candidate(workload, cand)
                if not reasons:
                    sig = _signature(workload, cand)
                    if sig in signatures:
                        reasons = (f"same shardings as candidate {signatures[sig]!r}",)
                    else:
                        signatures[sig] = cand.id
                if reasons:
                    rejected.append(Rejected(cand, reasons))
                else:
                    legal.append(cand)
    return CandidateSpace(workload.name, num_chips, tuple(legal), tuple(rejected))


def with_splash_blocks(
    candidate: Candidate,
    blocks: tuple[int, int, int] | None,
    *,
    scoped_vmem_kib: int | None = None,
) -> Candidate:
    """``candidate`` running the splash tiles ``blocks`` (None: the 512 defaults), compiled
    under a scoped VMEM limit of ``scoped_vmem_kib`` (None: the compiler's default).

    >>> from aoizora.workloads.rules import Rules
    >>> c = Candidate(("data",), (1,), "r", Rules("r", ()), "gather_kv")
    >>> with_splash_blocks(c, (512, 2048, 512)).id
    'data1/r/gather_kv/splash512x2048x512'
    >>> with_splash_blocks(c, (512, 8192, 512), scoped_vmem_kib=32768).id
    'data1/r/gather_kv/splash512x8192x512@vmem32MiB'
    """
    tiles = None if blocks is None else tuple(blocks)
    limit = None if tiles is None else scoped_vmem_kib
    return replace(candidate, splash_blocks=tiles, scoped_vmem_kib=limit)  # type: ignore[arg-type]


def candidate_to_json(candidate: Candidate) -> dict[str, Any]:
    """A JSON-ready value for a plan file (rules included; ``splash_blocks`` when planned)."""
    out: dict[str, Any] = {
        "id": candidate.id,
        "mesh_axis_names": list(candidate.mesh_axis_names),
        "mesh_shape": list(candidate.mesh_shape),
        "rules": rules_to_json(candidate.rules),
        "attention": candidate.attention,
    }
    if candidate.splash_blocks is not None:
        out["splash_blocks"] = list(candidate.splash_blocks)
    if candidate.scoped_vmem_kib is not None:
        out["scoped_vmem_kib"] = candidate.scoped_vmem_kib
    return out


def candidate_from_json(value: Mapping[str, Any]) -> Candidate:
    """Inverse of :func:`candidate_to_json`."""
    try:
        rules = rules_from_json(value["rules"])
        cand = Candidate(
            mesh_axis_names=tuple(str(a) for a in value["mesh_axis_names"]),
            mesh_shape=tuple(int(s) for s in value["mesh_shape"]),
            rules_id=rules.name,
            rules=rules,
            attention=str(value["attention"]),
            splash_blocks=_blocks_from_json(value.get("splash_blocks")),
            scoped_vmem_kib=None
            if value.get("scoped_vmem_kib") is None
            else int(value["scoped_vmem_kib"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CandidateError(
            f"candidate JSON {dict(value)!r} lacks or mistypes a field ({exc}); expected keys "
            f"id, mesh_axis_names, mesh_shape, rules, attention (and splash_blocks, three "
            f"integers, when planned)"
        ) from exc
    if "id" in value and value["id"] != cand.id:
        raise CandidateError(
            f"candidate JSON id {value['id']!r} does not match its fields ({cand.id!r})"
        )
    return cand


def _blocks_from_json(value: Any) -> tuple[int, int, int] | None:
    if value is None:
        return None
    blocks = tuple(int(b) for b in value)
    if len(blocks) != 3:
        raise ValueError(f"splash_blocks {value!r} must be three integers")
    return check_blocks(blocks)


def argument_bytes_per_chip(workload: Workload, candidate: Candidate) -> int:
    """Analytic bytes of all arguments one chip holds under ``candidate``'s shardings.

    Each dimension is cut into ``ceil(size / degree)`` (XLA pads uneven shards);
    TPU tile padding of small dimensions is not modelled, so compiled
    ``memory_analysis`` argument bytes can be slightly larger.

        >>> from aoizora.workloads.wan import wan_workload
        >>> from aoizora.workloads.wan import parse_resolution
        >>> wl = wan_workload("wan2.1-14b", parse_resolution("480p"))
        >>> c = make_candidate(wl, (1, 1, 1, 1), "maxdiffusion", "gather_kv")
        >>> round(argument_bytes_per_chip(wl, c) / 1e9, 1)   # > one v5e's 16 GB
        28.6
    """
    sizes = candidate.mesh_sizes
    total = 0
    for _, leaf, ax in workload.arg_leaves():
        spec = logical_to_pspec(ax, candidate.rules, candidate.mesh_axis_names, sizes)
        n = 1
        for size, entry in zip(leaf.shape, spec, strict=True):
            n *= -(-size // sharding_degree(entry, sizes))
        total += n * leaf.dtype.itemsize
    return total
