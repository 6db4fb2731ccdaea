"""The plan's steps on devices: which configurations, their inputs, and one step's timing.

:func:`step_targets` lists what ``aoizora measure`` times: the winner, the first ``top``
runners-up and the baselines the plan file records (``alternatives``,
:mod:`aoizora.plan.alternatives`). A configuration listed twice (a baseline that is the
winner's sharding in the winner's order) is timed once, under every role it has.

:func:`time_step` builds the workload's step for one configuration on the plan's mesh
(:func:`aoizora.compile.jit_step`), compiles it, makes random inputs of the right shapes,
dtypes and shardings on the devices (:func:`random_arguments`; no checkpoint: the time of
a step does not depend on the weights' values) and times it
(:func:`aoizora.measure.timing.time_calls`).
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

from aoizora.candidates.space import Candidate
from aoizora.compile import compiler_options, jit_step
from aoizora.errors import AoizoraError, MeasureError
from aoizora.measure.capture import capture_profile
from aoizora.measure.devices import plan_mesh
from aoizora.measure.memory import held_bytes, own_held_bytes, reserved_bytes
from aoizora.measure.timing import Clock, Timing, time_calls
from aoizora.plan import Plan, WorkloadSource
from aoizora.workloads.base import Workload
from aoizora.workloads.factory import load_workload
from aoizora.workloads.vae import vae_decode_chunk, vae_workload
from aoizora.workloads.vae_config import VAE_CONFIGS
from aoizora.workloads.wan import WAN_CONFIGS, wan_workload

__all__ = [
    "INPUT_SCALE",
    "ProfileRequest",
    "StepTarget",
    "plan_workload",
    "random_arguments",
    "step_options",
    "step_targets",
    "time_step",
]

# Standard deviation of the random floating-point inputs: a usual weight-init scale,
# small enough that bf16 activations stay finite through the layers.
INPUT_SCALE = 0.02


@dataclass(frozen=True)
class StepTarget:
    """One configuration to time: its roles, row-id key, plan and predicted time, and
    what it runs: a denoising ``step`` or the clip's ``vae`` decode (the row's kind)."""

    roles: tuple[str, ...]
    key: str
    plan: Plan
    predicted_s: float
    kind: str = "step"

    @property
    def label(self) -> str:
        return f"{' = '.join(self.roles)} ({self.plan.candidate_id})"

    @property
    def configuration(self) -> tuple[object, ...]:
        p = self.plan
        return (p.mesh_axis_names, p.mesh_shape, p.logical_rules, p.attention, p.physical_ids,
                p.splash_blocks, p.scoped_vmem_kib)  # fmt: skip


@dataclass(frozen=True)
class ProfileRequest:
    """Profile a timed step too: ``executions`` more steps under ``jax.profiler`` into
    ``trace`` (``*.xplane.pb``), and the compiled HLO text that ran into ``hlo``."""

    trace: Path
    hlo: Path
    executions: int = 1


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "x"


def step_targets(
    plan: Plan, *, top: int, baselines: bool, vae: bool = False, steps: bool = True
) -> tuple[StepTarget, ...]:
    """The winner, the first ``top`` runners-up (Q2 order) and, with ``baselines``, every
    recorded baseline (by name); one target per distinct configuration. With ``vae``, a
    plan with a VAE plan adds its decode (role ``vae decode``, key ``vae``) last; with
    ``steps`` False that decode is all."""
    if top < 0:
        raise MeasureError(f"--top {top}: give the number of runners-up to time, e.g. --top 2")
    out = [StepTarget(("winner",), "winner", plan, plan.predicted.winner_s)]
    runners = [a for a in plan.alternatives if a.role == "runner-up"][:top]
    for k, alt in enumerate(runners, start=1):
        variant = plan.alternative_plan(alt)
        out.append(StepTarget((f"runner-up {k}",), f"runner-up-{k}", variant, alt.step_s))
    if baselines:
        for alt in (a for a in plan.alternatives if a.role == "baseline"):
            out.append(
                StepTarget(
                    (f"baseline {alt.name!r}",),
                    f"baseline-{_slug(alt.name)}",
                    plan.alternative_plan(alt),
                    alt.step_s,
                )
            )
    merged: dict[tuple[object, ...], StepTarget] = {}
    for t in out:
        first = merged.get(t.configuration)
        if first is None:
            merged[t.configuration] = t
        else:
            merged[t.configuration] = StepTarget(
                (*first.roles, *t.roles), first.key, first.plan, first.predicted_s
            )
    denoise = tuple(merged.values()) if steps else ()
    if vae and plan.vae is not None:
        decode = StepTarget(("vae decode",), "vae", plan.vae, plan.vae.predicted.winner_s, "vae")
        return (*denoise, decode)
    return denoise


def plan_workload(plan: Plan) -> Workload:
    """The program the plan was made for: a Wan step (random weights; the backend picks
    the kernels: Pallas splash attention on TPU, XLA attention on CPU), or a VAE plan's
    decode (its chunk from the workload name). Raises :class:`MeasureError` for plans of
    other workloads (their steps have no measurement row format yet)."""
    if plan.source is not None:
        return _rebuilt(plan, plan.source)
    if plan.model in VAE_CONFIGS and plan.clip is not None:
        chunk = vae_decode_chunk(plan.workload)
        return _checked(plan, vae_workload(plan.model, plan.clip, chunk=chunk))
    if plan.model not in WAN_CONFIGS or plan.clip is None:
        raise MeasureError(
            f"plan workload {plan.workload!r} is neither a Wan model ({sorted(WAN_CONFIGS)}) "
            "nor a --workload plan that says where it came from (plans made before the "
            "plan file recorded workload_source: re-plan it); time its collectives with "
            "--no-steps --collectives"
        )
    return _checked(plan, wan_workload(plan.model, plan.clip))


def _rebuilt(plan: Plan, source: WorkloadSource) -> Workload:
    """A ``--workload`` plan's program, from the spec it was made from (relative paths from
    the current directory, as ``aoizora plan`` read them), checked to be the same program."""
    try:
        workload = load_workload(source.spec)
    except AoizoraError as exc:
        raise MeasureError(
            f"the plan's workload {source.spec!r} cannot be loaded here ({exc}); run aoizora "
            "measure from the directory aoizora plan ran in"
        ) from None
    if workload.program_fingerprint != source.program:
        raise MeasureError(
            f"{source.spec} now builds another program than the plan's (fingerprint "
            f"{workload.program_fingerprint[:12]} vs {source.program[:12]}): re-plan it, "
            f"aoizora plan --workload {source.spec} ..."
        )
    return _checked(plan, workload)


def _checked(plan: Plan, workload: Workload) -> Workload:
    """``workload``, when it is the one the plan names."""
    if workload.name != plan.workload:
        raise MeasureError(
            f"the plan was made for workload {plan.workload!r} but this AoiZora builds "
            f"{workload.name!r} for model {plan.model!r}; re-run aoizora plan with this version"
        )
    return workload


def _filled_leaf(index: int, leaf: Any) -> jax.Array:
    """Values of ``leaf``'s shape: ``INPUT_SCALE * sin(position + index)`` for floats (a
    spread of values in [-0.02, 0.02], one fused element-wise kernel), zeros otherwise."""
    if not jnp.issubdtype(leaf.dtype, jnp.floating):
        return jnp.zeros(leaf.shape, leaf.dtype)  # integer or boolean inputs: zeros
    n = math.prod(leaf.shape)
    # float32 positions are exact to 2^24; past that neighbours repeat, which no timing sees
    position = jax.lax.iota(jnp.float32, n) * 0.7548776662 + float(index)
    return (jnp.sin(position) * INPUT_SCALE).astype(leaf.dtype).reshape(leaf.shape)


def random_arguments(abstract_args: Any, shardings: Any, *, seed: int = 0) -> Any:
    """Arrays shaped like ``abstract_args`` (pytrees of ShapeDtypeStruct), made on the devices
    with ``shardings`` (the same structure), so no host ever holds a whole array: floats a
    deterministic spread in [-:data:`INPUT_SCALE`, +:data:`INPUT_SCALE`], other dtypes zeros.

    Not drawn from a random generator: one threefry generator per leaf made a program
    whose compile took ~25 s of every step target on TPU v5e (a Wan step has ~300
    inputs), and a step's time does not depend on the values. ``seed`` shifts them.
    """
    leaves, tree = jax.tree.flatten(abstract_args)
    placed = jax.tree.leaves(shardings)
    if len(placed) != len(leaves):
        raise MeasureError(f"{len(leaves)} inputs but {len(placed)} input shardings")

    def make() -> list[jax.Array]:
        return [_filled_leaf(seed + i, leaf) for i, leaf in enumerate(leaves)]

    values = jax.jit(make, out_shardings=placed)()
    return jax.tree.unflatten(tree, values)


def step_options(candidate: Candidate, backend: str) -> dict[str, Any]:
    """The XLA options ``candidate``'s step compiles with on ``backend``: on a TPU its
    planned scoped VMEM limit (:func:`aoizora.compile.compiler_options`), as the planner
    compiled it; none on the host CPU (XLA:CPU knows no TPU flag, and its attention is
    XLA's, not the splash kernel that needs the limit)."""
    return {} if backend == "cpu" else compiler_options(candidate)


def time_step(
    target: StepTarget,
    workload: Workload,
    devices: Sequence[Any],
    *,
    backend: str,
    warmup: int,
    repeats: int,
    clock: Clock = time.perf_counter,
    say: Callable[[str], None] | None = None,
    profile: ProfileRequest | None = None,
    check: Callable[[Any], None] | None = None,
) -> Timing:
    """Compile ``target``'s step on its planned mesh over ``devices`` and time it, then call
    it once more and, its outputs alive, read what the devices hold
    (``Timing.peak_hbm_bytes``, :func:`~aoizora.measure.memory.held_bytes`); with
    ``profile``, then profile it (:class:`ProfileRequest`). ``check`` sees the compiled
    program before any input is made and may raise to refuse it (a memory check)."""
    plan = target.plan
    mesh = plan_mesh(plan, devices, backend=backend)
    before = reserved_bytes(list(mesh.devices.flat))  # an earlier target's, if any
    candidate = Candidate(
        plan.mesh_axis_names, plan.mesh_shape, plan.rules_name, plan.rules, plan.attention,
        splash_blocks=plan.splash_blocks, scoped_vmem_kib=plan.scoped_vmem_kib,
    )  # fmt: skip
    t0 = time.perf_counter()
    jitted = jit_step(workload, candidate, mesh, "cpu" if backend == "cpu" else "tpu")
    options = step_options(candidate, backend) or None
    compiled = jitted.lower(*workload.abstract_args).compile(compiler_options=options)
    if check is not None:
        check(compiled)
    args = random_arguments(workload.abstract_args, compiled.input_shardings[0])
    if say is not None:
        say(f"compiled and placed inputs in {time.perf_counter() - t0:.1f} s")
    timing = time_calls(lambda: compiled(*args), warmup=warmup, repeats=repeats, clock=clock)
    out = compiled(*args)  # one more call, its outputs alive: what the step holds at most
    jax.block_until_ready(out)
    flat = list(mesh.devices.flat)
    held = own_held_bytes(held_bytes(flat), before, reserved_bytes(flat))
    if held is None and before and say is not None:
        say(
            f"memory not read: an earlier program's reservation ({before / 2**30:.2f} GiB) "
            "holds this one's temporaries; measure it in a process of its own for peak_hbm_bytes"
        )
    timing = dataclasses.replace(timing, peak_hbm_bytes=held)
    del out
    if profile is not None:
        # the text of the program that ran: a profile names its ops by this module's names
        profile.hlo.parent.mkdir(parents=True, exist_ok=True)
        profile.hlo.write_text(compiled.as_text(), encoding="utf-8")
        capture_profile(lambda: compiled(*args), executions=profile.executions, out=profile.trace)
        if say is not None:
            say(f"profiled {profile.executions} step(s) into {profile.trace}")
    return timing
