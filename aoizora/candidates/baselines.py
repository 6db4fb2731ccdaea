"""The named baselines a plan is compared with, ranked by the same Q2 as every candidate.

:func:`baseline_candidates` names today's deployments so reports can compare:

* ``"existing deployment"`` -- maxdiffusion's defaults: ``context`` = all chips,
  its rules, K/V all-gathered (``gather_kv``), and the device order of
  ``jax.experimental.mesh_utils.create_device_mesh`` (maxdiffusion
  ``max_utils.create_device_mesh`` with ``allow_split_physical_axes: False``);
* ``"maxdiffusion recipe"`` -- the published recipe: ``data`` = 2 (the CFG pair) x
  ``context`` = the rest, same rules, attention and device-order function.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from aoizora.candidates.space import Candidate, check_candidate, make_candidate
from aoizora.errors import CandidateError
from aoizora.tpu import default_device_order
from aoizora.workloads.base import Workload
from sim.topology import Slice

__all__ = ["BASELINE_NAMES", "Baseline", "baseline_candidates"]

BASELINE_NAMES: tuple[str, ...] = ("existing deployment", "maxdiffusion recipe")


@dataclass(frozen=True)
class Baseline:
    """A named deployment to compare with: its candidate and its default device order.

    ``device_order`` lists libtpu physical chip ids (``x + X*y`` on v5e) in mesh-flat
    (row-major) order; ``note`` says how it was obtained.
    """

    name: str
    candidate: Candidate
    device_order: tuple[int, ...]
    note: str


def baseline_candidates(workload: Workload, slice_: Slice) -> tuple[Baseline, ...]:
    """The named baselines of a Wan workload on ``slice_`` (``()`` for other workloads).

    Device orders come from ``mesh_utils.create_device_mesh`` on the slice's libtpu
    devices (see :func:`aoizora.tpu.default_device_order`).
    """
    if workload.info.get("kind") != "wan":
        return ()
    n = slice_.num_devices  # the mesh spans devices (two per tpu7x chip)
    out: list[Baseline] = []
    shapes = {
        "existing deployment": (1, 1, n, 1),
        "maxdiffusion recipe": (2, 1, n // 2, 1),
    }
    for name in BASELINE_NAMES:
        shape = shapes[name]
        if math.prod(shape) != n:
            continue  # one chip: no recipe with data = 2
        cand = make_candidate(workload, shape, "maxdiffusion", "gather_kv")
        reasons = check_candidate(workload, cand)
        if reasons:
            raise CandidateError(f"baseline {name!r} ({cand.id}) is illegal: {'; '.join(reasons)}")
        order, note = default_device_order(shape, slice_)
        out.append(Baseline(name=name, candidate=cand, device_order=order, note=note))
    return tuple(out)
