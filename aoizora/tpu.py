"""A slice's TPU devices from libtpu's AOT topologies, on a CPU-only machine.

libtpu describes real TPU slices without a TPU
(``jax.experimental.topologies.get_topology_desc``): devices with libtpu's physical
ids (``x + X*y`` on v5e) and chip coordinates (docs/facts.md, libtpu AOT topologies).
A tpu7x chip is two devices (``slice_.chip.devices_per_chip``): ``tpu7x:2x2x1`` has 8,
numbered ``2 * chip id + core``.
Everything here takes a :class:`sim.topology.Slice` value; slice names are parsed
only by :mod:`sim.topology`.

* :func:`topology_devices` -- the slice's devices (cached per process); without
  libtpu it falls back to host CPU devices and says so loudly (a warning, and
  ``backend="cpu"`` plus a note that :mod:`aoizora.compile` puts in every result).
* :func:`slice_backend` -- ``"tpu"`` or ``"cpu"`` (the fallback).
* :func:`lowering_family` -- which slices jax lowers a program for alike
  (v5e and v6e: one family), so Stage 1 reads one lowering for both.
* :func:`default_device_order` -- maxdiffusion's device order for a mesh shape
  (``mesh_utils.create_device_mesh``), the baselines' placement.
* :func:`check_slice` -- fail fast, before any work, when libtpu cannot describe a
  slice (e.g. ``v5e:3x3``), naming the shapes it does describe near that size;
  :func:`libtpu_describes` is libtpu's rule for that, which needs neither jax nor libtpu.

libtpu prints start-up chatter on file descriptor 2 from C++ when its plugin starts
on a machine that is not a TPU VM (no ``TPU_ACCELERATOR_TYPE``, no worker
hostnames). The first libtpu call of a process runs with fd 2 piped through a small
filter process that drops the known chatter lines (:func:`is_libtpu_chatter`) and
passes every other line on as it comes, so real errors still reach the terminal --
even if libtpu aborts the process (the filter outlives it and flushes what it got).

    >>> from sim.topology import load_slice
    >>> libtpu_topology_name(load_slice("v5e:2x4", wraparound=True))
    'v5e:2x4'
"""

from __future__ import annotations

import contextlib
import functools
import glob
import importlib.util
import math
import os
import re
import subprocess
import sys
import threading
import warnings
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from aoizora.errors import CompileError, PlacementError
from sim.topology import Slice

if TYPE_CHECKING:  # only a type: importing aoizora.workloads would start jax, and a bad
    # slice must be refused before that (check_slice)
    from aoizora.workloads.base import Backend

__all__ = [
    "HOST_BLOCK",
    "check_slice",
    "chips_per_host_bounds",
    "default_device_order",
    "describable_shapes_near",
    "fallback_note",
    "is_libtpu_chatter",
    "libtpu_describes",
    "libtpu_topology_name",
    "lowering_family",
    "on_tpu_vm",
    "slice_backend",
    "topology_devices",
]


def libtpu_topology_name(slice_: Slice) -> str:
    """The name libtpu knows ``slice_`` by: generation and shape (wrap overrides do not
    change the compiled program, only the simulated network)."""
    return f"{slice_.chip.generation}:{'x'.join(str(n) for n in slice_.shape)}"


# Chip generations whose devices jax lowers a program for identically. jax 0.10.2
# reads a TPU device only in Pallas/Mosaic's get_tpu_info() (jax/_src/pallas/mosaic/
# tpu_info.py, lowering.py): the generation compared with 4 and 7, the vreg shape
# (8 sublanes x 128 lanes since v4), SparseCore facts (SparseCore kernels only) and the
# TensorCores a device has. v5e and v6e agree on all of them (one core a device,
# generation 5 and 6); v4 and v5p devices are two-core megacores, tpu7x is generation 7.
# docs/facts.md, Shardy from Python; tests/aoizora/stage1/test_sweep.py lowers
# every attention kind for both and compares the text.
_LOWERING_FAMILIES: dict[str, str] = {"v5e": "v5e/v6e", "v6e": "v5e/v6e"}


