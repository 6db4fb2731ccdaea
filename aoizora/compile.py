"""Lower and compile candidates for a TPU slice ahead of time, on a CPU-only machine.

libtpu's AOT topologies (``jax.experimental.topologies.get_topology_desc``) give
real TPU device descriptions without a TPU; ``jax.jit(...).trace(*abstract).lower()
.compile()`` over a :class:`jax.sharding.Mesh` of them yields TPU-compiled HLO, its
``cost_analysis`` and per-chip ``memory_analysis``.

* :func:`topology_devices` -- the slice's devices (cached per process); without
  libtpu it falls back to host CPU devices and says so loudly (a warning, and
  ``backend="cpu"`` plus a warning line in every :class:`CompileResult`).
* :func:`make_mesh` -- a mesh for a candidate and a device order (libtpu physical ids in
  mesh-flat order; default: :func:`default_device_order`).
* :func:`lower` -- cheap (no XLA compile); Stage 1 reads its StableHLO.
* :func:`compile_candidate` -- never raises for a failing candidate: the result carries
  the error. With ``cache_dir`` it keeps a persistent cache of compile *results* keyed by
  the StableHLO, target, device order and versions (:func:`compile_cache_key` says why
  jax's own ``jax_compilation_cache_dir`` cannot serve AOT topology compiles).

    >>> slice_num_chips("v5e:2x4"), slice_chip("v5e:2x4")
    (8, 'v5e')
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import hashlib
import importlib.metadata
import importlib.util
import json
import math
import os
import re
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding

from aoizora.candidates import Candidate
from aoizora.errors import CompileError, PlacementError
from aoizora.rules import is_logical_axes, logical_to_pspec
from aoizora.workload import Backend, BuildContext, Workload

__all__ = [
    "MemoryUsage",
    "CompileResult",
    "slice_chip",
    "slice_shape",
    "slice_num_chips",
    "topology_devices",
    "slice_backend",
    "default_device_order",
    "make_mesh",
    "lower",
    "compile_candidate",
    "compile_cache_key",
    "chip_hbm_bytes",
]

_SLICE_RE = re.compile(r"^([a-z0-9]+):(\d+(?:x\d+)*)$")


def _parse_slice(slice_name: str) -> tuple[str, tuple[int, ...]]:
    m = _SLICE_RE.match(slice_name.strip().lower())
    if not m:
        raise CompileError(
            f"slice name {slice_name!r} is not CHIP:AxB[xC], e.g. 'v5e:2x4' or 'v5p:2x2x2'"
        )
    return m.group(1), tuple(int(v) for v in m.group(2).split("x"))


def slice_chip(slice_name: str) -> str:
    """The chip generation of ``slice_name`` (``"v5e:2x4" -> "v5e"``)."""
    return _parse_slice(slice_name)[0]


def slice_shape(slice_name: str) -> tuple[int, ...]:
    """The chip grid of ``slice_name`` (``"v5e:2x4" -> (2, 4)``)."""
    return _parse_slice(slice_name)[1]


def slice_num_chips(slice_name: str) -> int:
    """Chips in ``slice_name``."""
    return math.prod(slice_shape(slice_name))


def _cpu_fallback_message(slice_name: str, exc: BaseException) -> str:
    return (
        f"CPU FALLBACK: libtpu could not describe {slice_name} ({type(exc).__name__}: {exc}); "
        f"compiling for the host CPU backend instead -- HLO, FLOPs and memory are NOT TPU's. "
        f"Install libtpu==0.0.52 to compile for TPU."
    )


@functools.cache
def _devices(slice_name: str) -> tuple[tuple[Any, ...], Backend, str]:
    _parse_slice(slice_name)
    n = slice_num_chips(slice_name)
    if importlib.util.find_spec("libtpu") is None:
        message = _cpu_fallback_message(slice_name, ModuleNotFoundError("no module 'libtpu'"))
        warnings.warn(message, RuntimeWarning, stacklevel=3)
        cpus = jax.devices("cpu")
        if len(cpus) < n:
            raise CompileError(
                f"{message} But only {len(cpus)} CPU devices exist; set "
                f"XLA_FLAGS=--xla_force_host_platform_device_count={n} before importing jax"
            )
        return tuple(cpus[:n]), "cpu", message
    # We only compile ahead of time and never run on a TPU, so several planner processes
    # (or test workers) may load libtpu at once; without this libtpu's process lockfile
    # makes every process but the first fail.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    from jax.experimental import topologies

    try:
        topo = topologies.get_topology_desc(topology_name=slice_name, platform="tpu")
    except Exception as exc:
        raise CompileError(
            f"libtpu could not describe slice {slice_name!r}: {type(exc).__name__}: {exc}; "
            f"use a slice libtpu knows, e.g. 'v5e:2x4' or 'v6e:4x4'"
        ) from exc
    devs = tuple(topo.devices)
    if len(devs) != n:
        raise CompileError(
            f"libtpu gave {len(devs)} devices for {slice_name}, expected {n} chips "
            f"(chips with several cores, like v4, are not supported yet)"
        )
    return devs, "tpu", ""


def topology_devices(slice_name: str) -> list[Any]:
    """The devices of ``slice_name`` (libtpu AOT; host CPUs if libtpu is missing).

    Cached per process. For TPU slices each device has ``id`` (libtpu's physical id,
    ``x + X*y`` on v5e) and ``coords``.
    """
    return list(_devices(slice_name)[0])


def slice_backend(slice_name: str) -> Backend:
    """``"tpu"`` when libtpu describes the slice, else ``"cpu"`` (the fallback)."""
    return _devices(slice_name)[1]


def default_device_order(mesh_shape: Sequence[int], slice_name: str) -> tuple[tuple[int, ...], str]:
    """maxdiffusion's device order for ``mesh_shape`` on ``slice_name`` and a note.

    maxdiffusion builds its mesh with ``mesh_utils.create_device_mesh(shape, devices,
    allow_split_physical_axes=False)``; where that raises (e.g. data=2 x context=8 on a
    4x4) we retry with ``allow_split_physical_axes=True`` and say so in the note
    (docs/facts.md, mesh_utils device order). Returns physical ids in mesh-flat
    (row-major) order.
    """
    from jax.experimental import mesh_utils

    devices = topology_devices(slice_name)
    shape = [int(s) for s in mesh_shape]
    if math.prod(shape) != len(devices):
        raise PlacementError(
            f"mesh shape {shape} has {math.prod(shape)} devices but {slice_name} has "
            f"{len(devices)}; sizes must multiply to {len(devices)}"
        )
    note = "mesh_utils.create_device_mesh(allow_split_physical_axes=False)"
    try:
        arr = mesh_utils.create_device_mesh(shape, devices)
    except (NotImplementedError, ValueError, AssertionError) as exc:
        arr = mesh_utils.create_device_mesh(shape, devices, allow_split_physical_axes=True)
        note = (
            f"mesh_utils.create_device_mesh raised {type(exc).__name__} without splitting "
            f"physical axes (maxdiffusion's setting would fail here); used "
            f"allow_split_physical_axes=True"
        )
    if slice_backend(slice_name) == "cpu":
        note += "; CPU FALLBACK: ids are host CPU device ids, not chips"
    return tuple(int(d.id) for d in arr.flat), note


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


def _jitted(workload: Workload, candidate: Candidate, mesh: Mesh, backend: Backend) -> Any:
    ctx = BuildContext(mesh=mesh, rules=candidate.rules, attention=candidate.attention,
                       backend=backend)  # fmt: skip
    fn = workload.build(ctx)
    in_sh = tuple(_shardings(mesh, candidate, ax) for ax in workload.arg_logical_axes)
    out_sh = _shardings(mesh, candidate, workload.out_logical_axes)
    return jax.jit(fn, in_shardings=in_sh, out_shardings=out_sh)


def lower(
    workload: Workload,
    candidate: Candidate,
    slice_name: str,
    *,
    order: Sequence[int] | None = None,
) -> jax.stages.Lowered:
    """Trace and lower ``candidate`` for ``slice_name`` (no XLA compile; well under 1 s).

    ``lowered.as_text()`` is StableHLO with Shardy shardings; Stage 1 reads it.
    Raises :class:`CompileError` if tracing fails.
    """
    devices = topology_devices(slice_name)
    mesh = make_mesh(candidate, devices, order)
    try:
        jitted = _jitted(workload, candidate, mesh, slice_backend(slice_name))
        return jitted.trace(*workload.abstract_args).lower()
    except Exception as exc:
        raise CompileError(
            f"lowering {workload.name} candidate {candidate.id} for {slice_name} failed: "
            f"{type(exc).__name__}: {exc}"
        ) from exc


@dataclass(frozen=True)
class MemoryUsage:
    """Per-chip bytes from ``compiled.memory_analysis()``.

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


