"""``conv_relayout_passes`` fitted to measured VAE decodes (``aoizora measure`` rows of kind
``vae``).

Stage 1 prices a decode from the program before XLA assigns layouts, so the pads and
copies XLA puts around each convolution are not in it (``aoizora.stage1.q1.conv_relayout_s``).
For each decode row: Stage 1's figure without them ``q`` (with the host's launch of the
call, ``program_launch_s``, as the plan's decode figure has it) and the seconds one more HBM
pass over every convolution's bytes takes ``b``; the passes ``k`` minimise the relative
error ``sum(((q + k b) / t - 1)^2)`` over the fit rows, in closed form:
``k = sum(b/t (1 - q/t)) / sum((b/t)^2)``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from aoizora.compile import lower_to_read
from aoizora.errors import ValidationError
from aoizora.stage1.sweep import score_candidate
from aoizora.studies.validation.format import Measurement
from aoizora.studies.validation.step import launch_s, row_program, row_slice
from sim.chips import Chip
from sim.compute import compute_model_of

__all__ = ["DecodeCase", "decode_cases", "fit_passes"]


@dataclass(frozen=True)
class DecodeCase:
    """One measured decode: its row, seconds, Stage 1 without relayouts and one pass's."""

    row_id: str
    measured_s: float
    stage1_s: float
    pass_s: float

    def predicted_s(self, passes: float) -> float:
        return self.stage1_s + passes * self.pass_s


def decode_cases(rows: Sequence[Measurement], chip: Chip) -> tuple[DecodeCase, ...]:
    """Stage 1 (no compile) of every ``vae`` row's decode, without relayouts, on ``chip``."""
    bare = dataclasses.replace(
        chip, compute=dataclasses.replace(chip.compute, conv_relayout_passes=0.0)
    )
    out = []
    for r in rows:
        s = r.step
        if r.kind != "vae" or s is None:
            continue
        slice_ = row_slice(r).with_chip(bare)
        workload, candidate = row_program(r)
        est = score_candidate(workload, candidate, slice_, lower=lower_to_read)
        model = compute_model_of(slice_.chip.per_device())
        rate = model.hbm_bandwidth_bytes_per_s * model.params.hbm_efficiency
        conv_bytes = sum(n.count * n.hbm_bytes_per_chip for n in est.nodes
                         if n.kind == "compute" and n.op.endswith("convolution"))  # fmt: skip
        figure = est.q1_s + launch_s(s, slice_)  # one call, as the row timed it
        out.append(DecodeCase(r.row_id, r.measured_s, figure, conv_bytes / rate))
    if not out:
        raise ValidationError("no row of kind 'vae': measure decodes with aoizora measure PLAN")
    return tuple(out)


def fit_passes(cases: Sequence[DecodeCase]) -> float:
    """The least-squares passes over ``cases`` (module docstring); at least 0."""
    num = sum(c.pass_s / c.measured_s * (1 - c.stage1_s / c.measured_s) for c in cases)
    den = sum((c.pass_s / c.measured_s) ** 2 for c in cases)
    if den <= 0:
        raise ValidationError("no convolution in the decodes: nothing to fit the passes to")
    return max(0.0, num / den)