def lowering_family(slice_: Slice) -> str:
    """The slices jax lowers a program for alike, with ``slice_``: ``"tpu:v5e/v6e"``
    for v5e and v6e, ``"tpu:<generation>"`` for any other TPU, ``"cpu"`` on the
    libtpu-missing fallback. (The mesh's device order is the other part of the target.)

    >>> from sim.topology import load_slice
    >>> lowering_family(load_slice("v6e:2x2")) == lowering_family(load_slice("v5e:2x4"))
    True
    """
    if slice_backend(slice_) != "tpu":
        return "cpu"
    generation = slice_.chip.generation
    return f"tpu:{_LOWERING_FAMILIES.get(generation, generation)}"


def _cpu_fallback_message(name: str, exc: BaseException) -> str:
    return (
        f"CPU FALLBACK: libtpu could not describe {name} ({type(exc).__name__}: {exc}); "
        f"compiling for the host CPU backend instead -- HLO, FLOPs and memory are NOT TPU's. "
        f"Install libtpu==0.0.52 to compile for TPU."
    )


# What libtpu 0.0.52 prints on fd 2 when its plugin starts on a machine that is not a
# TPU VM: it looks for TPU-VM metadata (accelerator type, worker hostnames) that AOT
# compiles never need. Matched line by line; any other line is passed through.
_CHATTER = (
    re.compile(r"^Failed to find host bounds for accelerator type: .*TPU_ACCELERATOR_TYPE"),
    re.compile(r"^WARNING: Logging before InitGoogle\(\) is written to STDERR$"),
    re.compile(r"^E\d{4} [\d:.]+ +\d+ common_lib\.cc:\d+\] .*TPU_WORKER_HOSTNAMES"),
    re.compile(r"^=== Source Location Trace: ===$"),
    re.compile(r"^[\w./-]*/libtpu_init_utils\.cc:\d+$"),
)
_START_LOCK = threading.Lock()
_started = False  # has this process started libtpu (and so printed its chatter)?
# The filter process: stdin lines not matching any pattern (argv) go to stdout.
_FILTER = (
    "import re, sys\n"
    "patterns = [re.compile(p) for p in sys.argv[1:]]\n"
    "for raw in sys.stdin.buffer:\n"
    "    text = raw.decode('utf-8', 'replace').rstrip()\n"
    "    if not any(p.search(text) for p in patterns):\n"
    "        sys.stdout.buffer.write(raw)\n"
    "        sys.stdout.buffer.flush()\n"
)
# libtpu 0.0.52 describes a slice exactly when each of its first two dimensions is 1 or
# even; a third dimension may take any length within the pod. Probed here for every shape
# of v5e and v6e, every shape of up to 64 chips of v4, v5p and tpu7x and random larger
# ones (docs/facts.md, libtpu AOT topologies; tests/aoizora/test_tpu.py re-probes).
_EVEN_OR_ONE_DIMS = 2
_MAX_LISTED = 6  # shapes named per chip count in the error


def on_tpu_vm() -> bool:
    """True on a machine with a TPU attached (a TPU VM): its chips show as ``/dev/accel*``
    (v4) or VFIO groups (``/dev/vfio/<n>``, v5e and later), or the VM says its type.

    There libtpu's AOT defaults follow the attached host (:func:`chips_per_host_bounds`
    says why that does not matter here) and libtpu prints none of the chatter below.
    """
    if os.environ.get("TPU_ACCELERATOR_TYPE"):
        return True
    return bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"))


def is_libtpu_chatter(line: str) -> bool:
    """True for a line of libtpu's start-up chatter on a machine that is not a TPU VM.

    >>> is_libtpu_chatter("WARNING: Logging before InitGoogle() is written to STDERR")
    True
    >>> is_libtpu_chatter("E0000 00:00:1796283125.46 7656 tpu_compiler.cc:12] out of memory")
    False
    """
    text = line.rstrip()
    return any(p.search(text) for p in _CHATTER)


