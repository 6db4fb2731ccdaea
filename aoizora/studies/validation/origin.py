"""Where a measured row ran: on the TPU slice it names, or on the host CPU (a dry run).

``aoizora measure --backend cpu`` times the plan's steps and collectives on host CPU
devices to exercise the harness; its rows name the plan's TPU slice (the configuration
that ran) but say in ``hardware`` that they ran on the CPU: a row ran on the CPU when
its ``hardware`` cell starts with ``cpu`` (any case; docs/validation.md). Such a time
says nothing about the slice, so ``aoizora validate`` and ``aoizora calibrate`` refuse
these rows (:func:`check_tpu_rows`) instead of judging the simulator by them.

>>> from aoizora.studies.validation.format import parse_measurements
>>> rows = parse_measurements(
...     "row_id,kind,slice,collective,groups,size_bytes,measured_s,spread_kind,source,hardware\\n"
...     "a,collective,v5e:2x2,all-gather,dims:0,1024,1e-4,unreported,x,cpu (dry run): 8\\n")
>>> ran_on_cpu(rows[0])
True
>>> check_tpu_rows(rows, name="m.csv")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
aoizora.errors.ValidationError: m.csv:2: row 'a' ran on the host CPU (its hardware cell ...
"""

from __future__ import annotations

from collections.abc import Iterable

from aoizora.errors import ValidationError
from aoizora.studies.validation.format import Measurement

__all__ = ["CPU_HARDWARE_PREFIX", "check_tpu_rows", "ran_on_cpu"]

# How a row says it ran on the host CPU (the start of its hardware cell, any case).
CPU_HARDWARE_PREFIX = "cpu"


def ran_on_cpu(row: Measurement) -> bool:
    """Whether ``row`` ran on the host CPU rather than its TPU slice (module docstring)."""
    return row.hardware.strip().lower().startswith(CPU_HARDWARE_PREFIX)


def check_tpu_rows(rows: Iterable[Measurement], *, name: str | None = None) -> None:
    """Raise :class:`ValidationError` at the first row that ran on the host CPU.

    ``name`` is the file the rows come from (the message then reads ``FILE:LINE``).
    """
    for row in rows:
        if ran_on_cpu(row):
            where = f"{name}:{row.line}" if name else f"line {row.line}"
            raise ValidationError(
                f"{where}: row {row.row_id!r} ran on the host CPU (its hardware cell starts "
                f"with {CPU_HARDWARE_PREFIX!r}: an aoizora measure --backend cpu dry run), not "
                f"on the TPU slice {row.slice_name}, so it cannot judge predictions for "
                f"{row.slice_name}; measure on the TPU (aoizora measure PLAN.json on a TPU VM, "
                "docs/measure.md) or drop the CPU rows from the file"
            )
