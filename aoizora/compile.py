"""Lower and compile candidates for a TPU slice ahead of time, on a CPU-only machine.

A :class:`jax.sharding.Mesh` of libtpu's AOT devices (:mod:`aoizora.tpu`) gives
TPU-compiled HLO, its ``cost_analysis`` and per-device ``memory_analysis`` without a TPU.

* :func:`make_mesh` -- a mesh for a candidate and a device order (libtpu physical ids in
  mesh-flat order; default: ``mesh_utils.create_device_mesh``).
* :func:`lower` -- cheap (no XLA compile); Stage 1 reads its StableHLO.
* :func:`jit_step` -- the same program jitted on a mesh of real devices (to run it).
* :func:`compile_candidate` -- never raises for a failing candidate: the result carries
  the error. With ``cache`` it reads and writes the compile cache
  (:func:`aoizora.cache.compile_key`: the StableHLO, target, device order and versions).
"""

from __future__ import annotations

import dataclasses
import json
import math
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding

from aoizora.cache import JsonCache, compile_key, lowered_key
from aoizora.candidates.space import Candidate, candidate_to_json
from aoizora.errors import CompileError, PlacementError
from aoizora.tpu import fallback_note, lowering_family, slice_backend, topology_devices
from aoizora.workloads.base import Backend, BuildContext, Workload
from aoizora.workloads.rules import is_logical_axes, logical_to_pspec
from sim.topology import Slice

__all__ = [
    "compiler_options",
    "MemoryUsage",
    "memory_usage",
    "CompileResult",
    "jit_step",
    "make_mesh",
    "lower",
    "lower_to_read",
    "lowering_target",
    "cached_compile",
    "candidate_key",
    "compile_candidate",
    "compiled_hlo",
]


def make_mesh(
    candidate: Candidate, devices: Sequence[Any], order: Sequence[int] | None = None
) -> Mesh:
    """A :class:`Mesh` with ``candidate``'s axes; ``order`` = physical ids, mesh-flat.

    Without ``order``, ``mesh_utils.create_device_mesh`` decides (maxdiffusion's
    default). Raises :class:`PlacementError` if ``order`` is not a permutation of the
    devices' ids.
    """
    devs = list(devices)
    if candidate.num_chips != len(devs):
        raise PlacementError(
            f"candidate {candidate.id} needs {candidate.num_chips} devices, got {len(devs)}"
        )
    if order is None:
        from jax.experimental import mesh_utils

        try:
            arr = mesh_utils.create_device_mesh(list(candidate.mesh_shape), devs)
        except (NotImplementedError, ValueError, AssertionError):
            arr = mesh_utils.create_device_mesh(
                list(candidate.mesh_shape), devs, allow_split_physical_axes=True
            )
        return Mesh(arr, candidate.mesh_axis_names)
    by_id = {int(d.id): d for d in devs}
    ids = [int(i) for i in order]
    if sorted(ids) != sorted(by_id):
        raise PlacementError(
            f"device order {ids} is not a permutation of the device ids {sorted(by_id)}; "
            f"list each id once in mesh-flat (row-major) order, e.g. {sorted(by_id)}"
        )
    arr = np.empty(len(ids), dtype=object)
    for i, pid in enumerate(ids):
        arr[i] = by_id[pid]
    return Mesh(arr.reshape(candidate.mesh_shape), candidate.mesh_axis_names)


def _shardings(mesh: Mesh, candidate: Candidate, axes_tree: Any) -> Any:
    sizes = candidate.mesh_sizes
    names = candidate.mesh_axis_names

    def one(axes: tuple[str | None, ...]) -> NamedSharding:
        return NamedSharding(mesh, logical_to_pspec(axes, candidate.rules, names, sizes))

    return jax.tree.map(one, axes_tree, is_leaf=is_logical_axes)


