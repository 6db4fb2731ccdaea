"""The measurement file a run writes: rows kept across interruptions, written atomically.

``aoizora measure`` rewrites the whole file after every measured row: the text goes
to ``FILE.tmp`` beside it and replaces ``FILE`` in one ``os.replace`` (atomic on POSIX),
so an interrupted run -- Ctrl-C, SIGTERM, a lost VM -- leaves the rows measured so far
in a file that parses. Run the same command again and every configuration already
in the file (same slice and case, :meth:`RowStore.holds`) is kept, not re-measured.
Rows of other plans already in the file are kept as they are. A file of dry-run (CPU)
rows and a TPU run (or the reverse) do not mix: the run is refused.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from aoizora.errors import MeasureError, ValidationError
from aoizora.studies.validation.format import (
    CollectiveCase,
    Measurement,
    StepCase,
    format_measurements,
    read_measurements,
)
from aoizora.studies.validation.origin import ran_on_cpu

__all__ = ["RowStore", "case_key"]


def case_key(slice_name: str, case: StepCase | CollectiveCase) -> tuple[object, ...]:
    """What makes two rows measure the same thing: the slice and the case (a step's
    configuration; a collective's kind, groups, size and algorithm)."""
    if isinstance(case, StepCase):
        return ("step", slice_name, case.configuration)
    return ("collective", slice_name, case)


def _row_key(row: Measurement) -> tuple[object, ...]:
    case = row.step if row.step is not None else row.collective
    assert case is not None  # every parsed row has one
    return case_key(row.slice_label, case)


@dataclass
class RowStore:
    """The rows of the file at ``path`` (what it held, then what this run added)."""

    path: Path
    writes: bool = True
    rows: list[Measurement] = field(default_factory=list)

    @classmethod
    def open(cls, path: str | Path, *, cpu: bool, restart: bool, writes: bool = True) -> RowStore:
        """The rows already at ``path`` (none with ``restart`` or no file); raises
        :class:`MeasureError` when they ran on the other backend (CPU vs TPU)."""
        p = Path(path)
        store = cls(p, writes=writes)
        if restart or not p.exists():
            return store
        try:
            rows = read_measurements(p)
        except ValidationError as exc:  # a malformed file: say what to do with it
            raise MeasureError(
                f"--out {str(p)!r} exists but is not a measurement file this run can resume "
                f"({exc}); move it away or pass --restart to start it afresh"
            ) from None
        other = [r.row_id for r in rows if ran_on_cpu(r) != cpu]
        if other:
            ran = "on TPUs" if cpu else "on the host CPU (a dry run)"
            this = "dry run" if cpu else "TPU run"
            raise MeasureError(
                f"--out {str(p)!r} holds rows that ran {ran} (e.g. {other[0]!r}); write this "
                f"{this} to another file, or pass --restart to replace it"
            )
        store.rows = list(rows)
        return store

    def holds(self, slice_name: str, case: StepCase | CollectiveCase) -> Measurement | None:
        """The row of this file that already measured ``case`` on ``slice_name``, if any."""
        key = case_key(slice_name, case)
        return next((r for r in self.rows if _row_key(r) == key), None)

    def add(self, row: Measurement) -> None:
        """Keep ``row`` and rewrite the file atomically (this process writes)."""
        if any(r.row_id == row.row_id for r in self.rows):
            raise MeasureError(
                f"row id {row.row_id!r} is already in {str(self.path)!r} for another case; "
                "move the file away or pass --restart"
            )
        self.rows.append(row)
        self.write()

    def write(self) -> None:
        if not self.writes:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(format_measurements(self.rows), encoding="utf-8")
        os.replace(tmp, self.path)
