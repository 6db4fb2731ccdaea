"""Does a compiled target fit in memory? Checked before it runs, so a run never takes the
machine down with it.

A compiled program's ``memory_analysis()`` gives the bytes one device holds: arguments,
outputs and temporaries, less what outputs alias (donated arguments).

* ``tpu``: each device must hold that much; the device's own limit is its
  ``memory_stats()["bytes_limit"]`` (or the chip's HBM from topologies/*.toml where the
  runtime does not say). The analysis counts more than a TPU holds: on a v5e chip what
  the runtime held ran from :data:`TPU_HELD_PER_ANALYSED` (a Wan 2.1 VAE decode of 81
  frames: 6.44 GiB held, 8.13 GiB analysed) to 1.00 of it over 15 programs
  (validation/v5e/memory/study.json), and a 1280x720x21 decode analysed at 15.8 GiB ran
  under the 15.75 GiB limit. So a TPU target is refused only when even that share of it
  would not fit; one that then needs more fails on the device, is reported, and the run
  goes on.
* ``cpu`` (a dry run): every host CPU device runs the program at once in one process, so
  the host must hold it once per device; the limit is ``MemAvailable`` of
  ``/proc/meminfo``, less :data:`HOST_MARGIN`. XLA's CPU backend does not count what its
  custom fusions allocate (jax 0.10.2's CPU compile puts a whole attention, score matrix
  included, in one: ``temp_size_in_bytes`` said 0.9 GiB for a step whose scores take
  16 GiB), so there the temporaries are also estimated from the compiled HLO -- twice its
  largest buffer (a producer and its consumer alive at once, e.g. the scores and their
  softmax) -- and the larger of the two is taken.

A target that would not fit raises :class:`TargetTooLarge`, one line naming the need,
the limit and how to make it fit; :func:`aoizora.measure.run.run_measure` lists it and
measures the others.

    >>> host_available_bytes("MemTotal: 24000000 kB\\nMemAvailable:   2000000 kB\\n")
    2048000000
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aoizora.compile import MemoryUsage, memory_usage
from aoizora.errors import HloParseError, MeasureError
from aoizora.hlo.text import parse_module

__all__ = [
    "HOST_MARGIN",
    "TPU_HELD_PER_ANALYSED",
    "MemoryCheck",
    "TargetTooLarge",
    "check_memory",
    "device_limit_bytes",
    "estimated_temp_bytes",
    "held_bytes",
    "host_available_bytes",
    "own_held_bytes",
    "reserved_bytes",
    "program_memory",
    "require_fit",
]

# The share of MemAvailable a CPU dry run may plan to use: the process itself, the
# compiler and the other processes of the machine need the rest.
HOST_MARGIN = 0.8
# The least a TPU v5e chip held of what XLA's memory analysis gave, over the 15 programs
# of validation/v5e/memory/study.json (bytes_in_use + bytes_reserved, outputs alive):
# 0.793, a Wan 2.1 VAE decode of 832x480x81 (module docstring).
TPU_HELD_PER_ANALYSED = 0.79
_GIB = float(1 << 30)
_MEMINFO = Path("/proc/meminfo")
# Results that are not buffers of their own (views, tuples of other buffers, inputs).
_NOT_BUFFERS = frozenset(
    {"parameter", "constant", "tuple", "get-tuple-element", "bitcast", "copy-done", "after-all"}
)
_TEMP_BUFFERS = 2  # the largest buffer and the one it is computed from or into
# Fusions XLA emits as one loop nest: their inner values are never materialised. A custom
# fusion (kCustom, e.g. jax 0.10.2's CPU "__ynn_fusion" of a whole attention) runs its body
# as a graph of library ops whose intermediates (the score matrix) are real buffers.
_XLA_FUSIONS = frozenset({"kLoop", "kInput", "kOutput"})


class TargetTooLarge(MeasureError):
    """A target whose compiled program would not fit in the memory it would run in."""


@dataclass(frozen=True)
class MemoryCheck:
    """What a target needs against what it has (bytes), and where that limit comes from."""

    need_bytes: int
    have_bytes: int | None
    limit: str  # e.g. "TPU v5 lite bytes_limit per device", "host MemAvailable x 0.8"
    detail: str  # how the need adds up

    @property
    def fits(self) -> bool:
        """True when it fits or no limit is known (nothing to refuse it on)."""
        return self.have_bytes is None or self.need_bytes <= self.have_bytes

    def summary(self) -> str:
        have = "unknown" if self.have_bytes is None else f"{self.have_bytes / _GIB:.2f} GiB"
        return f"needs {self.need_bytes / _GIB:.2f} GiB ({self.detail}); {self.limit}: {have}"


def program_memory(compiled: Any) -> MemoryUsage | None:
    """Per-device bytes of ``compiled`` (``memory_analysis()``), None where unavailable."""
    try:
        return memory_usage(compiled)
    except Exception:  # a backend without the analysis: the check cannot refuse anything
        return None


def estimated_temp_bytes(hlo_text: str) -> int:
    """Temporaries of a CPU-compiled program, estimated from its HLO (module docstring):
    twice the largest result of an instruction that is a buffer of its own, outside the
    bodies of XLA's loop fusions (whose inner values are never materialised)."""
    try:
        module = parse_module(hlo_text)
    except HloParseError:
        return 0  # an unreadable module: fall back on what memory_analysis says
    fused = {
        callee
        for comp in module.computations.values()
        for instr in comp.instructions
        if instr.opcode == "fusion" and instr.attrs.get("kind") in _XLA_FUSIONS
        for callee in instr.called()
    }
    largest = 0
    for name, comp in module.computations.items():
        if name in fused:
            continue
        for instr in comp.instructions:
            if instr.opcode not in _NOT_BUFFERS:
                largest = max(largest, max((s.size_bytes for s in instr.shape.leaves()), default=0))
    return _TEMP_BUFFERS * largest