def _jitted(
    workload: Workload,
    candidate: Candidate,
    mesh: Mesh,
    backend: Backend,
    *,
    kernel_bodies: bool = True,
) -> Any:
    ctx = BuildContext(mesh=mesh, rules=candidate.rules, attention=candidate.attention,
                       backend=backend, kernel_bodies=kernel_bodies,
                       splash_blocks=candidate.splash_blocks)  # fmt: skip
    fn = workload.build(ctx)
    in_sh = tuple(_shardings(mesh, candidate, ax) for ax in workload.arg_logical_axes)
    out_sh = _shardings(mesh, candidate, workload.out_logical_axes)
    # keep_unused: an argument the step does not read still lives in HBM (Wan 2.2 A14B's
    # idle expert); jit would otherwise drop it from the program and from its memory.
    return jax.jit(fn, in_shardings=in_sh, out_shardings=out_sh, keep_unused=True)


def jit_step(workload: Workload, candidate: Candidate, mesh: Mesh, backend: Backend) -> Any:
    """``workload``'s step for ``candidate``, jitted on ``mesh`` (devices of your own) with
    the candidate's shardings: the program :func:`lower` compiles, to run (``aoizora
    measure``)."""
    return _jitted(workload, candidate, mesh, backend)


# jaxlib 0.10.2 cannot print tpu7x's compiled module: compiled.as_text() raises
# "async-update instruction should have 1 operands but sees 2" (collectives offloaded to
# SparseCores). The compiler's own dump of the same compile holds the text (docs/hlo.md,
# SparseCore offload), so these generations compile with a dump and read it back.
_DUMP_HLO_GENERATIONS = frozenset({"tpu7x"})
_DUMP_SUFFIX = ".after_optimizations.txt"


def compiler_options(candidate: Candidate) -> dict[str, str | bool]:
    """The XLA options ``candidate`` compiles with on a TPU: its raised scoped VMEM limit,
    when its splash tiles need one (``--xla_tpu_scoped_vmem_limit_kib``, as maxdiffusion's
    recipes set it; sim.splash_kernel), else none.

    >>> from aoizora.workloads.rules import Rules
    >>> c = Candidate(("data",), (1,), "r", Rules("r", ()), "gather_kv", (512, 8192, 512), 32768)
    >>> compiler_options(c)
    {'xla_tpu_scoped_vmem_limit_kib': '32768'}
    """
    if candidate.scoped_vmem_kib is None:
        return {}
    return {"xla_tpu_scoped_vmem_limit_kib": str(int(candidate.scoped_vmem_kib))}


def _options_tag(options: dict[str, str | bool]) -> str:
    """What a compile key adds for ``options`` ("" for none, so earlier keys hold)."""
    return "".join(f"|{k}={v}" for k, v in sorted(options.items()))


def _compile_with_dump(lowered: Any, extra: dict[str, str | bool] | None = None) -> tuple[Any, str]:
    """Compile ``lowered`` with an XLA dump and return (compiled, compiled HLO text)."""
    with tempfile.TemporaryDirectory(prefix="aoizora-hlo-") as tmp:
        options = {"xla_dump_to": tmp, "xla_dump_hlo_as_text": True, **(extra or {})}
        compiled = lowered.compile(compiler_options=options)
        texts = sorted(Path(tmp).glob(f"*{_DUMP_SUFFIX}"))
        if len(texts) != 1:
            raise CompileError(
                f"the XLA dump holds {len(texts)} '*{_DUMP_SUFFIX}' files, expected 1 "
                f"(one module per compile); found {[p.name for p in texts]}"
            )
        return compiled, texts[0].read_text(encoding="utf-8")


def compiled_hlo(
    lowered: Any, slice_: Slice, *, options: dict[str, str | bool] | None = None
) -> tuple[Any, str]:
    """Compile ``lowered`` for ``slice_`` (with XLA ``options``, :func:`compiler_options`):
    the executable and its compiled HLO text.

    The text is ``compiled.as_text()``; for tpu7x (and whenever printing fails) it is
    the compiler's dump of the same compile, ``*.after_optimizations.txt``.
    """
    if slice_.chip.generation in _DUMP_HLO_GENERATIONS:
        return _compile_with_dump(lowered, options)
    compiled = lowered.compile(compiler_options=options or None)
    try:
        return compiled, compiled.as_text()
    except Exception:  # jaxlib could not print the module: read the dump instead
        return _compile_with_dump(lowered, options)