def _versions() -> str:
    parts = [f"jax={jax.__version__}"]
    for dist in ("jaxlib", "libtpu"):
        try:
            parts.append(f"{dist}={importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            parts.append(f"{dist}=none")
    return ",".join(parts)


def compile_cache_key(
    lowered_text: str, slice_name: str, backend: Backend, order: Sequence[int]
) -> str:
    """Key of one compile: the StableHLO, the target, the device order and the versions.

    jax's own persistent cache (``jax_compilation_cache_dir``) cannot serve libtpu AOT
    compiles: reading an entry back fails with "PjRtCompiler must be constructed with a
    Client to call DeserializeLoadedExecutable" (checked with jax 0.10.2 + libtpu
    0.0.52; docs/facts.md, libtpu AOT topologies). The planner only needs the
    compile's products (HLO text, costs, memory), so :func:`compile_candidate` caches
    those under this key instead.
    """
    h = hashlib.sha256()
    for part in (_CACHE_FORMAT, _versions(), slice_name, backend, ",".join(map(str, order))):
        h.update(part.encode())
        h.update(b"\0")
    h.update(lowered_text.encode())
    return h.hexdigest()


_CACHE_FORMAT = "aoizora.compile-cache/1"


def _cache_path(cache_dir: str, key: str) -> Path:
    return Path(cache_dir) / f"{key}.json.gz"


def _cache_load(cache_dir: str, key: str) -> dict[str, Any] | None:
    path = _cache_path(cache_dir, key)
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            data: dict[str, Any] = json.load(f)
    except (OSError, ValueError, EOFError):
        return None  # absent or unreadable: compile again
    return data if data.get("format") == _CACHE_FORMAT else None


def _cache_store(cache_dir: str, key: str, result: CompileResult) -> None:
    path = _cache_path(cache_dir, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = dataclasses.asdict(result)
    data["format"] = _CACHE_FORMAT
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    with gzip.open(tmp, "wt", encoding="utf-8") as f:
        json.dump(data, f, sort_keys=True)
    tmp.replace(path)  # atomic: concurrent planners never read half a file


def _from_cache(data: dict[str, Any], *, read_s: float, lower_s: float) -> CompileResult:
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
    )


def chip_hbm_bytes(chip: str) -> int | None:
    """HBM per chip from the simulator's chip table (``sim.topology.load_chip``), or None."""
    try:
        from sim import topology  # another module owns the chip numbers
    except ImportError:
        return None
    load_chip = getattr(topology, "load_chip", None)
    if load_chip is None:
        return None
    try:
        return int(load_chip(chip).hbm_bytes)
    except Exception:
        return None


def _memory(compiled: Any) -> MemoryUsage | None:
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
        f"{need / gib:.2f} GiB per chip (arguments {memory.argument_bytes / gib:.2f} + "
        f"outputs {memory.output_bytes / gib:.2f} + temp {memory.temp_bytes / gib:.2f} + "
        f"code {memory.generated_code_bytes / gib:.3f} - aliased {memory.alias_bytes / gib:.2f})"
    )
    if hbm is None:
        return None, f"{detail}; chip HBM unknown (pass hbm_bytes)"
    if need <= hbm:
        return True, f"fits: {detail} <= HBM {hbm / gib:.2f} GiB"
    return False, f"does not fit: {detail} > HBM {hbm / gib:.2f} GiB"


