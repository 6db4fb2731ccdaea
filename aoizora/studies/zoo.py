"""The program zoo's chip rows: read, turned into measurement rows, split, and reported.

``validation/v5e/zoo/rows.jsonl`` holds one JSON object a program timed on a TPU v5e chip
(``validation/v5e/zoo/measure.py``): its id, family, configuration, the timed calls
(``samples_s``), the profile's device time (``device_s``) and the compiler's memory analysis.
:func:`measurement_rows` writes them in the measurement format ``aoizora validate`` reads
(docs/validation.md), each row's ``workload`` the zoo's factory (``aoizora.zoo:p017``);
:func:`halves` splits them once by :data:`aoizora.zoo.SPLIT_SEED` into the fit half and the
held-out half, and :func:`family_report` gives the error of each family in each half.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aoizora.hlo.layouts import lane_transpose_elements
from aoizora.hlo.profile import DeviceProfile, load_profile, read_text_file
from aoizora.hlo.text import HloModule, parse_module
from aoizora.studies.explain import (
    Explanation,
    explain,
    instructions_by_name,
    op_prices,
    op_works,
)
from aoizora.zoo import split
from sim.chips import Chip
from sim.compute import compute_model_of

__all__ = ["FamilyError", "ZooRow", "explain_row", "family_report", "fit_compiler_cycle_s",
           "fit_lane_transpose_s", "fit_narrow_head_factor", "halves", "measurement_rows",
           "ran_program", "read_rows"]  # fmt: skip

# A lane transpose is fitted on copies of at least this long an execution: below it the
# kernel's fixed cost, not the transpose unit, is most of what was measured.
_TRANSPOSE_FIT_FROM_S = 2e-6

_HARDWARE = "TPU v5 lite: 1 devices on 1 host, slice v5e:1x1"
_SOFTWARE = "jax 0.10.2, jaxlib 0.10.2, libtpu 0.0.42.1"
_COLUMNS = ("row_id,kind,slice,wraparound,collective,groups,size_bytes,algorithm,model,clip,"
            "mesh_shape,mesh_axes,rules_id,attention,device_order,attention_kernel,phase,steps,"
            "figure_s,other_s,vae_decode_chunk,workload,splash_blocks,scoped_vmem_kib,measured_s,"
            "spread_s,spread_kind,peak_hbm_bytes,hardware,software,software_date,status,source,"
            "notes").split(",")  # fmt: skip


@dataclass(frozen=True)
class ZooRow:
    """One zoo program as the chip ran it: its timed calls and its profile's device time."""

    id: str
    family: str
    name: str
    params: Mapping[str, Any]
    samples_s: tuple[float, ...]
    device_s: float
    peak_hbm_bytes: int | None

    @property
    def measured_s(self) -> float:
        """The median of the timed calls: a call the host delayed (a compile running beside
        the first programs of a chip call) moves it least."""
        return statistics.median(self.samples_s)


def read_rows(path: str | Path) -> list[ZooRow]:
    """The rows of a ``rows.jsonl``, by id; a program that failed on the chip is left out."""
    rows = []
    for line in Path(path).read_text().splitlines():
        r = json.loads(line)
        if "error" in r:
            continue
        rows.append(ZooRow(r["id"], r["family"], r["name"], r["params"], tuple(r["samples_s"]),
                           r["device_s"], r.get("peak_hbm_bytes")))  # fmt: skip
    return sorted(rows, key=lambda r: r.id)


def halves(rows: Sequence[ZooRow]) -> tuple[list[ZooRow], list[ZooRow]]:
    """``rows`` split once by :func:`aoizora.zoo.split`: (fit half, held-out half)."""
    fit, _ = split([r.id for r in rows])
    keep = set(fit)
    return [r for r in rows if r.id in keep], [r for r in rows if r.id not in keep]


