"""Collective microbenchmarks over the plan's mesh axes, as collective rows.

For every mesh axis of size > 1 and every pair of such axes one rule of the plan maps
a logical axis to (an axis pair the plan uses), each collective kind and each size of
the sweep, one program: a ``shard_map`` over the plan's mesh (placed as planned) whose
body is the one collective over those axes, on float32 buffers. ``size_bytes`` means
what the measurement format says (docs/validation.md): the all-gather's output, the
reduce-scatter's input, the all-reduce / all-to-all buffer, the permute's payload --
rounded down so that the group divides it. The row's ``groups`` lists the replica
groups as the plan's device ids (``devices:``), each group in the order of the
collective's index over the axes (row-major, mesh order): the ring order of a permute.

    >>> from aoizora.measure.collectives import fitted_size
    >>> fitted_size("all-gather", 1000, group=3), fitted_size("all-reduce", 1000, group=3)
    (996, 1000)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from aoizora.errors import MeasureError
from aoizora.measure.timing import Clock, Timing, time_calls
from aoizora.plan import Plan
from aoizora.studies.validation.format import COLLECTIVE_KINDS

__all__ = [
    "CALLS_PER_REPEAT",
    "DEFAULT_SIZES_BYTES",
    "CollectiveTarget",
    "collective_program",
    "collective_targets",
    "fitted_size",
    "groups_spec",
    "mesh_axis_sets",
    "time_collective",
]

# The sweep: 1 MiB to 64 MiB per device, the sizes of the public Ironwood table
# (validation/README.md, section 4) where launch overheads and bandwidth both show.
DEFAULT_SIZES_BYTES: tuple[int, ...] = (1 << 20, 1 << 22, 1 << 24, 1 << 26)
# Calls issued back to back per timed repeat (aoizora.measure.timing): hides the
# host's dispatch latency between short collectives.
CALLS_PER_REPEAT = 10
_ITEM_BYTES = 4  # float32
_ABBREVIATION = {
    "all-gather": "ag",
    "all-reduce": "ar",
    "reduce-scatter": "rs",
    "all-to-all": "a2a",
    "collective-permute": "cp",
}


@dataclass(frozen=True)
class CollectiveTarget:
    """One collective of ``size_bytes`` over mesh ``axes`` (a group of ``group`` devices)."""

    collective: str
    axes: tuple[str, ...]
    size_bytes: int
    group: int

    @property
    def key(self) -> str:
        return f"{_ABBREVIATION[self.collective]}-{'.'.join(self.axes)}-{self.size_bytes}"

    @property
    def label(self) -> str:
        return f"{self.collective} over {'+'.join(self.axes)}, {self.size_bytes} B"


def mesh_axis_sets(plan: Plan) -> tuple[tuple[str, ...], ...]:
    """Every mesh axis of size > 1, then every pair of them a rule maps one logical axis to
    (mesh order within a pair; first appearance order)."""
    sizes = dict(zip(plan.mesh_axis_names, plan.mesh_shape, strict=True))
    out: list[tuple[str, ...]] = [(a,) for a in plan.mesh_axis_names if sizes[a] > 1]
    for _, axes in plan.logical_rules:
        live = [a for a in plan.mesh_axis_names if a in axes and sizes[a] > 1]
        for i, a in enumerate(live):
            for b in live[i + 1 :]:
                if (a, b) not in out:
                    out.append((a, b))
    return tuple(out)


def fitted_size(collective: str, size_bytes: int, *, group: int) -> int:
    """``size_bytes`` rounded down so ``group`` divides the buffer in float32 elements
    (all-gather, reduce-scatter, all-to-all) or to whole elements (all-reduce, permute)."""
    elements = size_bytes // _ITEM_BYTES
    if collective in ("all-gather", "reduce-scatter", "all-to-all"):
        elements -= elements % group
    return elements * _ITEM_BYTES


def collective_targets(
    plan: Plan, *, sizes_bytes: Sequence[int], kinds: Sequence[str] = COLLECTIVE_KINDS
) -> tuple[CollectiveTarget, ...]:
    """Every (axes, kind, size) of the sweep, axes first (:func:`mesh_axis_sets`)."""
    unknown = [k for k in kinds if k not in COLLECTIVE_KINDS]
    if unknown or not kinds:
        raise MeasureError(
            f"collective kinds {unknown or 'none'}: choose from {list(COLLECTIVE_KINDS)}, e.g. "
            "--kinds all-gather,all-reduce"
        )
    sizes = dict(zip(plan.mesh_axis_names, plan.mesh_shape, strict=True))
    out = []
    for axes in mesh_axis_sets(plan):
        group = int(np.prod([sizes[a] for a in axes]))
        for kind in kinds:
            for size in sizes_bytes:
                fitted = fitted_size(kind, size, group=group)
                if fitted <= 0:
                    raise MeasureError(
                        f"size {size} B is too small for a {kind} over {'+'.join(axes)} "
                        f"({group} devices); give at least {group * _ITEM_BYTES} B, e.g. 1MiB"
                    )
                out.append(CollectiveTarget(kind, axes, fitted, group))
    return tuple(out)


def groups_spec(plan: Plan, axes: Sequence[str]) -> str:
    """The replica groups of a collective over ``axes`` as a ``devices:`` group spec."""
    ids = np.asarray(plan.physical_ids, dtype=np.int64).reshape(plan.mesh_shape)
    names = plan.mesh_axis_names
    moved = [names.index(a) for a in names if a in axes]
    rest = [i for i in range(len(names)) if i not in moved]
    groups = ids.transpose(rest + moved).reshape(-1, int(np.prod([ids.shape[i] for i in moved])))
    return "devices:" + ";".join(" ".join(str(int(i)) for i in g) for g in groups)


def _body(target: CollectiveTarget, axes: tuple[str, ...], x: jax.Array) -> jax.Array:
    kind, n = target.collective, target.group
    if kind == "all-gather":
        return jax.lax.all_gather(x, axes, axis=1, tiled=True)
    if kind == "reduce-scatter":
        return jax.lax.psum_scatter(x, axes, scatter_dimension=1, tiled=True)
    if kind == "all-reduce":
        return jax.lax.psum(x, axes)
    if kind == "all-to-all":
        return jax.lax.all_to_all(x, axes, 1, 1, tiled=True)
    return jax.lax.ppermute(x, axes, perm=[(i, (i + 1) % n) for i in range(n)])


def _input_elements(target: CollectiveTarget) -> int:
    elements = target.size_bytes // _ITEM_BYTES
    return elements // target.group if target.collective == "all-gather" else elements


def collective_program(target: CollectiveTarget, mesh: Mesh) -> tuple[Any, jax.Array]:
    """The jitted program of ``target`` on ``mesh`` and its input (ones, one block per
    device along the first dimension), made on the devices."""
    every = PartitionSpec(mesh.axis_names)
    program = jax.jit(
        jax.shard_map(
            partial(_body, target, target.axes), mesh=mesh, in_specs=every, out_specs=every
        )
    )
    shape = (mesh.devices.size, _input_elements(target))
    x = jax.jit(lambda: jnp.ones(shape, jnp.float32), out_shardings=NamedSharding(mesh, every))()
    return program, x


def time_collective(
    target: CollectiveTarget,
    mesh: Mesh,
    *,
    warmup: int,
    repeats: int,
    clock: Clock = time.perf_counter,
    calls_per_repeat: int = CALLS_PER_REPEAT,
) -> Timing:
    """Compile ``target`` on ``mesh`` (the plan's, placed as planned) and time it."""
    program, x = collective_program(target, mesh)
    compiled = program.lower(x).compile()
    return time_calls(
        lambda: compiled(x),
        warmup=warmup,
        repeats=repeats,
        calls_per_sample=calls_per_repeat,
        clock=clock,
    )
