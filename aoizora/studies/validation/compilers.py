"""Which compiler a figure is for: the libtpu a row ran against the one predicting it.

A step row's ``software`` cell names the libtpu that compiled the program the chip ran
(``"jax 0.10.2, jaxlib 0.10.2, libtpu 0.0.42.1, ..."``); ``aoizora validate`` compiles every
step again with the libtpu jax loads here (the pin, or ``--libtpu PATH``). Two releases may
build different programs from one step -- other fusions, emitters and buffer assignments --
so a prediction is for the program its compiler builds. :func:`compiler_note` says when the
rows ran another libtpu than the one predicting them; :func:`side_by_side` joins two
validations of one file, one per compiler, row by row.

    >>> libtpu_of("jax 0.10.2, jaxlib 0.10.2, libtpu 0.0.42.1, aoizora 0.1.0 (no commit)")
    '0.0.42.1'
    >>> compiler_note({"r1": "0.0.42.1", "r2": "0.0.42.1"}, "0.0.52")[:81]
    '2 rows ran libtpu 0.0.42.1 (r1, r2); these predictions compile with libtpu 0.0.52'
    >>> compiler_note({"r1": "0.0.52"}, "0.0.52") is None
    True
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["SideBySide", "compiler_note", "format_side_by_side", "libtpu_of", "side_by_side"]

_LIBTPU = re.compile(r"\blibtpu ([0-9][^\s,;)]*)")


def libtpu_of(software: str) -> str | None:
    """The libtpu version a row's ``software`` cell names (None when it names none)."""
    match = _LIBTPU.search(software)
    return match.group(1) if match else None


def compiler_note(ran: Mapping[str, str | None], predicting: str | None) -> str | None:
    """One line when rows (``ran``: row id -> the libtpu it ran) ran another libtpu than
    ``predicting`` (the one compiling the predictions here), naming the rows and how to
    compile with theirs; None when every row ran the predicting one or names none."""
    other: dict[str, list[str]] = {}
    for row_id, version in ran.items():
        if version is not None and version != predicting:
            other.setdefault(version, []).append(row_id)
    if not other:
        return None
    parts = []
    for version, ids in sorted(other.items()):
        shown = ", ".join(ids[:3]) + (", ..." if len(ids) > 3 else "")
        parts.append(f"{len(ids)} rows ran libtpu {version} ({shown})")
    return (
        f"{'; '.join(parts)}; these predictions compile with libtpu {predicting or 'none'}: "
        "the programs may differ; --also-libtpu PATH predicts them with another libtpu too "
        "(the runtime's own: its wheel's libtpu/libtpu.so)"
    )


@dataclass(frozen=True)
class SideBySide:
    """One row predicted by two compilers: its measurement and both predictions."""

    row_id: str
    measured_s: float
    predicted_s: float
    other_predicted_s: float | None

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "row_id": self.row_id,
            "measured_s": self.measured_s,
            "predicted_s": self.predicted_s,
            "other_predicted_s": self.other_predicted_s,
        }


def _rows(report: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {r["row_id"]: r for g in report.get("groups", ()) for r in g.get("rows", ())}


def side_by_side(report: Mapping[str, Any], other: Mapping[str, Any]) -> list[SideBySide]:
    """Every row of ``report`` (``aoizora validate --json``) beside ``other``'s prediction
    of it (a validation of the same file with another libtpu; None where it has none)."""
    theirs = _rows(other)
    out = []
    for row_id, r in _rows(report).items():
        o = theirs.get(row_id)
        out.append(SideBySide(row_id, float(r["measured_s"]), float(r["predicted_s"]),
                              None if o is None else float(o["predicted_s"])))  # fmt: skip
    return out


def format_side_by_side(rows: Sequence[SideBySide], here: str, other: str) -> str:
    """The two predictions of every row, with their errors, as a table.

    >>> print(format_side_by_side([SideBySide("m-1", 2.0, 1.9, 2.02)], "0.0.52", "0.0.42.1"))
    row                           measured_s  libtpu 0.0.52  error%  libtpu 0.0.42.1  error%
    m-1                                2.000          1.900    -5.0            2.020    +1.0
    """
    head = f"libtpu {here}"
    tail = f"libtpu {other}"
    lines = [f"{'row':<28} {'measured_s':>11} {head:>14} {'error%':>7} {tail:>16} {'error%':>7}"]
    for r in rows:
        err = 100.0 * (r.predicted_s / r.measured_s - 1.0)
        if r.other_predicted_s is None:
            second = f"{'-':>16} {'-':>7}"
        else:
            other_err = 100.0 * (r.other_predicted_s / r.measured_s - 1.0)
            second = f"{r.other_predicted_s:>16.3f} {other_err:>+7.1f}"
        lines.append(f"{r.row_id:<28} {r.measured_s:>11.3f} {r.predicted_s:>14.3f} "
                     f"{err:>+7.1f} {second}")  # fmt: skip
    return "\n".join(lines)
