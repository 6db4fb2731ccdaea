"""The measurement file: its rows, reading, writing and checking them.

A measurement file is one CSV with a header row and two kinds of row (column
``kind``), documented in ``docs/validation.md``:

``collective``
    a collective microbenchmark: collective kind, the replica groups on the
    slice (``groups``, see :func:`parse_group_spec`), the collective's full
    buffer ``size_bytes``, optional algorithm.
``step``
    one denoising step of a model: model, clip, slice, mesh shape and axes,
    sharding rules id, attention kind and kernel (optional), device order (libtpu
    device ids in mesh-flat order), and how a published figure became seconds per
    step (:mod:`.format_step`).

Both kinds carry the measured latency ``measured_s`` with its spread, the
hardware and software it ran on (``software_date``: when that software was
current) and its public ``source``; ``status`` marks a row ``history`` (superseded
by a later measurement of the same configuration) or ``excluded`` (the source
itself flags it; ``notes`` says why) -- neither is gated. Lines starting with
``#`` are comments. Errors name the file and line.

Example
-------
>>> text = '''row_id,kind,slice,collective,groups,size_bytes,measured_s,spread_kind,source
... a,collective,v5e:2x2,all-gather,dims:0,1000000,2.0e-05,unreported,https://example.org
... '''
>>> (row,) = parse_measurements(text, name="doc")
>>> row.workload, row.slice_label, row.collective.size_bytes
('all-gather dims:0', 'v5e:2x2', 1000000)
>>> parse_measurements(format_measurements([row])) == (row,)
True
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aoizora.errors import ValidationError
from aoizora.studies.validation.cells import cell_error as _err
from aoizora.studies.validation.cells import parse_float as _float
from aoizora.studies.validation.format_step import STEP_COLUMNS, StepCase, step_case, step_cells
from sim.errors import SimError
from sim.topology import Slice, load_slice, make_slice

__all__ = [
    "COLLECTIVE_KINDS",
    "COLUMNS",
    "ROW_KINDS",
    "SPREAD_KINDS",
    "STATUSES",
    "CollectiveCase",
    "Coord",
    "Measurement",
    "StepCase",
    "format_measurements",
    "parse_group_spec",
    "parse_measurements",
    "read_measurements",
    "row_slice",
]

ROW_KINDS: tuple[str, ...] = ("collective", "step", "vae")
# HLO spelling of the collectives (docs/facts.md, Compiled-HLO collectives).
COLLECTIVE_KINDS: tuple[str, ...] = (
    "all-gather",
    "all-reduce",
    "reduce-scatter",
    "all-to-all",
    "collective-permute",
)
# How the spread column was obtained: a standard deviation over repeats, the
# half-width of a min..max range, the uncertainty of reading a published
# figure, or not reported by the source (then spread_s stays empty).
SPREAD_KINDS: tuple[str, ...] = ("std", "range", "reading", "unreported")
# Rows the gate leaves out: superseded by a later measurement of the same
# configuration, or flagged by the source itself (empty status: gated).
STATUSES: tuple[str, ...] = ("history", "excluded")

# Column order of the file format; a file must have a header naming a subset
# that includes the required ones (unknown columns are an error, to catch typos).
COLUMNS: tuple[str, ...] = (
    "row_id",
    "kind",
    "slice",
    "wraparound",
    "collective",
    "groups",
    "size_bytes",
    "algorithm",
    "model",
    "clip",
    "mesh_shape",
    "mesh_axes",
    "rules_id",
    "attention",
    "device_order",
    "attention_kernel",
    "phase",
    "steps",
    "figure_s",
    "other_s",
    "vae_decode_chunk",
    "workload",
    "splash_blocks",
    "scoped_vmem_kib",
    "measured_s",
    "spread_s",
    "spread_kind",
    "peak_hbm_bytes",
    "hardware",
    "software",
    "software_date",
    "status",
    "source",
    "notes",
)
_REQUIRED = ("row_id", "kind", "slice", "measured_s", "spread_kind", "source")
_COLLECTIVE_ONLY = ("collective", "groups", "size_bytes", "algorithm")
_ROW_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_DATE_RE = re.compile(r"^20[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$")

Coord = tuple[int, ...]


@dataclass(frozen=True)
class CollectiveCase:
    """What a ``collective`` row measured.

    ``size_bytes`` is the collective's *full* per-device buffer: the output of
    an all-gather, the input of a reduce-scatter, the (equal) input and output
    of an all-reduce or all-to-all, the payload of a collective-permute.
    ``groups`` is a group spec (see :func:`parse_group_spec`).
    """

    collective: str
    groups: str
    size_bytes: int
    algorithm: str | None = None


@dataclass(frozen=True)
class Measurement:
    """One row of a measurement file."""

    row_id: str
    kind: str
    slice_name: str
    measured_s: float
    spread_kind: str
    source: str
    spread_s: float | None = None
    wraparound: tuple[bool, ...] | None = None
    hardware: str = ""
    software: str = ""
    notes: str = ""
    collective: CollectiveCase | None = None
    step: StepCase | None = None
    line: int = field(default=0, compare=False)
    software_date: str = ""
    status: str = ""
    # The most device memory the step held at once, on the busiest device (aoizora
    # measure: the runtime's bytes in use plus the program's reserved temporaries).
    peak_hbm_bytes: int | None = None

    @property
    def gated(self) -> bool:
        """Whether the gate holds this row (neither history nor excluded)."""
        return not self.status

    @property
    def workload(self) -> str:
        """What the row ran, independent of the slice (rows sharing it are ranked together)."""
        if self.collective is not None:
            c = self.collective
            algo = f" [{c.algorithm}]" if c.algorithm else ""
            return f"{c.collective} {c.groups}{algo}"
        assert self.step is not None  # guaranteed by parsing
        return f"{self.step.model} {self.step.clip}"

    @property
    def slice_label(self) -> str:
        """The slice name, plus the wrap-around override when the row gives one."""
        if self.wraparound is None:
            return self.slice_name
        flags = "".join("T" if w else "F" for w in self.wraparound)
        return f"{self.slice_name}[wrap={flags}]"

    @property
    def group_key(self) -> tuple[str, str, str]:
        """(kind, workload, slice label): rows with equal keys form one report group."""
        return (self.kind, self.workload, self.slice_label)


# --------------------------------------------------------------------------- parsing


def _wrap(text: str, *, name: str, line: int) -> tuple[bool, ...] | None:
    if not text:
        return None
    flags: list[bool] = []
    for token in text.split():
        low = token.lower()
        if low in ("1", "true", "t", "yes"):
            flags.append(True)
        elif low in ("0", "false", "f", "no"):
            flags.append(False)
        else:
            raise _err(
                name,
                line,
                f"wraparound={text!r}: write one true/false per slice dimension separated by "
                "spaces, e.g. 'false true', or leave it empty for the generation's default",
            )
    return tuple(flags)


def parse_group_spec(
    spec: str, *, shape: Sequence[int], devices_per_chip: int = 1
) -> tuple[tuple[Coord, ...], ...]:
    """Replica groups, as chip coordinates, from a group spec on a slice of ``shape``.

    Four forms:

    ``all``
        one group of every chip, in physical-id order (x fastest);
    ``dims:D[+D...]``
        one group per fixed value of the other dimensions, made of the chips
        varying along dimensions ``D`` (0 = x, 1 = y, 2 = z), x fastest;
    ``ids:a b c;d e f``
        explicit groups of libtpu physical ids (``id = x + X*y (+ X*Y*z)``),
        each group in the order written (the ring order for ring algorithms).
    ``devices:a b c;d e f``
        explicit groups of libtpu *device* ids, for chips with several devices
        (tpu7x: ``id = devices_per_chip * chip id + core``); two devices of one
        chip share its coordinates

    >>> parse_group_spec("dims:0", shape=(2, 2))
    (((0, 0), (1, 0)), ((0, 1), (1, 1)))
    >>> parse_group_spec("dims:1", shape=(2, 2))
    (((0, 0), (0, 1)), ((1, 0), (1, 1)))
    >>> parse_group_spec("ids:0 1 3 2", shape=(2, 2))
    (((0, 0), (1, 0), (1, 1), (0, 1)),)
    >>> parse_group_spec("devices:0 2;1 3", shape=(2, 1, 1), devices_per_chip=2)
    (((0, 0, 0), (1, 0, 0)), ((0, 0, 0), (1, 0, 0)))
    >>> len(parse_group_spec("all", shape=(4, 4))[0])
    16
    """
    shp = tuple(int(n) for n in shape)
    total = math.prod(shp)

    def coord(pid: int) -> Coord:
        out = []
        rest = pid
        for n in shp:
            out.append(rest % n)
            rest //= n
        return tuple(out)

    text = spec.strip()
    example = "e.g. 'all', 'dims:1', 'dims:0+1', 'ids:0 1 2 3;4 5 6 7' or 'devices:0 2;1 3'"
    if text == "all":
        return (tuple(coord(p) for p in range(total)),)
    if text.startswith("dims:"):
        try:
            dims = tuple(int(d) for d in text[5:].split("+"))
        except ValueError:
            raise ValidationError(
                f"group spec {spec!r}: dims must be integers, {example}"
            ) from None
        if not dims or len(set(dims)) != len(dims) or any(not 0 <= d < len(shp) for d in dims):
            raise ValidationError(
                f"group spec {spec!r}: dims must be distinct dimensions 0..{len(shp) - 1} of a "
                f"slice of shape {list(shp)}, {example}"
            )
        groups: dict[Coord, list[Coord]] = {}
        for pid in range(total):
            c = coord(pid)
            fixed = tuple(v for d, v in enumerate(c) if d not in dims)
            groups.setdefault(fixed, []).append(c)
        return tuple(tuple(groups[k]) for k in sorted(groups))
    if text.startswith(("ids:", "devices:")):
        per = devices_per_chip if text.startswith("devices:") else 1
        groups_ids = _id_groups(spec, text[text.index(":") + 1 :], total * per, example)
        return tuple(tuple(coord(i // per) for i in ids) for ids in groups_ids)
    raise ValidationError(f"group spec {spec!r} is not understood, {example}")


def _id_groups(spec: str, body: str, num_ids: int, example: str) -> list[list[int]]:
    """The disjoint groups of ids ``0..num_ids-1`` written ``a b c;d e f``."""
    out: list[list[int]] = []
    seen: set[int] = set()
    for part in body.split(";"):
        try:
            ids = [int(t) for t in part.split()]
        except ValueError:
            raise ValidationError(f"group spec {spec!r}: ids must be integers, {example}") from None
        if len(ids) < 2:
            raise ValidationError(
                f"group spec {spec!r}: every group needs at least 2 members, {example}"
            )
        for i in ids:
            if not 0 <= i < num_ids or i in seen:
                raise ValidationError(
                    f"group spec {spec!r}: id {i} is off the slice (0..{num_ids - 1}) "
                    f"or repeated; groups must be disjoint, {example}"
                )
            seen.add(i)
        out.append(ids)
    return out


def _slice_shape(slice_name: str, *, name: str, line: int) -> tuple[tuple[int, ...], int]:
    """(chip grid, devices per chip) of ``slice_name``.

    Resolved by the simulator (the one authority on slice names), so a typo fails
    here with the row's line number.
    """
    try:
        slice_ = load_slice(slice_name)
    except SimError as exc:
        raise _err(name, line, f"slice={slice_name!r}: {exc}") from None
    return slice_.shape, slice_.chip.devices_per_chip


def _spread(cell: Mapping[str, str], *, name: str, line: int) -> tuple[str, float | None]:
    spread_kind = cell["spread_kind"]
    if spread_kind not in SPREAD_KINDS:
        raise _err(name, line, f"spread_kind={spread_kind!r} must be one of {list(SPREAD_KINDS)}")
    if spread_kind == "unreported":
        if cell["spread_s"]:
            raise _err(name, line, "spread_s must be empty when spread_kind is 'unreported'")
        return spread_kind, None
    if not cell["spread_s"]:
        raise _err(
            name,
            line,
            f"spread_kind={spread_kind!r} needs spread_s (seconds), or set spread_kind to "
            "'unreported'",
        )
    return spread_kind, _float(
        cell["spread_s"], column="spread_s", name=name, line=line, positive=False
    )


def _collective_case(
    cell: Mapping[str, str],
    shape: tuple[int, ...],
    *,
    devices_per_chip: int,
    name: str,
    line: int,
) -> CollectiveCase:
    for key in ("collective", "groups", "size_bytes"):
        if not cell[key]:
            raise _err(name, line, f"a 'collective' row needs {key!r}")
    if cell["collective"] not in COLLECTIVE_KINDS:
        raise _err(
            name,
            line,
            f"collective={cell['collective']!r} must be one of {list(COLLECTIVE_KINDS)}",
        )
    try:
        size = int(cell["size_bytes"])
    except ValueError:
        size = 0
    if size <= 0:
        raise _err(name, line, f"size_bytes={cell['size_bytes']!r} must be a positive integer")
    try:
        parse_group_spec(cell["groups"], shape=shape, devices_per_chip=devices_per_chip)
    except ValidationError as exc:
        raise _err(name, line, str(exc)) from None
    return CollectiveCase(
        collective=cell["collective"],
        groups=cell["groups"],
        size_bytes=size,
        algorithm=cell["algorithm"] or None,
    )


def _parse_row(raw: Mapping[str, str], *, name: str, line: int) -> Measurement:
    cell = {k: (raw.get(k) or "").strip() for k in COLUMNS}
    for key in _REQUIRED:
        if not cell[key]:
            raise _err(name, line, f"column {key!r} is empty; every row needs {list(_REQUIRED)}")
    row_id = cell["row_id"]
    if not _ROW_ID_RE.match(row_id):
        raise _err(
            name, line, f"row_id={row_id!r} must be letters, digits, '_', '.', '-', e.g. 'sb-ag-1'"
        )
    kind = cell["kind"]
    if kind not in ROW_KINDS:
        raise _err(name, line, f"kind={kind!r} must be one of {list(ROW_KINDS)}")
    measured = _float(cell["measured_s"], column="measured_s", name=name, line=line, positive=True)
    spread_kind, spread = _spread(cell, name=name, line=line)
    shape, per_chip = _slice_shape(cell["slice"], name=name, line=line)
    wrap = _wrap(cell["wraparound"], name=name, line=line)
    if wrap is not None and len(wrap) != len(shape):
        raise _err(
            name,
            line,
            f"wraparound={cell['wraparound']!r} has {len(wrap)} flags but slice "
            f"{cell['slice']} has {len(shape)} dimensions",
        )
    other = STEP_COLUMNS if kind == "collective" else _COLLECTIVE_ONLY
    stray = [k for k in other if cell[k]]
    if stray:
        raise _err(name, line, f"a {kind!r} row must leave {stray} empty")
    date, status = _date_and_status(cell, name=name, line=line)
    is_collective = kind == "collective"
    devices = math.prod(shape) * per_chip
    return Measurement(
        row_id=row_id,
        kind=kind,
        slice_name=cell["slice"],
        measured_s=measured,
        spread_kind=spread_kind,
        source=cell["source"],
        spread_s=spread,
        wraparound=wrap,
        hardware=cell["hardware"],
        software=cell["software"],
        notes=cell["notes"],
        collective=(
            _collective_case(cell, shape, devices_per_chip=per_chip, name=name, line=line)
            if is_collective
            else None
        ),
        step=None
        if is_collective
        else step_case(cell, num_devices=devices, name=name, line=line, kind=kind),
        line=line,
        software_date=date,
        status=status,
        peak_hbm_bytes=_peak(cell["peak_hbm_bytes"], kind=kind, name=name, line=line),
    )


def _peak(text: str, *, kind: str, name: str, line: int) -> int | None:
    """``peak_hbm_bytes``: empty, or a whole number of bytes > 0 on a step or vae row."""
    if not text:
        return None
    if kind == "collective" or not text.isdigit() or int(text) <= 0:
        raise _err(
            name, line, f"peak_hbm_bytes={text!r} must be a whole number of bytes > 0 on a "
            "step or vae row (empty: not measured), e.g. 3264000000",
        )  # fmt: skip
    return int(text)


def _date_and_status(cell: Mapping[str, str], *, name: str, line: int) -> tuple[str, str]:
    date, status = cell["software_date"], cell["status"]
    if date and not _DATE_RE.match(date):
        raise _err(name, line, f"software_date={date!r} must be a date YYYY-MM-DD, e.g. 2026-04-22")
    if status and status not in STATUSES:
        raise _err(
            name, line, f"status={status!r} must be empty (gated) or one of {list(STATUSES)}"
        )
    return date, status


def _check_unique_configurations(rows: Sequence[Measurement], name: str) -> None:
    """Two gated step rows of one configuration and slice: the older one is history."""
    seen: dict[tuple[object, ...], Measurement] = {}
    for row in rows:
        if row.step is None or not row.gated:
            continue
        key = (row.slice_label, row.step.configuration)
        first = seen.setdefault(key, row)
        if first is not row:
            raise _err(
                name,
                row.line,
                f"row {row.row_id!r} measures the configuration of row {first.row_id!r} "
                f"(line {first.line}) again; keep the latest software's row gated and set "
                "status=history on the other",
            )


def parse_measurements(text: str, *, name: str = "<text>") -> tuple[Measurement, ...]:
    """Parse measurement-file text; raises :class:`ValidationError` naming the line."""
    # Drop comment lines but keep line numbers right for error messages.
    lines = text.splitlines()
    kept = [
        (i + 1, ln) for i, ln in enumerate(lines) if ln.strip() and not ln.lstrip().startswith("#")
    ]
    if not kept:
        raise ValidationError(f"{name}: no header row; the first line must name the columns")
    header_line, header = kept[0]
    columns = next(csv.reader([header]))
    columns = [c.strip() for c in columns]
    unknown = [c for c in columns if c not in COLUMNS]
    missing = [c for c in _REQUIRED if c not in columns]
    if unknown or missing or len(set(columns)) != len(columns):
        raise ValidationError(
            f"{name}:{header_line}: bad header (unknown {unknown}, missing {missing}, or a "
            f"repeated column); valid columns are {list(COLUMNS)}"
        )
    rows: list[Measurement] = []
    seen: dict[str, int] = {}
    for number, ln in kept[1:]:
        values = next(csv.reader([ln]))
        if len(values) != len(columns):
            raise _err(
                name,
                number,
                f"{len(values)} cells but the header has {len(columns)} columns (quote cells "
                "that contain commas)",
            )
        row = _parse_row(dict(zip(columns, values, strict=True)), name=name, line=number)
        if row.row_id in seen:
            raise _err(name, number, f"row_id {row.row_id!r} repeats line {seen[row.row_id]}")
        seen[row.row_id] = number
        rows.append(row)
    if not rows:
        raise ValidationError(f"{name}: the file has a header but no measurement rows")
    _check_unique_configurations(rows, name)
    return tuple(rows)


def read_measurements(path: str | Path) -> tuple[Measurement, ...]:
    """Read a measurement file (see :func:`parse_measurements`)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValidationError(f"cannot read measurement file {str(p)!r}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        line = exc.object[: exc.start].count(b"\n") + 1
        raise ValidationError(f"{p}:{line}: not UTF-8 text (byte {exc.start})") from None
    return parse_measurements(text, name=str(p))


def _fmt_float(value: float) -> str:
    return repr(float(value))


def format_measurements(rows: Iterable[Measurement]) -> str:
    """CSV text (all columns; ``scoped_vmem_kib`` only when a row sets it, so files without
    one keep their bytes) that :func:`parse_measurements` reads back to equal rows."""
    rows = list(rows)
    limits = any(r.step is not None and r.step.scoped_vmem_kib is not None for r in rows)
    columns = [c for c in COLUMNS if limits or c != "scoped_vmem_kib"]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for r in rows:
        c = r.collective
        cells = {
            "row_id": r.row_id,
            "kind": r.kind,
            "slice": r.slice_name,
            "wraparound": " ".join("true" if w else "false" for w in r.wraparound)
            if r.wraparound is not None
            else "",
            "collective": c.collective if c else "",
            "groups": c.groups if c else "",
            "size_bytes": str(c.size_bytes) if c else "",
            "algorithm": (c.algorithm or "") if c else "",
            **step_cells(r.step),
            "measured_s": _fmt_float(r.measured_s),
            "spread_s": "" if r.spread_s is None else _fmt_float(r.spread_s),
            "spread_kind": r.spread_kind,
            "peak_hbm_bytes": "" if r.peak_hbm_bytes is None else str(r.peak_hbm_bytes),
            "hardware": r.hardware,
            "software": r.software,
            "software_date": r.software_date,
            "status": r.status,
            "source": r.source,
            "notes": r.notes,
        }
        writer.writerow([cells[k] for k in columns])
    return buf.getvalue()


# --------------------------------------------------------------------------- the slice


def row_slice(
    row: Measurement,
    *,
    link_bandwidth_bytes_per_s: float | None = None,
    hop_latency_s: float | None = None,
) -> Slice:
    """The simulator's slice for ``row``, optionally with other link numbers (calibration).

    >>> r = parse_measurements(
    ...     "row_id,kind,slice,collective,groups,size_bytes,measured_s,spread_kind,source\\n"
    ...     "a,collective,v5e:2x4,all-gather,dims:1,8,1e-6,unreported,x\\n")[0]
    >>> s = row_slice(r, link_bandwidth_bytes_per_s=1e9)
    >>> s.name, s.link_bandwidth_bytes_per_s, s.hop_latency_s
    ('v5e:2x4', 1000000000.0, 1e-06)
    """
    base = load_slice(row.slice_name, wraparound=row.wraparound)
    if link_bandwidth_bytes_per_s is None and hop_latency_s is None:
        return base
    return make_slice(
        base.shape,
        wraparound=list(base.wraparound),
        link_bandwidth_bytes_per_s=link_bandwidth_bytes_per_s,
        hop_latency_s=hop_latency_s,
        chip=base.chip,
        name=base.name,
    )