def measurement_rows(rows: Iterable[ZooRow], *, date: str = "2026-12-07") -> str:
    """``rows`` as a measurement CSV (docs/validation.md) for ``aoizora validate``."""
    out = io.StringIO()
    out.write("# The program zoo (aoizora.zoo) timed on one TPU v5e chip: validation/README.md, "
              "'The program zoo'.\n")  # fmt: skip
    writer = csv.DictWriter(out, _COLUMNS, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        std = statistics.stdev(r.samples_s) if len(r.samples_s) > 1 else 0.0
        writer.writerow({
            "row_id": f"z-{r.id}", "kind": "step", "slice": "v5e:1x1", "model": r.name,
            "mesh_shape": "1", "mesh_axes": "dp", "rules_id": "dp", "attention": "none",
            "device_order": "0", "workload": f"aoizora.zoo:{r.id}",
            "measured_s": repr(r.measured_s), "spread_s": repr(std), "spread_kind": "std",
            "peak_hbm_bytes": "" if r.peak_hbm_bytes is None else str(r.peak_hbm_bytes),
            "hardware": _HARDWARE, "software": _SOFTWARE, "software_date": date,
            "source": "validation/v5e/zoo/measure.py, run " + date,
            "notes": f"zoo {r.family} program {r.id}; {len(r.samples_s)} timed calls after 2 "
                     f"warm-up, median; device ops {r.device_s:.6g} s by its profile",
        })  # fmt: skip
    return out.getvalue()


@dataclass(frozen=True)
class FamilyError:
    """The errors of one family (or ``"all"``) in one half: MAPE and the worst, signed."""

    family: str
    count: int
    mape: float
    worst: float

    @staticmethod
    def of(family: str, errors: Sequence[float]) -> FamilyError:
        worst = max(errors, key=abs) if errors else 0.0
        mape = statistics.fmean(abs(e) for e in errors) if errors else 0.0
        return FamilyError(family, len(errors), mape, worst)


def family_report(rows: Sequence[ZooRow], predicted_s: Mapping[str, float]) -> list[FamilyError]:
    """Per family, then ``"all"``: the relative errors of ``predicted_s`` (by id) against each
    row's measured time, over the rows that have a prediction."""
    by_family: dict[str, list[float]] = {}
    for r in rows:
        if r.id in predicted_s:
            e = predicted_s[r.id] / r.measured_s - 1.0
            by_family.setdefault(r.family, []).append(e)
    report = [FamilyError.of(f, by_family[f]) for f in sorted(by_family)]
    return [*report, FamilyError.of("all", [e for es in by_family.values() for e in es])]


def _with_narrow_factor(chip: Chip, factor: float) -> Chip:
    params = chip.compute
    kernel = params.splash_kernel
    if kernel is None:
        raise ValueError(f"{chip.generation} has no [compute.splash_kernel] to fit")
    kernel = dataclasses.replace(kernel, narrow_head_factor=factor)
    return dataclasses.replace(chip, compute=dataclasses.replace(params, splash_kernel=kernel))


@functools.lru_cache(maxsize=1024)
def ran_program(programs: Path, program_id: str) -> tuple[HloModule, DeviceProfile]:
    """A zoo program as it ran: its HLO (``programs/<id>.hlo.txt.gz``) and its profile
    (``programs/<id>.ops.json.gz``), parsed once (the report, the fits and the tests read
    each many times; about 0.8 MB a program). Neither is changed by a reader."""
    module = parse_module(read_text_file(programs / f"{program_id}.hlo.txt.gz"))
    return module, load_profile(programs / f"{program_id}.ops.json.gz", module=module.name)


def explain_row(row: ZooRow, programs: Path, chip: Chip) -> Explanation:
    """``row``'s program as it ran (:func:`ran_program`) priced op by op on ``chip`` beside
    its profile."""
    module, profile = ran_program(programs, row.id)
    return explain(profile, module, op_prices(module, chip))


def fit_narrow_head_factor(fit: Sequence[ZooRow], programs: Path, chip: Chip) -> float:
    """The splash body's time over heads narrower than 128 lanes against the same body at
    128 (``SplashKernel.narrow_head_factor``): the median, over the ``fit`` rows' splash
    DiTs with such heads, of their attention kernels' measured time over what the kernel
    model prices with the factor at 1. Reads only ``fit``'s rows."""
    base = _with_narrow_factor(chip, 1.0)
    ratios = []
    for row in fit:
        if row.params.get("attention") != "splash" or row.params["head_dim"] >= 128:
            continue
        e = explain_row(row, programs, base)
        ops = [r for r in e.rows if r.category == "attention"]
        ratios.append(sum(r.measured_s for r in ops) / sum(r.predicted_s or 0.0 for r in ops))
    if not ratios:
        raise ValueError("no splash DiT with a head under 128 lanes in the fit rows")
    return round(statistics.median(ratios), 3)


def fit_lane_transpose_s(fit: Iterable[tuple[ZooRow, Path]]) -> float:
    """Seconds a padded element of a relayout in VMEM that moves another dimension onto the
    lanes takes (``ComputeParams.lane_transpose_s_per_element``): the median, over every
    such copy of the ``fit`` rows (each with its draw's ``programs`` folder) that ran at
    least 2 us an execution, of its time an execution over its elements
    (:func:`aoizora.hlo.layouts.lane_transpose_elements`). Reads only ``fit``'s rows.

    Measured time over elements needs no price, so the fit does not depend on the model it
    goes into."""
    per_element = []
    for row, programs in fit:
        module, profile = ran_program(programs, row.id)
        where = instructions_by_name(module)
        for op in profile.ops:
            found = where.get(op.name)
            elements = lane_transpose_elements(*found) if found is not None else 0
            each_s = op.total_s / max(op.events, 1)
            if elements and each_s >= _TRANSPOSE_FIT_FROM_S:
                per_element.append(each_s / elements)
    if not per_element:
        raise ValueError("no lane-moving relayout in VMEM of 2 us or more in the fit rows")
    return float(f"{statistics.median(per_element):.4g}")


def fit_compiler_cycle_s(fit: Iterable[tuple[ZooRow, Path]], chip: Chip) -> float:
    """Seconds per cycle of libtpu's estimate for a kernel whose convolution has a window of
    its own (``ComputeParams.compiler_cycle_s``): such a kernel is priced at the geometric mean
    ``sqrt(ours x cycles x s)`` of our bound and the compiler's estimate, plus its fixed
    cost, and ``s`` is the closed form that prices every such kernel of the ``fit`` rows
    (each with its draw's ``programs`` folder) at their measured total: ``sqrt(s) =
    sum(measured - count x fixed) / sum(count x sqrt(ours x cycles))``, ours with ``chip``'s
    other parameters. Reads only ``fit``'s rows."""
    model = compute_model_of(chip)
    model = dataclasses.replace(
        model, params=dataclasses.replace(model.params, compiler_cycle_s=0.0)
    )
    measured = rooted = 0.0
    for row, programs in fit:
        module, profile = ran_program(programs, row.id)
        works = op_works(module)
        for op in profile.ops:
            work, count = works.get(op.name, (None, 0.0))
            if work is None or not work.compiler_cycles:
                continue
            fixed = model.overhead_s(work)
            measured += op.per_step_s - count * fixed
            rooted += count * ((model.time_s(work) - fixed) * work.compiler_cycles) ** 0.5
    if not rooted:
        raise ValueError("no kernel with a convolution window of its own in the fit rows")
    return float(f"{(measured / rooted) ** 2:.4g}")
