"""Where and with what a measurement ran: the provenance every row carries.

The measurement format's ``hardware``, ``software``, ``software_date`` and ``source``
columns (docs/validation.md) hold, for a row of ``aoizora measure``: the device kind
and count, the number of hosts and the slice; the jax, jaxlib, libtpu and AoiZora
versions (with the git commit when AoiZora runs from a checkout or was built from one,
else "no commit": an unpacked archive); the date of the run
(UTC); and the plan file with its SHA-256. A dry run on host CPU devices starts its
``hardware`` with ``cpu`` -- the rule by which
``aoizora validate`` and ``aoizora calibrate`` refuse such rows
(:mod:`aoizora.studies.validation.origin`).

    >>> env = Environment(backend="tpu", device_kind="TPU v5 lite", num_devices=8,
    ...     num_hosts=1, versions=Provenance("0.1.0", "0.10.2", "0.10.2", "0.0.52"),
    ...     date="2026-09-01", plan_file="plan.json", plan_sha256="ab" * 32)
    >>> env.hardware("v5e:2x4")
    'TPU v5 lite: 8 devices on 1 host, slice v5e:2x4'
    >>> env.software()
    'jax 0.10.2, jaxlib 0.10.2, libtpu 0.0.52, aoizora 0.1.0 (no commit)'
    >>> import dataclasses
    >>> dataclasses.replace(env, versions=Provenance("0.1.0", "0.10.2", "0.10.2", "0.0.42.1",
    ...     "032b454e1f0a+dirty")).software()
    'jax 0.10.2, jaxlib 0.10.2, libtpu 0.0.42.1, aoizora 0.1.0 (git 032b454e1f0a+dirty)'
"""

from __future__ import annotations

import datetime
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax

from aoizora.errors import MeasureError
from aoizora.plan.fields import Provenance
from aoizora.studies.validation.origin import CPU_HARDWARE_PREFIX

__all__ = ["Environment", "current_environment", "plan_digest"]


@dataclass(frozen=True)
class Environment:
    """The run's devices, hosts, software, date and plan file (module docstring)."""

    backend: str
    device_kind: str
    num_devices: int
    num_hosts: int
    versions: Provenance
    date: str
    plan_file: str
    plan_sha256: str
    process_index: int = 0

    @property
    def writes(self) -> bool:
        """Whether this process writes the measurement file (process 0 of a multi-host run)."""
        return self.process_index == 0

    @property
    def is_cpu(self) -> bool:
        return self.backend == "cpu"

    def hardware(self, slice_name: str) -> str:
        hosts = f"{self.num_hosts} host{'s' if self.num_hosts != 1 else ''}"
        if self.is_cpu:
            return (
                f"{CPU_HARDWARE_PREFIX} (dry run, not a TPU): {self.num_devices} host CPU devices "
                f"({self.device_kind}) on {hosts}, placed as on {slice_name}"
            )
        return f"{self.device_kind}: {self.num_devices} devices on {hosts}, slice {slice_name}"

    def software(self) -> str:
        """The versions that ran (AoiZora's from its source tree when it ran from one, with
        the commit if that is a git checkout: :mod:`aoizora.software`)."""
        v = self.versions
        commit = "no commit" if v.aoizora_commit is None else f"git {v.aoizora_commit}"
        return (
            f"jax {v.jax or 'not installed'}, jaxlib {v.jaxlib or 'not installed'}, libtpu "
            f"{v.libtpu or 'not installed'}, aoizora {v.aoizora or 'unknown'} ({commit})"
        )

    def source(self) -> str:
        return (
            f"aoizora measure {Path(self.plan_file).name} (plan sha256 {self.plan_sha256}), "
            f"run {self.date}"
        )


def plan_digest(path: str | Path) -> str:
    """The SHA-256 of the plan file's bytes (hex)."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError as exc:
        raise MeasureError(f"cannot read plan file {str(path)!r}: {exc.strerror}") from None


def current_environment(
    devices: Sequence[Any], *, backend: str, plan_file: str | Path, today: str | None = None
) -> Environment:
    """The environment of this process: ``devices`` (what the rows ran on), the installed
    versions, ``jax.process_count()`` hosts and today's UTC date (``today`` overrides)."""
    kinds = sorted({str(d.device_kind) for d in devices})
    return Environment(
        backend=backend,
        device_kind=" / ".join(kinds),
        num_devices=len(devices),
        num_hosts=jax.process_count(),
        versions=Provenance.current(),
        date=today or datetime.datetime.now(datetime.UTC).date().isoformat(),
        plan_file=str(plan_file),
        plan_sha256=plan_digest(plan_file),
        process_index=jax.process_index(),
    )
