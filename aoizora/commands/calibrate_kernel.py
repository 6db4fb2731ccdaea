"""``aoizora calibrate SWEEP --generation G --splash-kernel``: the splash kernel's model.

Fits ``[compute.splash_kernel]`` (:mod:`sim.splash_kernel`) and prints it with its report
(never written: the shipped topology file is edited by hand):

* the time terms on the fit half of the tile sweeps (``SWEEP`` and every ``--more-tiles``
  file; :mod:`aoizora.studies.splash_kernel_fit`), the report on both halves;
* with ``--vmem FILE`` (``validation/v5e/splash_sweep/vmem.py``: the smallest scoped VMEM
  limit libtpu compiles each tile under) the VMEM terms, least squares on the middle of
  each tile's bracket, and how many brackets the fit lands in;
* with ``--step-rows ROWS`` the ``step_gain`` (what a tile saves in a step over alone).

The chip's VMEM and default scoped limit come from the generation's topology file.

    aoizora calibrate validation/v5e/splash_sweep/sweep.json --generation v5e \\
        --splash-kernel --more-tiles validation/v5e/tiles.json \\
        --vmem validation/v5e/splash_sweep/vmem.json --step-rows validation/v5e/tiles/rows-a.csv
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import tomllib
from pathlib import Path
from typing import Any

import numpy as np

from aoizora.errors import MeasureError, ValidationError
from aoizora.studies.splash_kernel_fit import SPLIT_SEED, fit_time, report, split
from aoizora.studies.tile_fit import read_tile_cases
from aoizora.studies.tile_steps import fit_step_gain, step_pairs
from aoizora.studies.validation.format import read_measurements
from sim.chips import load_chip, topologies_dir
from sim.compute import compute_model_of
from sim.splash_kernel import SplashKernel, kv_row_bytes, q_row_bytes

__all__ = ["fit_vmem", "run_splash_kernel", "splash_kernel_toml"]


def fit_vmem(path: str | Path, base: SplashKernel) -> tuple[SplashKernel, int, int]:
    """``base`` with its VMEM terms fitted to ``path``'s brackets, never under one: (kernel,
    compile verdicts it predicts under the limits a plan may set, 16-128 MiB, verdicts;
    where it errs, it says a tile needs a higher limit than it does)."""
    try:
        rows = json.loads(Path(path).read_text(encoding="utf-8"))["tiles"]
        data = [(tuple(r["tile"]), int(r["head_dim"]), float(r["fails_mib"]),
                 float(r["compiles_mib"])) for r in rows]  # fmt: skip
    except (OSError, KeyError, TypeError, ValueError) as exc:
        raise MeasureError(
            f"{path}: not a VMEM bracket file ({type(exc).__name__}: {exc}); make one with "
            "python validation/v5e/splash_sweep/vmem.py OUT.json"
        ) from exc
    x = np.array([[bq * q_row_bytes(d, d) + bkv * kv_row_bytes(d, d), 4 * bq * bkvc,
                   4 * bq * bkv, 1.0] for (bq, bkv, bkvc), d, _, _ in data])  # fmt: skip
    y = np.array([(lo + hi) / 2 * 2**20 for _, _, lo, hi in data])
    free = [0, 1, 2, 3]
    while True:
        coef = np.zeros(4)
        coef[free] = np.linalg.lstsq(x[:, free], y, rcond=None)[0]
        if all(coef[i] >= 0 for i in free):
            break
        free = [i for i in free if coef[i] >= 0]
    kernel = dataclasses.replace(
        base, buffers=round(float(coef[0]), 3), score_copies=round(float(coef[1]), 3),
        block_score_copies=round(float(coef[2]), 3), fixed_vmem_bytes=round(float(coef[3])),
    )  # fmt: skip
    # The compiler packs its scoped allocations in ways no linear form follows (the fit is
    # off by up to ~3 MiB either way): the fixed term rises until no tile needs more than
    # the model says, so a limit the model holds enough always compiles.
    short = max(hi * 2**20 - kernel.vmem_needed_bytes(t, d, d) for t, d, _, hi in data)
    if short > 0:
        fixed = kernel.fixed_vmem_bytes + math.ceil(short / 1024) * 1024
        kernel = dataclasses.replace(kernel, fixed_vmem_bytes=fixed)
    # The verdicts a plan acts on: compiles or not under each limit it may set (16 MiB steps)
    verdicts = [(kernel.fits(t, d, d, m << 20), m >= hi) for t, d, lo, hi in data
                for m in range(16, 129, 16) if not lo < m < hi]  # fmt: skip
    if any(says and not does for says, does in verdicts):
        raise ValidationError(f"{path}: the VMEM fit says a tile fits where libtpu refused it")
    return kernel, sum(a == b for a, b in verdicts), len(verdicts)


def splash_kernel_toml(kernel: SplashKernel, base_table: dict[str, Any]) -> str:
    """The ``[compute.splash_kernel]`` table of ``kernel`` (the chip entries kept)."""
    chip = "\n".join(
        f"{key} = {{ value = {base_table[key]['value']}, source = "
        f"{json.dumps(base_table[key]['source'])} }}"
        for key in ("vmem_bytes", "default_scoped_vmem_bytes")
    )
    body = ", ".join(f"[{bq}, {bkvc}, {e}]" for bq, bkvc, e in kernel.body)
    numbers = "\n".join(
        f"{k} = {getattr(kernel, k)}"
        for k in (
            "step_s",
            "q_block_s",
            "q_row_s",
            "buffers",
            "score_copies",
            "block_score_copies",
            "fixed_vmem_bytes",
            "step_gain",
        )  # fmt: skip
    )
    return (f"[compute.splash_kernel]\n{chip}\nbody = [{body}]\n{numbers}\n"
            f"source = {json.dumps(kernel.source)}")  # fmt: skip


def run_splash_kernel(args: argparse.Namespace) -> int:
    """The command (module docstring)."""
    chip = load_chip(args.generation)
    model = compute_model_of(chip.per_device())
    base = model.params.splash_kernel
    if base is None:
        raise ValidationError(
            f"topologies/{args.generation}.toml has no [compute.splash_kernel] to refit: add "
            "one (its vmem_bytes and default_scoped_vmem_bytes with their sources) first"
        )
    files = [args.file, *(args.more_tiles or [])]
    cases = tuple(c for f in files for c in read_tile_cases(f)[1])
    fit, held = split(cases)
    command = f"aoizora calibrate {' '.join(files[:1])} --generation {args.generation} " + (
        f"--splash-kernel{''.join(f' --more-tiles {f}' for f in files[1:])}"
    )
    kernel = fit_time(fit, base, peak_flops_per_s=model.peak_flops_per_s)
    lines = []
    if args.vmem:
        kernel, inside, total = fit_vmem(args.vmem, kernel)
        command += f" --vmem {args.vmem}"
        lines.append(f"# VMEM: {inside} of {total} compile verdicts under 16-128 MiB predicted; "
                     "the rest ask a higher limit than libtpu needs, none a lower")  # fmt: skip
    if args.step_rows:
        params = dataclasses.replace(model.params, splash_kernel=dataclasses.replace(
            kernel, step_gain=1.0))  # fmt: skip
        gain, _ = fit_step_gain(step_pairs(read_measurements(args.step_rows)),
                                dataclasses.replace(model, params=params))  # fmt: skip
        kernel = dataclasses.replace(kernel, step_gain=round(gain, 3))
        command += f" --step-rows {args.step_rows}"
    kernel = dataclasses.replace(kernel, source=(
        f"fitted by '{command}' on the fit half (split seed {SPLIT_SEED}) of {len(cases)} "
        "splash kernels timed on the chip (validation/README.md, section 19)"))  # fmt: skip
    for name, half in (("fit", fit), ("held-out", held)):
        r = report(half, kernel, peak_flops_per_s=model.peak_flops_per_s,
                   hbm_bandwidth_bytes_per_s=model.hbm_bandwidth_bytes_per_s)  # fmt: skip
        lines.append(f"# {name} half: {len(r.errors)} kernels, MAPE {100 * r.mape:.2f} %, "
                     f"worst {100 * r.worst:.2f} %")  # fmt: skip
        lines += [f"#   heads {s[0]} x {s[1]}: the model's best {p} runs {100 * o:+.2f} % over "
                  f"the best measured {b}" for s, p, b, o in r.picks]  # fmt: skip
    table = _raw_table(args.generation)
    sys.stdout.write(splash_kernel_toml(kernel, table) + "\n" + "\n".join(lines) + "\n")
    return 0


def _raw_table(generation: str) -> dict[str, Any]:
    """The generation's ``[compute.splash_kernel]`` as written (its chip entries' sources)."""
    path = topologies_dir(generation) / f"{generation}.toml"
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    return dict(data["compute"]["splash_kernel"])