def lower(
    workload: Workload,
    candidate: Candidate,
    slice_: Slice,
    *,
    order: Sequence[int] | None = None,
    kernel_bodies: bool = True,
) -> jax.stages.Lowered:
    """Trace and lower ``candidate`` for ``slice_`` (no XLA compile; well under 1 s).

    ``lowered.as_text()`` is StableHLO with Shardy shardings; Stage 1 reads it.
    ``kernel_bodies=False`` lowers Pallas kernels without their bodies
    (:mod:`aoizora.workloads.opaque`): such a program cannot be compiled.
    Raises :class:`CompileError` if tracing fails.
    """
    mesh = make_mesh(candidate, topology_devices(slice_), order)
    try:
        backend = slice_backend(slice_)
        jitted = _jitted(workload, candidate, mesh, backend, kernel_bodies=kernel_bodies)
        return jitted.trace(*workload.abstract_args).lower()
    except Exception as exc:
        raise CompileError(
            f"lowering {workload.name} candidate {candidate.id} for {slice_.name} failed: "
            f"{type(exc).__name__}: {exc}"
        ) from exc


def lower_to_read(workload: Workload, candidate: Candidate, slice_: Slice) -> jax.stages.Lowered:
    """:func:`lower` without Pallas kernel bodies: Stage 1's lowering.

    Stage 1 reads a kernel's name, operands and results, never its body; building
    the bodies (Mosaic) was a sixth of its lowering time for Wan 2.1 14B 720p.
    """
    return lower(workload, candidate, slice_, kernel_bodies=False)


def lowering_target(candidate: Candidate, slice_: Slice) -> str:
    """What :func:`lower` depends on in ``slice_``, as a key part: the lowering family
    (:func:`aoizora.tpu.lowering_family`) and the device ids of the default mesh in
    mesh-flat order. Slices with the same target lower a candidate to the same text,
    so Stage 1 reads one lowering for both (``shardy/`` in :mod:`aoizora.cache`).
    """
    mesh = make_mesh(candidate, topology_devices(slice_))
    ids = ",".join(str(int(d.id)) for d in mesh.devices.flat)
    return f"{lowering_family(slice_)}|{ids}"


@dataclass(frozen=True)
class MemoryUsage:
    """Per-device bytes from ``compiled.memory_analysis()`` (a device is a chip, or one of
    a tpu7x chip's two TensorCore chiplets).

    ``total_bytes`` = argument + output + temp + generated code - aliased (donated)
    bytes: what the chip must hold at the peak of the step.
    """

    argument_bytes: int
    output_bytes: int
    temp_bytes: int
    alias_bytes: int
    generated_code_bytes: int

    @property
    def total_bytes(self) -> int:
        return (
            self.argument_bytes
            + self.output_bytes
            + self.temp_bytes
            + self.generated_code_bytes
            - self.alias_bytes
        )


@dataclass(frozen=True)
class CompileResult:
    """The outcome of compiling one candidate for one slice (never raised, always returned).

    ``ok`` is False when lowering or compiling failed; ``error`` then says why and the
    numeric fields are zero. ``flops`` and ``bytes_accessed`` are per chip, from
    ``cost_analysis`` (a scan body counted once; Pallas calls not costed -- see
    docs/facts.md, libtpu AOT topologies). ``feasible`` compares ``memory.total_bytes``
    with the chip's HBM (``None`` when the HBM size is unknown); ``feasibility_reason``
    gives the numbers.
    ``backend`` is ``"cpu"`` on the libtpu-missing fallback, and ``warnings`` says so.
    ``cache_hit``: the result came from the compile cache; ``compile_s`` is then the
    seconds spent reading it (the cold compile time is not repeated).
    ``first_compile_s``: the seconds the compile itself took, in this run or in the
    run that filled the cache.
    """

    candidate_id: str
    slice_name: str
    backend: Backend
    ok: bool
    error: str | None
    hlo_text: str
    flops: float
    bytes_accessed: float
    memory: MemoryUsage | None
    hbm_bytes: int | None
    feasible: bool | None
    feasibility_reason: str
    lower_s: float
    compile_s: float
    device_order: tuple[int, ...]
    warnings: tuple[str, ...]
    cache_hit: bool = False
    first_compile_s: float = 0.0