def compile_candidate(
    workload: Workload,
    candidate: Candidate,
    slice_name: str,
    *,
    order: Sequence[int] | None = None,
    cache_dir: str | None = None,
    hbm_bytes: int | None = None,
) -> CompileResult:
    """Compile ``candidate`` for ``slice_name`` with ``order`` (physical ids, mesh-flat).

    ``cache_dir`` turns on the persistent compile cache: results (HLO text, costs,
    memory) are stored gzipped under :func:`compile_cache_key`, so a warm run costs
    one lowering plus a file read. Compiles that fail for memory are cached too;
    other failures are not. ``hbm_bytes`` overrides the chip's HBM from
    :func:`chip_hbm_bytes`. Failures come back as ``ok=False`` with the message.
    """
    backend = slice_backend(slice_name)
    note = _devices(slice_name)[2]
    notes: tuple[str, ...] = (note,) if note else ()
    hbm = hbm_bytes if hbm_bytes is not None else chip_hbm_bytes(slice_chip(slice_name))
    devices = topology_devices(slice_name)
    t0 = time.perf_counter()
    lower_s = 0.0
    used_order: tuple[int, ...] = ()
    key: str | None = None
    try:
        mesh = make_mesh(candidate, devices, order)
        used_order = tuple(int(d.id) for d in mesh.devices.flat)
        lowered = _jitted(workload, candidate, mesh, backend).trace(*workload.abstract_args).lower()
        lower_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        if cache_dir is not None:
            key = compile_cache_key(lowered.as_text(), slice_name, backend, used_order)
            data = _cache_load(cache_dir, key)
            if data is not None:
                hit = _from_cache(data, read_s=time.perf_counter() - t1, lower_s=lower_s)
                if hit.memory is not None:
                    feasible, reason = _feasibility(hit.memory, hbm)
                    hit = dataclasses.replace(
                        hit, hbm_bytes=hbm, feasible=feasible, feasibility_reason=reason
                    )
                return dataclasses.replace(hit, candidate_id=candidate.id)
        compiled = lowered.compile()
        compile_s = time.perf_counter() - t1
        hlo_text = compiled.as_text()
        flops, bytes_accessed = _cost(compiled)
        memory = _memory(compiled)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
        # The TPU compiler refuses a program that cannot fit HBM: that is a verdict on
        # memory (infeasible, with the compiler's numbers), not an unknown.
        oom = "RESOURCE_EXHAUSTED" in error or "HbmOom" in error
        reason = "compile failed"
        if oom:
            reason = f"does not fit: the compiler ran out of HBM ({error.splitlines()[0]})"
        failed = CompileResult(
            candidate_id=candidate.id, slice_name=slice_name, backend=backend, ok=False,
            error=error, hlo_text="", flops=0.0, bytes_accessed=0.0,
            memory=None, hbm_bytes=hbm, feasible=False if oom else None, feasibility_reason=reason,
            lower_s=lower_s, compile_s=time.perf_counter() - t0, device_order=used_order,
            warnings=notes,
        )  # fmt: skip
        if oom and cache_dir is not None and key is not None:
            _cache_store(cache_dir, key, failed)
        return failed
    feasible, reason = _feasibility(memory, hbm)
    result = CompileResult(
        candidate_id=candidate.id, slice_name=slice_name, backend=backend, ok=True, error=None,
        hlo_text=hlo_text, flops=flops, bytes_accessed=bytes_accessed, memory=memory,
        hbm_bytes=hbm, feasible=feasible, feasibility_reason=reason, lower_s=lower_s,
        compile_s=compile_s, device_order=used_order, warnings=notes,
    )  # fmt: skip
    if cache_dir is not None and key is not None:
        _cache_store(cache_dir, key, result)
    return result
