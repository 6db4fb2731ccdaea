"""``aoizora measure``: time a plan's steps and collectives on TPUs, as measurement rows.

Closes the loop plan -> measure -> validate -> calibrate -> plan (docs/measure.md).
One concept per module:

- :mod:`aoizora.measure.devices` -- the devices (the plan's TPU slice, or host CPU
  devices for a dry run) and the plan's mesh over them, checked against the plan's order;
- :mod:`aoizora.measure.timing` -- warm-up, repeats, a clock read once the work is done
  (:func:`jax.block_until_ready`), nothing left running when interrupted;
- :mod:`aoizora.measure.steps` -- the winner, runners-up and baselines of the plan, the
  Wan step with random inputs, one step's timing;
- :mod:`aoizora.measure.collectives` -- collectives over the plan's mesh axes and axis
  pairs across a size sweep;
- :mod:`aoizora.measure.environment` -- the provenance (versions, devices, hosts, date,
  plan hash);
- :mod:`aoizora.measure.rows` -- timings as rows of the measurement file
  (docs/validation.md);
- :mod:`aoizora.measure.store` -- the output file, rewritten atomically after every row
  (a resumed run keeps what is there);
- :mod:`aoizora.measure.run` -- :func:`run_measure`, the run.
"""

from __future__ import annotations

from aoizora.measure.collectives import DEFAULT_SIZES_BYTES, CollectiveTarget, collective_targets
from aoizora.measure.devices import BACKENDS, backend_devices, mesh_order, plan_mesh
from aoizora.measure.environment import Environment, current_environment
from aoizora.measure.run import MeasureOptions, MeasureReport, run_measure
from aoizora.measure.steps import StepTarget, step_targets
from aoizora.measure.timing import Timing, time_calls

__all__ = [
    "BACKENDS",
    "DEFAULT_SIZES_BYTES",
    "CollectiveTarget",
    "Environment",
    "MeasureOptions",
    "MeasureReport",
    "StepTarget",
    "Timing",
    "backend_devices",
    "collective_targets",
    "current_environment",
    "mesh_order",
    "plan_mesh",
    "run_measure",
    "step_targets",
    "time_calls",
]