@contextlib.contextmanager
def _without_chatter() -> Iterator[None]:
    """Pipe file descriptor 2 (libtpu writes from C++) through a filter process that drops
    the chatter and passes every other line on at once."""
    sys.stderr.flush()
    saved = os.dup(2)
    read_end, write_end = os.pipe()
    patterns = [p.pattern for p in _CHATTER]
    # -I -S: an isolated interpreter without site packages starts in a few ms.
    filt = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", _FILTER, *patterns], stdin=read_end, stdout=saved
    )
    os.close(read_end)
    os.dup2(write_end, 2)
    os.close(write_end)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)  # closes the pipe's last writer: the filter drains it and exits
        os.close(saved)
        filt.wait()


def _describe(name: str, shape: Sequence[int]) -> tuple[Any, ...]:
    """libtpu's devices of topology ``name`` of chip ``shape`` (raises what libtpu raises)."""
    global _started
    # We only compile ahead of time and never run on a TPU, so several planner processes
    # (or test workers) may load libtpu at once; without this libtpu's process lockfile
    # makes every process but the first fail.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    from jax.experimental import topologies

    with _START_LOCK:
        if not _started:  # libtpu chatters once, when its plugin starts
            try:
                with _without_chatter():
                    return _topology_devices(topologies, name, shape)
            finally:
                _started = True
    return _topology_devices(topologies, name, shape)


# The chips of one TPU host in libtpu's description of every generation here (v4, v5e,
# v5p, v6e, tpu7x): a 2x2x1 block. On a machine without a TPU libtpu takes that block
# clipped to the slice; on a TPU VM it takes the attached host's block instead (a one-chip
# v5e host refused "v5e:1x1 is not divisible by ... chips_per_host_bounds 2x2x1", issue
# 34). Passing the clipped block always describes the same devices everywhere
# (tests/aoizora/test_tpu_host.py compares them with the CPU defaults, slice by slice).
HOST_BLOCK: tuple[int, int, int] = (2, 2, 1)


def chips_per_host_bounds(shape: Sequence[int]) -> tuple[int, int, int]:
    """libtpu's ``chips_per_host_bounds`` for a slice of chip ``shape``: :data:`HOST_BLOCK`
    clipped to the slice, so what is described never depends on the attached TPU.

    >>> chips_per_host_bounds((1, 1)), chips_per_host_bounds((2, 4)), chips_per_host_bounds((1, 8))
    ((1, 1, 1), (2, 2, 1), (1, 2, 1))
    """
    dims = [int(d) for d in shape] + [1] * (3 - len(shape))
    x, y, z = (min(h, d) for h, d in zip(HOST_BLOCK, dims[:3], strict=True))
    return x, y, z


def _topology_devices(topologies: Any, name: str, shape: Sequence[int]) -> tuple[Any, ...]:
    bounds = list(chips_per_host_bounds(shape))
    try:
        desc = topologies.get_topology_desc(
            topology_name=name, platform="tpu", chips_per_host_bounds=bounds
        )
    except Exception as exc:
        if "chips_per_host_bounds" not in str(exc) or "nexpected" not in str(exc):
            raise
        # a libtpu without the option: its defaults (right on any machine but a TPU VM)
        desc = topologies.get_topology_desc(topology_name=name, platform="tpu")
    return tuple(desc.devices)