def host_available_bytes(meminfo: str | None = None) -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` (or of the ``meminfo`` text) in bytes."""
    if meminfo is None:
        try:
            meminfo = _MEMINFO.read_text(encoding="ascii")
        except OSError:
            return None  # not Linux: no host limit to check against
    m = re.search(r"^MemAvailable:\s+(\d+)\s*kB", meminfo, re.MULTILINE)
    return None if m is None else int(m.group(1)) * 1024


def device_limit_bytes(devices: Sequence[Any], fallback: float | None = None) -> int | None:
    """The smallest ``bytes_limit`` the devices report, else ``fallback`` (the chip's HBM)."""
    limits = []
    for device in devices:
        try:
            stats = device.memory_stats()
        except Exception:  # a runtime without memory stats
            stats = None
        if stats and stats.get("bytes_limit"):
            limits.append(int(stats["bytes_limit"]))
    if limits:
        return min(limits)
    return int(fallback) if fallback and math.isfinite(fallback) else None


def check_memory(
    compiled: Any,
    devices: Sequence[Any],
    *,
    backend: str,
    hbm_bytes: float | None = None,
    meminfo: str | None = None,
) -> MemoryCheck:
    """Whether ``compiled`` fits where it runs (module docstring); never raises itself."""
    usage = program_memory(compiled)
    if usage is None:
        return MemoryCheck(0, None, "memory_analysis unavailable", "not analysed")
    temp, how = usage.temp_bytes, "temp"
    if backend == "cpu":  # what XLA reports misses what its custom fusions allocate
        estimate = estimated_temp_bytes(compiled.as_text())
        if estimate > temp:
            temp, how = estimate, "temp est. from the HLO"
    per_device = max(usage.total_bytes - usage.temp_bytes + temp, 0)
    detail = (
        f"arguments {usage.argument_bytes / _GIB:.2f} + outputs {usage.output_bytes / _GIB:.2f} "
        f"+ {how} {temp / _GIB:.2f} - aliased {usage.alias_bytes / _GIB:.2f} GiB per device"
    )
    if backend == "cpu":
        available = host_available_bytes(meminfo)
        have = None if available is None else int(available * HOST_MARGIN)
        return MemoryCheck(
            per_device * len(devices),
            have,
            f"host MemAvailable x {HOST_MARGIN}",
            f"{detail}, x {len(devices)} host devices",
        )
    kinds = " / ".join(sorted({str(getattr(d, "device_kind", "device")) for d in devices}))
    # what a device holds may be as little as TPU_HELD_PER_ANALYSED of the analysis
    need = max(int(per_device * TPU_HELD_PER_ANALYSED), usage.argument_bytes + usage.output_bytes)
    return MemoryCheck(
        need, device_limit_bytes(devices, hbm_bytes), f"{kinds} memory per device",
        f"{detail}; x {TPU_HELD_PER_ANALYSED}, the least a TPU held of its analysis",
    )  # fmt: skip


def require_fit(check: MemoryCheck, *, backend: str) -> None:
    """Raise :class:`TargetTooLarge` (one line) when ``check`` does not fit."""
    if check.fits:
        return
    hint = (
        "a smaller --cpu-clip (e.g. --cpu-clip 256x256x5) or a machine with more memory"
        if backend == "cpu"
        else "a larger slice, or a plan made for this chip's memory"
    )
    raise TargetTooLarge(f"would not fit in memory: {check.summary()}; try {hint}")


def held_bytes(devices: Sequence[Any]) -> int | None:
    """What a program holds on the busiest device while its outputs are alive: the
    runtime's ``bytes_in_use`` (arguments, outputs, code) plus ``bytes_reserved`` (the
    program's temporaries, which TPU runtimes reserve apart and ``bytes_in_use`` and
    ``peak_bytes_in_use`` do not count). None where the runtime keeps no statistics (CPU).

    Measured on a TPU v5 lite chip (validation/v5e/memory/study.json): on all 15 programs
    that ran, this sum lies between the limit less the largest ballast (zeros held beside
    the program) with which it still ran and the limit less the smallest with which it
    failed, a 64 MiB window; e.g. a Wan 2.1 VAE decode: 0.46 GiB in use + 5.82 GiB
    reserved, while ``peak_bytes_in_use`` saw 0.46 GiB and the chip's XLA analysis says
    7.64 GiB (docs/measure.md, "Memory").

    >>> class D:
    ...     def memory_stats(self): return {"bytes_in_use": 30, "bytes_reserved": 70}
    >>> held_bytes([D(), D()]), held_bytes([object()])
    (100, None)
    """
    stats = _device_stats(devices)
    if stats is None:
        return None
    return max(
        (int(x["bytes_in_use"]) + int(x.get("bytes_reserved", 0)) for x in stats), default=None
    )


def _device_stats(devices: Sequence[Any]) -> list[dict[str, Any]] | None:
    """Every device's ``memory_stats()``, or None where one keeps no statistics (CPU)."""
    out = []
    for d in devices:
        stats = d.memory_stats() if hasattr(d, "memory_stats") else None
        if not stats or "bytes_in_use" not in stats:
            return None
        out.append(stats)
    return out


def reserved_bytes(devices: Sequence[Any]) -> int | None:
    """The runtime's ``bytes_reserved`` on the busiest device (None without statistics).

    >>> class D:
    ...     def memory_stats(self): return {"bytes_in_use": 30, "bytes_reserved": 70}
    >>> reserved_bytes([D()]), reserved_bytes([object()])
    (70, None)
    """
    stats = _device_stats(devices)
    return (
        None
        if stats is None
        else max((int(x.get("bytes_reserved", 0)) for x in stats), default=None)
    )


def own_held_bytes(
    held: int | None, reserved_before: int | None, reserved_after: int | None
) -> int | None:
    """What one target held (:func:`held_bytes`), or None when it cannot be told apart from an
    earlier program's: the runtime keeps a program's reservation for temporaries after it
    ends, so a later, smaller program measured in the same process fits inside it and the
    reading is the earlier one's (measured on a v5e chip: a DiT step analysed at 2.23 GB
    read 4.38 GB after one of 4.37 GB; validation/README.md, section 10). A reservation that
    grew while the target ran is the target's own; one that did not may not be.

    >>> own_held_bytes(500, 0, 300), own_held_bytes(500, 400, 450), own_held_bytes(500, 400, 400)
    (500, 500, None)
    """
    if held is None or reserved_before is None or reserved_after is None:
        return held
    return held if reserved_before == 0 or reserved_after > reserved_before else None
