"""``aoizora measure --kernels``: the compute model's microbenchmarks on one device.

Times :func:`aoizora.measure.kernels.kernel_cases` on the first device and writes the
samples with their provenance to ``--out`` after each kernel (a JSON file that
``aoizora calibrate FILE --compute`` fits the ``[compute]`` table to, anywhere:
:mod:`aoizora.studies.compute_fit`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import sys
from typing import Any

import jax

from aoizora.atomic import write_atomic
from aoizora.commands.args import progress_printer
from aoizora.measure.kernels import KERNEL_KINDS, KernelResult, kernel_cases, run_kernels
from aoizora.plan.fields import Provenance

__all__ = ["kernel_provenance", "run_kernel_suite"]


def kernel_provenance(device: Any) -> dict[str, Any]:
    """Where and with what the kernels ran: device kind, versions, date and command."""
    versions = Provenance.current()
    return {
        "device_kind": str(device.device_kind),
        "platform": str(device.platform),
        "jax": versions.jax,
        "jaxlib": versions.jaxlib,
        "libtpu": versions.libtpu,
        "aoizora": versions.aoizora,
        "date": datetime.datetime.now(datetime.UTC).date().isoformat(),
        "command": "aoizora " + shlex.join(sys.argv[1:]),
    }


def run_kernel_suite(args: argparse.Namespace) -> int:
    kinds = KERNEL_KINDS if args.kernels == "all" else tuple(args.kernels.split(","))
    cases = kernel_cases([k.strip() for k in kinds if k.strip()])
    device = jax.devices()[0]
    say = progress_printer(quiet=args.quiet)
    say(f"measure --kernels: {len(cases)} kernels on {device.device_kind} ({device.platform})")
    out = args.out or "kernels.json"
    provenance = kernel_provenance(device)

    def save(results: tuple[KernelResult, ...]) -> None:
        data = {
            "format": "aoizora-kernels/1",
            "provenance": provenance,
            "kernels": [r.to_json_dict() for r in results],
        }
        write_atomic(out, json.dumps(data, indent=1) + "\n")

    results = run_kernels(cases, say=say, on_result=save)
    failed = [r for r in results if r.error]
    say(f"{len(results) - len(failed)} kernels timed into {out}, {len(failed)} failed")
    return 1 if failed else 0
