"""A device profile of a compiled program: the time each HLO instruction took on the device.

Reading a saved trace is input, like reading HLO text (:mod:`aoizora.hlo.text`): the
studies that explain and fit steps read it, and so does ``aoizora measure``, which writes
it (:func:`aoizora.measure.capture.capture_profile` runs a call under
``jax.profiler.trace``). :func:`read_profile` reads a trace file (``*.xplane.pb``, the
XSpace protobuf jax's profiler writes) with jaxlib's own reader
(``jax.profiler.ProfileData``), so a saved trace is read on any machine, with or without
a TPU, and needs no TensorFlow or xprof.

What is read (the layout a TPU trace has, seen on TPU v5e with jax 0.10.2 and libtpu
0.0.42.1; docs/measure.md, "Op by op"):

* The device planes (``/device:TPU:0``, ...; on the host CPU backend, the thunk
  executor's events, which carry an ``hlo_op`` stat instead).
* Line ``XLA Modules``: one event per execution of a compiled module, named
  ``<module name>(<fingerprint>)``; its duration is the step as the device ran it.
* Line ``XLA Ops``: one event per execution of an instruction, named by the
  instruction's text (``%fusion.3 = bf16[...] fusion(...)``), so the name up to `` = ``
  is the instruction's name in the compiled HLO. Ops inside a ``while`` body appear once
  per iteration, and the ``while`` (and ``call``/``conditional``) itself appears too,
  spanning its body: :class:`DeviceProfile` keeps every op, and the caller drops the
  control-flow ones (it knows their opcodes from the HLO).
* Line ``Async XLA Ops`` (DMAs from start to done, beside the cores) is not read: the
  time the core spends on an async op is its ``*-start``/``*-done`` in ``XLA Ops``.

Only events inside an execution of the module asked for are kept (a trace can hold other
programs: input generation, the timing loop's neighbours), and the times are per
execution of it: totals divided by the executions seen.

    >>> p = DeviceProfile(module="jit_step", executions_s=(0.5, 0.5),
    ...                   ops=(OpTime("fusion.1", 0.6, 4), OpTime("while.2", 0.9, 2)))
    >>> p.step_s, p.op("fusion.1").per_step_s, p.op("fusion.1").count_per_step
    (0.5, 0.3, 2.0)
"""

from __future__ import annotations

import gzip
import json
import statistics
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aoizora.errors import MeasureError

__all__ = [
    "DeviceProfile",
    "OpTime",
    "load_profile",
    "op_name_of",
    "profile_of",
    "read_profile",
    "read_text_file",
]

_MODULES_LINE = "XLA Modules"
_OPS_LINE = "XLA Ops"


@dataclass(frozen=True)
class OpTime:
    """One instruction over the profiled executions: its total device time and events."""

    name: str
    total_s: float
    events: int
    executions: int = 1

    @property
    def per_step_s(self) -> float:
        """Device seconds per execution of the module."""
        return self.total_s / self.executions

    @property
    def count_per_step(self) -> float:
        """How often it ran per execution of the module (a loop body's ops: the trips)."""
        return self.events / self.executions


@dataclass(frozen=True)
class DeviceProfile:
    """The device time of one module's executions and of each instruction in them."""

    module: str
    executions_s: tuple[float, ...]
    ops: tuple[OpTime, ...]
    device: str = ""

    def __post_init__(self) -> None:
        n = len(self.executions_s)
        object.__setattr__(
            self, "ops", tuple(OpTime(o.name, o.total_s, o.events, n or 1) for o in self.ops)
        )

    @property
    def step_s(self) -> float:
        """The median execution of the module on the device."""
        return statistics.median(self.executions_s) if self.executions_s else 0.0

    def op(self, name: str) -> OpTime:
        for o in self.ops:
            if o.name == name:
                return o
        raise KeyError(name)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "module": self.module,
            "device": self.device,
            "executions_s": list(self.executions_s),
            "ops": [{"name": o.name, "total_s": o.total_s, "events": o.events} for o in self.ops],
        }

    @classmethod
    def from_json_dict(cls, data: dict[str, Any]) -> DeviceProfile:
        ops = tuple(
            OpTime(str(o["name"]), float(o["total_s"]), int(o["events"])) for o in data["ops"]
        )
        return cls(str(data["module"]), tuple(map(float, data["executions_s"])), ops,
                   str(data.get("device", "")))  # fmt: skip


def op_name_of(event_name: str) -> str:
    """The instruction name of an ``XLA Ops`` event (``%fusion.3 = bf16[..] ...`` -> ``fusion.3``).

    >>> op_name_of("%copy.69 = bf16[2,9360]{1,0} copy(bf16[2,9360]{0,1} %x)"), op_name_of("add.1")
    ('copy.69', 'add.1')
    """
    return event_name.split(" = ", 1)[0].strip().lstrip("%")


def _stats(event: Any) -> dict[str, Any]:
    try:
        return dict(event.stats)
    except Exception:  # an event without stats
        return {}


def _module_matches(event_name: str, module: str | None) -> bool:
    if module is None:
        return True
    base = event_name.split("(", 1)[0]
    return base == module or base.startswith(module + ".")


def _device_lines(data: Any) -> Iterable[tuple[str, dict[str, Any]]]:
    """(plane name, {line name: line}) of every device plane in a ProfileData."""
    for plane in data.planes:
        if plane.name.startswith("/device:") and not plane.name.startswith("/device:CUSTOM"):
            yield plane.name, {line.name: line for line in plane.lines}