def _to_json(result: CompileResult) -> dict[str, Any]:
    return dataclasses.asdict(result)


def _from_json(data: dict[str, Any], *, read_s: float, lower_s: float) -> CompileResult:
    mem = data["memory"]
    return CompileResult(
        candidate_id=data["candidate_id"],
        slice_name=data["slice_name"],
        backend=data["backend"],
        ok=data["ok"],
        error=data["error"],
        hlo_text=data["hlo_text"],
        flops=data["flops"],
        bytes_accessed=data["bytes_accessed"],
        memory=None if mem is None else MemoryUsage(**mem),
        hbm_bytes=data["hbm_bytes"],
        feasible=data["feasible"],
        feasibility_reason=data["feasibility_reason"],
        lower_s=lower_s,
        compile_s=read_s,
        device_order=tuple(data["device_order"]),
        warnings=tuple(data["warnings"]),
        cache_hit=True,
        first_compile_s=float(data.get("first_compile_s") or data["compile_s"]),
    )


def memory_usage(compiled: Any) -> MemoryUsage | None:
    """Per-device bytes of ``compiled`` from XLA's ``memory_analysis()`` (None when the
    backend gives none)."""
    mem = compiled.memory_analysis()
    if mem is None:
        return None
    return MemoryUsage(
        argument_bytes=int(mem.argument_size_in_bytes),
        output_bytes=int(mem.output_size_in_bytes),
        temp_bytes=int(mem.temp_size_in_bytes),
        alias_bytes=int(mem.alias_size_in_bytes),
        generated_code_bytes=int(mem.generated_code_size_in_bytes),
    )


def _cost(compiled: Any) -> tuple[float, float]:
    cost = compiled.cost_analysis()
    if isinstance(cost, list):  # older jax returned one dict per program
        cost = cost[0] if cost else {}
    cost = cost or {}
    return float(cost.get("flops", 0.0)), float(cost.get("bytes accessed", 0.0))


def _feasibility(memory: MemoryUsage | None, hbm: int | None) -> tuple[bool | None, str]:
    if memory is None:
        return None, "memory_analysis unavailable"
    gib = 2.0**30
    need = memory.total_bytes
    detail = (
        f"{need / gib:.2f} GiB per device (arguments {memory.argument_bytes / gib:.2f} + "
        f"outputs {memory.output_bytes / gib:.2f} + temp {memory.temp_bytes / gib:.2f} + "
        f"code {memory.generated_code_bytes / gib:.3f} - aliased {memory.alias_bytes / gib:.2f})"
    )
    if hbm is None:
        return None, f"{detail}; chip HBM unknown (pass hbm_bytes)"
    if need <= hbm:
        return True, f"fits: {detail} <= HBM {hbm / gib:.2f} GiB"
    return False, f"does not fit: {detail} > HBM {hbm / gib:.2f} GiB"


def _failed(
    exc: Exception, *, candidate: Candidate, slice_: Slice, backend: Backend, hbm: int | None,
    lower_s: float, elapsed_s: float, order: tuple[int, ...], notes: tuple[str, ...],
) -> CompileResult:  # fmt: skip
    error = f"{type(exc).__name__}: {exc}"
    # The TPU compiler refuses a program that cannot fit HBM: that is a verdict on
    # memory (infeasible, with the compiler's numbers), not an unknown.
    oom = "RESOURCE_EXHAUSTED" in error or "HbmOom" in error
    reason = "compile failed"
    if oom:
        reason = f"does not fit: the compiler ran out of HBM ({error.splitlines()[0]})"
    return CompileResult(
        candidate_id=candidate.id, slice_name=slice_.name, backend=backend, ok=False,
        error=error, hlo_text="", flops=0.0, bytes_accessed=0.0,
        memory=None, hbm_bytes=hbm, feasible=False if oom else None, feasibility_reason=reason,
        lower_s=lower_s, compile_s=elapsed_s, device_order=order, warnings=notes,
    )  # fmt: skip


