"""How much of a tile's saving a whole step sees: ``step_gain``, fitted on measured step pairs.

The tile sweep times the splash kernel alone; inside a step the same tile saves more or
less than that (the kernel shares the chip with the step's other work). A measured pair --
one step at a planned tile, the same step at the 512 tile (``aoizora measure`` times both:
the plan's winner and its 'existing deployment' baseline) -- gives the step's gain
``m = 1 - t_tile / t_512``. The sweep's saving for that step, summed over its splash calls
as Stage 1 reads them (``aoizora.stage1.tiles.tile_gain_s`` with ``step_gain`` 1), over the
measured 512 step is ``p``. ``step_gain`` is the least-squares slope of ``m`` on ``p``
through 0: ``sum(p m) / sum(p p)`` (:func:`fit_step_gain`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from aoizora.compile import lower_to_read
from aoizora.errors import ValidationError
from aoizora.stage1.sweep import score_candidate
from aoizora.stage1.tiles import SplashCall, tile_gain_s
from aoizora.studies.validation.format import Measurement
from aoizora.studies.validation.step import row_program, row_slice
from sim.compute import ComputeModel

__all__ = ["StepPair", "fit_step_gain", "step_pairs"]


@dataclass(frozen=True)
class StepPair:
    """One step measured at ``tile`` (``tile_s``) and at 512 (``base_s``), its splash calls."""

    name: str
    tile: tuple[int, int, int]
    tile_s: float
    base_s: float
    calls: tuple[SplashCall, ...]

    @property
    def measured_gain(self) -> float:
        return 1.0 - self.tile_s / self.base_s


def _key(row: Measurement) -> tuple[object, ...]:
    s = row.step
    assert s is not None
    return (s.model, s.clip, s.mesh_shape, s.mesh_axes, s.rules_id, s.attention, row.slice_name)


def step_pairs(rows: Sequence[Measurement]) -> tuple[StepPair, ...]:
    """Every (tile, 512) pair of step rows of one configuration, with its splash calls
    (Stage 1 lowers each configuration once; no compile)."""
    steps = [r for r in rows if r.kind == "step" and r.step is not None]
    base = {_key(r): r for r in steps if r.step.splash_blocks is None}  # type: ignore[union-attr]
    out = []
    for r in steps:
        s = r.step
        assert s is not None
        if s.splash_blocks is None or _key(r) not in base:
            continue
        # Stage 1 reads the 512 program: the calls' lengths are padded to 512 (tiles.py)
        workload, cand = row_program(base[_key(r)])
        est = score_candidate(workload, cand, row_slice(r), lower=lower_to_read)
        out.append(StepPair(r.row_id, s.splash_blocks, r.measured_s, base[_key(r)].measured_s,
                            est.splash_calls))  # fmt: skip
    if not out:
        raise ValidationError(
            "no pair of step rows of one configuration at a splash tile and at 512 (empty "
            "splash_blocks); aoizora measure times both for a plan with planned tiles"
        )
    return tuple(out)


def fit_step_gain(
    pairs: Sequence[StepPair], model: ComputeModel
) -> tuple[float, tuple[tuple[StepPair, float], ...]]:
    """``step_gain`` and each pair's sweep-predicted gain ``p`` (at ``step_gain`` 1)."""
    p = model.params
    if p.splash_kernel is not None:  # the kernel's model prices tiles where present
        params = dataclasses.replace(
            p, splash_kernel=dataclasses.replace(p.splash_kernel, step_gain=1.0))  # fmt: skip
    elif p.splash_tiles is not None:
        params = dataclasses.replace(
            p, splash_tiles=dataclasses.replace(p.splash_tiles, step_gain=1.0))  # fmt: skip
    else:
        raise ValidationError(
            "the generation has neither [compute.splash_kernel] nor [compute.splash_tiles] to "
            "fit a step_gain to"
        )
    unit = dataclasses.replace(model, params=params)
    predicted = tuple((p, -tile_gain_s(p.calls, unit, p.tile) / p.base_s) for p in pairs)
    den = sum(g * g for _, g in predicted)
    if den <= 0:
        raise ValidationError("the tile sweep predicts no saving for any pair: nothing to fit")
    return sum(g * p.measured_gain for p, g in predicted) / den, predicted