def _shapes_of(num_chips: int, pod_shape: Sequence[int]) -> list[tuple[int, ...]]:
    """Every shape (each orientation) of ``num_chips`` chips that fits in the pod."""
    pod = sorted(pod_shape)
    out: list[tuple[int, ...]] = []

    def walk(prefix: tuple[int, ...], rest: int, dims: int) -> None:
        if dims == 1:
            shape = (*prefix, rest)
            if all(a <= b for a, b in zip(sorted(shape), pod, strict=True)):
                out.append(shape)
            return
        for d in range(1, rest + 1):
            if rest % d == 0:
                walk((*prefix, d), rest // d, dims - 1)

    walk((), num_chips, len(pod))
    # Squarest first (the usual slice shapes), then lexicographic.
    return sorted(out, key=lambda s: (max(s), s))


def libtpu_describes(shape: Sequence[int]) -> bool:
    """True when libtpu describes a slice of this chip ``shape`` (one that fits its pod).

    libtpu's rule, probed (see ``_EVEN_OR_ONE_DIMS``): each of the first two
    dimensions is 1 or even. No jax, no libtpu: a bad slice is refused in milliseconds.

    >>> libtpu_describes((2, 4)), libtpu_describes((3, 3)), libtpu_describes((2, 2, 3))
    (True, False, True)
    """
    return all(d == 1 or d % 2 == 0 for d in shape[:_EVEN_OR_ONE_DIMS])


def describable_shapes_near(slice_: Slice) -> dict[int, tuple[str, ...]]:
    """Shapes libtpu describes for ``slice_``'s generation, nearest in chip count.

    Returns ``{chips: (shape, ...)}`` for the slice's own chip count (other shapes)
    and the nearest smaller and larger counts that have any, within the pod; squarest
    shapes first. Decided by :func:`libtpu_describes`, so it never starts libtpu.
    """
    return _near(slice_.num_chips, slice_.chip.pod_shape)


def _near(n: int, pod_shape: tuple[int, ...]) -> dict[int, tuple[str, ...]]:
    pod_chips = math.prod(pod_shape)
    found: dict[int, tuple[str, ...]] = {}
    below = above = False
    for distance in range(pod_chips):
        for m in sorted({n - distance, n + distance}):
            if not 1 <= m <= pod_chips or (m < n and below) or (m > n and above):
                continue
            ok = tuple(
                "x".join(map(str, shape))
                for shape in _shapes_of(m, pod_shape)
                if libtpu_describes(shape)
            )
            if ok:
                found[m] = ok
                below, above = below or m < n, above or m > n
        if (below or n - distance <= 1) and (above or n + distance >= pod_chips):
            break
    return dict(sorted(found.items()))


def _not_described(slice_: Slice, reason: str) -> CompileError:
    """The error for a slice libtpu does not describe: why, and the nearest shapes it takes."""
    name = libtpu_topology_name(slice_)
    generation, n = slice_.chip.generation, slice_.num_chips
    near = _near(n, slice_.chip.pod_shape)
    listing = "; ".join(
        f"{m} chips: {', '.join(shapes[:_MAX_LISTED])}" + (", ..." * (len(shapes) > _MAX_LISTED))
        for m, shapes in near.items()
    )
    # The example: the squarest listed shape (the usual slices), then the nearest count.
    dims = {t: [int(d) for d in t.split("x")] for ts in near.values() for t in ts}
    picks = [(max(dims[t]), -min(dims[t]), abs(m - n), m, t) for m, ts in near.items() for t in ts]
    example = f"{generation}:{min(picks)[-1]}" if picks else "v5e:2x4"
    return CompileError(
        f"libtpu cannot describe slice {name!r} ({reason}); the {generation} shapes it "
        f"describes nearest to {n} chips are {listing or 'none'}; e.g. --slice {example}"
    )


def _rule_reason(slice_: Slice) -> str:
    odd = [d for d in slice_.shape[:_EVEN_OR_ONE_DIMS] if d != 1 and d % 2]
    return (
        f"its first two dimensions must each be 1 or even, and "
        f"{'x'.join(map(str, slice_.shape))} has {' and '.join(map(str, odd))}"
    )


@functools.cache
def _devices(
    name: str, shape: tuple[int, ...], num_devices: int
) -> tuple[tuple[Any, ...], Backend, str]:
    import jax

    if importlib.util.find_spec("libtpu") is None:
        message = _cpu_fallback_message(name, ModuleNotFoundError("no module 'libtpu'"))
        warnings.warn(message, RuntimeWarning, stacklevel=3)
        cpus = jax.devices("cpu")
        if len(cpus) < num_devices:
            raise CompileError(
                f"{message} But only {len(cpus)} CPU devices exist; set "
                f"XLA_FLAGS=--xla_force_host_platform_device_count={num_devices} before "
                f"importing jax"
            )
        return tuple(cpus[:num_devices]), "cpu", message
    try:
        devs = _describe(name, shape)
    except Exception as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise _Refused(reason) from exc
    if len(devs) != num_devices:
        raise CompileError(
            f"libtpu gave {len(devs)} devices for {name}, expected {num_devices} (the chips "
            f"times devices_per_chip of topologies/{name.split(':')[0]}.toml); set "
            f"devices_per_chip in that file to libtpu's devices per chip"
        )
    return devs, "tpu", ""


class _Refused(Exception):
    """libtpu refused to describe a topology (its reason is the message)."""


def _slice_devices(slice_: Slice) -> tuple[tuple[Any, ...], Backend, str]:
    try:
        return _devices(libtpu_topology_name(slice_), tuple(slice_.shape), slice_.num_devices)
    except _Refused as exc:
        raise _not_described(slice_, str(exc)) from exc.__cause__


def check_slice(slice_: Slice, *, describe: bool = True) -> None:
    """Raise :class:`CompileError` now if libtpu cannot describe ``slice_``.

    Call it before any work: the error names the reason and the shapes libtpu
    describes nearest in chip count. A shape outside libtpu's rule
    (:func:`libtpu_describes`) is refused before jax or libtpu start; any other is
    then described by libtpu (cached, so later calls cost nothing) unless
    ``describe=False`` (check several slices by the rule first, then describe them).
    """
    if not libtpu_describes(slice_.shape):
        raise _not_described(slice_, _rule_reason(slice_))
    if describe:
        _slice_devices(slice_)


def topology_devices(slice_: Slice) -> list[Any]:
    """The devices of ``slice_`` (libtpu AOT; host CPUs if libtpu is missing).

    Cached per process. For TPU slices each device has ``id`` (libtpu's physical id,
    ``x + X*y`` on v5e) and ``coords``.
    """
    return list(_slice_devices(slice_)[0])


def slice_backend(slice_: Slice) -> Backend:
    """``"tpu"`` when libtpu describes the slice, else ``"cpu"`` (the fallback)."""
    return _slice_devices(slice_)[1]


def fallback_note(slice_: Slice) -> str:
    """The CPU-fallback warning for ``slice_`` (``""`` when libtpu describes it)."""
    return _slice_devices(slice_)[2]


def default_device_order(mesh_shape: Sequence[int], slice_: Slice) -> tuple[tuple[int, ...], str]:
    """maxdiffusion's device order for ``mesh_shape`` on ``slice_`` and a note.

    maxdiffusion builds its mesh with ``mesh_utils.create_device_mesh(shape, devices,
    allow_split_physical_axes=False)``; where that raises (e.g. data=2 x context=8 on a
    4x4) we retry with ``allow_split_physical_axes=True`` and say so in the note
    (docs/facts.md, mesh_utils device order). Returns physical ids in mesh-flat
    (row-major) order.
    """
    from jax.experimental import mesh_utils

    devices = topology_devices(slice_)
    shape = [int(s) for s in mesh_shape]
    if math.prod(shape) != len(devices):
        raise PlacementError(
            f"mesh shape {shape} has {math.prod(shape)} devices but {slice_.name} has "
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
    if slice_backend(slice_) == "cpu":
        note += "; CPU FALLBACK: ids are host CPU device ids, not chips"
    return tuple(int(d.id) for d in arr.flat), note