def _cached(
    cache: JsonCache, key: str, *, candidate: Candidate, hbm: int | None, lower_s: float
) -> CompileResult | None:
    t0 = time.perf_counter()
    data = cache.get(key)
    if data is None:
        return None
    hit = _from_json(data, read_s=time.perf_counter() - t0, lower_s=lower_s)
    if hit.memory is not None:
        feasible, reason = _feasibility(hit.memory, hbm)
        hit = dataclasses.replace(hit, hbm_bytes=hbm, feasible=feasible, feasibility_reason=reason)
    return dataclasses.replace(hit, candidate_id=candidate.id)


def _lookup(
    cache: JsonCache,
    lowered_text: str,
    *,
    slice_: Slice,
    backend: str,
    order: Sequence[int],
    candidate: Candidate,
    hbm: int | None,
    lower_s: float,
) -> tuple[str, CompileResult | None]:
    """The compile key of ``lowered_text`` and the cached result under it, if any.

    Caches filled before compile keys were install-neutral
    (:func:`aoizora.cache.install_neutral`) hold results under the raw text's key;
    one found there is copied to the new key.
    """

    def key_of(*, legacy: bool) -> str:
        return compile_key(
            lowered_text=lowered_text, slice_name=slice_.name, backend=backend, order=order,
            legacy=legacy,
        )  # fmt: skip

    key = key_of(legacy=False)
    hit = _cached(cache, key, candidate=candidate, hbm=hbm, lower_s=lower_s)
    if hit is None:  # the raw-text key only for a miss
        old = cache.get(key_of(legacy=True))
        if old is not None:
            cache.put(key, old)
            hit = _cached(cache, key, candidate=candidate, hbm=hbm, lower_s=lower_s)
    return key, hit


def candidate_key(
    workload: Workload, candidate: Candidate, slice_: Slice, backend: str, order: Sequence[int]
) -> str:
    """A cache key of ``candidate``'s program on ``slice_`` that needs no lowering: the
    workload's ``cache_id``, the candidate, the slice, ``backend`` and the device order."""
    return lowered_key(
        workload=workload.cache_id,
        candidate=json.dumps(candidate_to_json(candidate), sort_keys=True),
        slice_name=slice_.name, backend=backend, order=order,
    )  # fmt: skip


def _indexed(
    cache: JsonCache, index_key: str, *, candidate: Candidate, hbm: int | None
) -> CompileResult | None:
    """The cached compile the lowered-program index points at, without lowering."""
    entry = cache.get(index_key)
    key = entry.get("compile_key") if entry is not None else None
    if not isinstance(key, str):
        return None
    return _cached(cache, key, candidate=candidate, hbm=hbm, lower_s=0.0)


def cached_compile(
    workload: Workload,
    candidate: Candidate,
    slice_: Slice,
    *,
    cache: JsonCache,
    order: Sequence[int] | None = None,
) -> CompileResult | None:
    """:func:`compile_candidate`'s result if ``cache`` has it (one lowering), else None.

    Lets a caller fan out only the compiles that are not cached. Any failure to
    lower is left to :func:`compile_candidate` (None here).
    """
    backend = slice_backend(slice_)
    chip_hbm = slice_.chip.per_device().memory_budget_bytes  # as compile_candidate: one device's
    hbm = None if math.isnan(chip_hbm) else int(chip_hbm)
    t0 = time.perf_counter()
    try:
        mesh = make_mesh(candidate, topology_devices(slice_), order)
        used_order = tuple(int(d.id) for d in mesh.devices.flat)
        index_key = candidate_key(workload, candidate, slice_, backend, used_order)
        hit = _indexed(cache, index_key, candidate=candidate, hbm=hbm)
        if hit is not None:
            return hit
        lowered = _jitted(workload, candidate, mesh, backend).trace(*workload.abstract_args).lower()
    except Exception:
        return None
    options = compiler_options(candidate) if backend == "tpu" else {}
    key, found = _lookup(
        cache, lowered.as_text(), slice_=slice_, backend=backend + _options_tag(options),
        order=used_order,
        candidate=candidate, hbm=hbm, lower_s=time.perf_counter() - t0,
    )  # fmt: skip
    if found is not None:
        cache.put(index_key, {"compile_key": key})
    return found