def _tpu_profile(plane: str, lines: dict[str, Any], module: str | None) -> DeviceProfile | None:
    if _MODULES_LINE not in lines or _OPS_LINE not in lines:
        return None
    runs = [
        (e.start_ns, e.start_ns + e.duration_ns, e.name)
        for e in lines[_MODULES_LINE].events
        if _module_matches(e.name, module)
    ]
    if not runs:
        return None
    runs.sort()
    per_run: list[dict[str, list[float]]] = [{} for _ in runs]
    k = 0
    for e in sorted(lines[_OPS_LINE].events, key=lambda e: e.start_ns):
        while k < len(runs) and e.start_ns >= runs[k][1]:
            k += 1
        if k == len(runs):
            break
        if e.start_ns < runs[k][0]:
            continue  # another program's op
        entry = per_run[k].setdefault(op_name_of(e.name), [0.0, 0])
        entry[0] += e.duration_ns * 1e-9
        entry[1] += 1
    # An execution already running when the trace started shows only its tail: keep
    # the executions with every op event (the most events).
    events = [sum(int(c) for _, c in r.values()) for r in per_run]
    whole = [i for i, n in enumerate(events) if n == max(events)]
    totals: dict[str, list[float]] = {}
    for i in whole:
        for op, (t, c) in per_run[i].items():
            entry = totals.setdefault(op, [0.0, 0])
            entry[0] += t
            entry[1] += int(c)
    name = runs[0][2].split("(", 1)[0]
    ops = tuple(OpTime(n, t, int(c)) for n, (t, c) in totals.items())
    seconds = tuple((runs[i][1] - runs[i][0]) * 1e-9 for i in whole)
    return DeviceProfile(name, seconds, ops, plane)


def _cpu_profile(data: Any, module: str | None, executions: int) -> DeviceProfile | None:
    """The host CPU backend's ops (events with an ``hlo_op`` stat): no module events, so the
    executions are the ones the caller made and each is the mean of the ops' sum."""
    totals: dict[str, list[float]] = {}
    name = module or ""
    for plane in data.planes:
        if not plane.name.startswith("/host:CPU"):
            continue
        for line in plane.lines:
            for e in line.events:
                stats = _stats(e)
                op, mod = stats.get("hlo_op"), str(stats.get("hlo_module", ""))
                if op is None or not _module_matches(mod, module):
                    continue
                name = name or mod
                entry = totals.setdefault(str(op), [0.0, 0])
                entry[0] += e.duration_ns * 1e-9
                entry[1] += 1
    if not totals:
        return None
    n = max(1, executions)
    per = sum(t for t, _ in totals.values()) / n
    ops = tuple(OpTime(k, t, int(c)) for k, (t, c) in totals.items())
    return DeviceProfile(name, (per,) * n, ops, "/host:CPU")


def read_profile(
    path: str | Path, *, module: str | None = None, executions: int = 1
) -> DeviceProfile:
    """The device profile of ``module`` (its HLO module name, e.g. ``jit_step``; None: the
    first module found) in the trace file ``path`` (``*.xplane.pb``).

    A trace of the host CPU backend has no module events: ``executions`` says how many
    calls it holds. Raises :class:`MeasureError` when the file is unreadable or holds no
    device ops of it.
    """
    from jax.profiler import ProfileData

    try:
        data = ProfileData.from_file(str(path))
    except Exception as exc:
        raise MeasureError(
            f"{path}: not a readable profiler trace (an *.xplane.pb written by "
            f"jax.profiler.trace): {type(exc).__name__}: {exc}"
        ) from exc
    return profile_of(data, module=module, executions=executions, where=str(path))


def profile_of(
    data: Any, *, module: str | None = None, executions: int = 1, where: str = "the trace"
) -> DeviceProfile:
    """:func:`read_profile` of a ``jax.profiler.ProfileData`` already read (tests build
    one from a text XSpace with ``ProfileData.from_text_proto``)."""
    planes: list[str] = []
    for plane, lines in _device_lines(data):
        planes.append(f"{plane} ({', '.join(sorted(lines))})")
        found = _tpu_profile(plane, lines, module)
        if found is not None:
            return found
    cpu = _cpu_profile(data, module, executions)
    if cpu is not None:
        return cpu
    wanted = f"module {module!r}" if module else "any module"
    raise MeasureError(
        f"{where}: no device events of {wanted} (lines '{_MODULES_LINE}' and '{_OPS_LINE}' on "
        f"a device plane); device planes found: {'; '.join(planes) or 'none'}. Profile on a "
        "TPU (aoizora measure --profile), or name the module with --module"
    )


def read_text_file(path: str | Path) -> str:
    """A text file, gunzipped when its name ends in ``.gz`` (saved HLO fixtures)."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise MeasureError(f"cannot read {str(path)!r}: {exc.strerror}") from None
    return (gzip.decompress(raw) if str(path).endswith(".gz") else raw).decode("utf-8")


def load_profile(
    path: str | Path, *, module: str | None = None, executions: int = 1
) -> DeviceProfile:
    """A device profile from a trace (``*.xplane.pb``, or ``*.xplane.pb.gz``) or from the
    op table :meth:`DeviceProfile.to_json_dict` saved (``*.ops.json``, ``*.ops.json.gz``):
    the form the repository keeps measured steps in."""
    name = str(path)
    if name.endswith((".ops.json", ".ops.json.gz")):
        try:
            return DeviceProfile.from_json_dict(json.loads(read_text_file(path)))
        except (KeyError, TypeError, ValueError) as exc:
            raise MeasureError(f"{path}: not an op table of a device profile: {exc}") from None
    if name.endswith(".gz"):
        with tempfile.TemporaryDirectory(prefix="aoizora-trace-") as tmp:
            plain = Path(tmp) / "trace.xplane.pb"
            plain.write_bytes(gzip.decompress(Path(path).read_bytes()))
            return read_profile(plain, module=module, executions=executions)
    return read_profile(path, module=module, executions=executions)