def compile_candidate(
    workload: Workload,
    candidate: Candidate,
    slice_: Slice,
    *,
    order: Sequence[int] | None = None,
    cache: JsonCache | None = None,
    hbm_bytes: int | None = None,
) -> CompileResult:
    """Compile ``candidate`` for ``slice_`` with ``order`` (physical ids, mesh-flat).

    ``cache`` (the ``compiled/`` cache of :func:`aoizora.cache.plan_caches`) keeps
    results (HLO text, costs, memory) under :func:`aoizora.cache.compile_key`, so a
    warm run costs one lowering plus a file read. Compiles that fail for memory are
    cached too; other failures are not. ``hbm_bytes`` overrides one device's HBM
    (``slice_.chip.per_device().memory_budget_bytes``: a tpu7x chip's 192 GiB is two devices of
    96 GiB, and ``memory_analysis`` is per device). Failures come back as ``ok=False``.
    """
    backend = slice_backend(slice_)
    options = compiler_options(candidate) if backend == "tpu" else {}
    keyed_backend = backend + _options_tag(options)  # a raised limit is another compile
    note = fallback_note(slice_)
    notes: tuple[str, ...] = (note,) if note else ()
    chip_hbm = slice_.chip.per_device().memory_budget_bytes
    hbm = hbm_bytes if hbm_bytes is not None else (None if math.isnan(chip_hbm) else int(chip_hbm))
    t0 = time.perf_counter()
    lower_s = 0.0
    used_order: tuple[int, ...] = ()
    key: str | None = None
    try:
        mesh = make_mesh(candidate, topology_devices(slice_), order)
        used_order = tuple(int(d.id) for d in mesh.devices.flat)
        index_key = candidate_key(workload, candidate, slice_, backend, used_order)
        if cache is not None:
            hit = _indexed(cache, index_key, candidate=candidate, hbm=hbm)
            if hit is not None:
                return hit
        lowered = _jitted(workload, candidate, mesh, backend).trace(*workload.abstract_args).lower()
        lower_s = time.perf_counter() - t0
        if cache is not None:
            key, hit = _lookup(
                cache, lowered.as_text(), slice_=slice_, backend=keyed_backend, order=used_order,
                candidate=candidate, hbm=hbm, lower_s=lower_s,
            )  # fmt: skip
            if hit is not None:
                cache.put(index_key, {"compile_key": key})
                return hit
        t1 = time.perf_counter()
        compiled, hlo_text = compiled_hlo(lowered, slice_, options=options)
        compile_s = time.perf_counter() - t1
        flops, bytes_accessed = _cost(compiled)
        memory = memory_usage(compiled)
    except Exception as exc:
        failed = _failed(
            exc, candidate=candidate, slice_=slice_, backend=backend, hbm=hbm, lower_s=lower_s,
            elapsed_s=time.perf_counter() - t0, order=used_order, notes=notes,
        )  # fmt: skip
        if failed.feasible is False and cache is not None and key is not None:
            cache.put(key, _to_json(failed))
            cache.put(index_key, {"compile_key": key})
        return failed
    feasible, reason = _feasibility(memory, hbm)
    result = CompileResult(
        candidate_id=candidate.id, slice_name=slice_.name, backend=backend, ok=True, error=None,
        hlo_text=hlo_text, flops=flops, bytes_accessed=bytes_accessed, memory=memory,
        hbm_bytes=hbm, feasible=feasible, feasibility_reason=reason, lower_s=lower_s,
        compile_s=compile_s, device_order=used_order, warnings=notes,
        first_compile_s=compile_s,
    )  # fmt: skip
    if cache is not None and key is not None:
        cache.put(key, _to_json(result))
        cache.put(index_key, {"compile_key": key})
    return result
