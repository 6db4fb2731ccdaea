"""One measurement run: the plan's steps and collectives on the devices, row by row.

:func:`run_measure` loads the plan, checks that the devices are its slice (or, on the
host CPU, that they carry its device ids) before any work, lists the targets --
steps (:mod:`aoizora.measure.steps`), then collectives
(:mod:`aoizora.measure.collectives`) -- skips every one whose case the output file
already holds (:mod:`aoizora.measure.store`) and times the rest, adding each row to
the file as soon as it is measured. A target that fails to compile or run is reported
and the run goes on; Ctrl-C (``KeyboardInterrupt``) propagates after the device work in
flight has finished (:mod:`aoizora.measure.timing`), with every row so far in the file.
A step whose compiled program would not fit in memory is skipped before it runs
(:mod:`aoizora.measure.memory`; the collectives' buffers are the sizes asked for). A dry
run on the host CPU runs the steps at a scaled-down clip (:mod:`aoizora.measure.dry_run`).

Multi-host slices (``jax.distributed``): every process runs the same targets in the same
order -- process 0 reads the file and broadcasts which targets are done -- and a
repeat's time is the slowest process's; process 0 writes the file.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np

from aoizora.errors import MeasureError
from aoizora.measure.collectives import (
    DEFAULT_SIZES_BYTES,
    CollectiveTarget,
    collective_targets,
    time_collective,
)
from aoizora.measure.devices import backend_devices, plan_mesh
from aoizora.measure.dry_run import DEFAULT_CPU_CLIP, dry_run_plan
from aoizora.measure.environment import Environment, current_environment
from aoizora.measure.memory import TargetTooLarge, check_memory, require_fit
from aoizora.measure.rows import (
    collective_case,
    collective_notes,
    measured_row,
    row_id,
    step_case,
    step_notes,
)
from aoizora.measure.steps import (
    ProfileRequest,
    StepTarget,
    plan_workload,
    step_targets,
    time_step,
)
from aoizora.measure.store import RowStore
from aoizora.measure.timing import Clock, Timing
from aoizora.plan import Plan, load_plan
from aoizora.studies.validation.format import (
    COLLECTIVE_KINDS,
    CollectiveCase,
    Measurement,
    StepCase,
)
from aoizora.workloads.base import Workload
from aoizora.workloads.clip import Clip

__all__ = ["MeasureOptions", "MeasureReport", "profile_dir", "run_measure"]

Progress = Callable[[str], None]


@dataclass(frozen=True)
class MeasureOptions:
    """What to time and how (``aoizora measure``'s options, docs/measure.md)."""

    top: int = 2
    baselines: bool = True
    steps: bool = True
    vae: bool = True  # the clip's VAE decode too, when the plan has a VAE plan
    collectives: bool = False
    sizes_bytes: tuple[int, ...] = DEFAULT_SIZES_BYTES
    kinds: tuple[str, ...] = COLLECTIVE_KINDS
    warmup: int = 2
    repeats: int = 10
    restart: bool = False
    profile_steps: int = 0  # > 0: profile each step target that many executions
    cpu_clip: Clip | None = DEFAULT_CPU_CLIP  # the dry run's clip; None: the plan's


@dataclass(frozen=True)
class MeasureReport:
    """What a run did: the rows it added, the targets the file already held, the failures."""

    out: Path
    env: Environment
    measured: tuple[tuple[str, Measurement, float | None], ...]  # (what, row, predicted_s)
    kept: tuple[tuple[str, str], ...]  # (what, row id already in the file)
    failed: tuple[tuple[str, str], ...]  # (what, reason)
    profiles: tuple[tuple[str, ProfileRequest], ...] = ()  # (row id, its trace and HLO)
    skipped: tuple[tuple[str, str], ...] = ()  # (what, why): would not fit in memory

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "out": str(self.out),
            "plan": self.env.plan_file,
            "plan_sha256": self.env.plan_sha256,
            "backend": self.env.backend,
            "devices": self.env.num_devices,
            "hosts": self.env.num_hosts,
            "rows": [
                {
                    "what": what,
                    "row_id": row.row_id,
                    "kind": row.kind,
                    "measured_s": row.measured_s,
                    "spread_s": row.spread_s,
                    "predicted_s": predicted,
                }
                for what, row, predicted in self.measured
            ],
            "kept": [{"what": what, "row_id": rid} for what, rid in self.kept],
            "failed": [{"what": what, "error": why} for what, why in self.failed],
            "skipped": [{"what": what, "reason": why} for what, why in self.skipped],
            "profiles": [
                {"row_id": rid, "trace": str(p.trace), "hlo": str(p.hlo)}
                for rid, p in self.profiles
            ],
        }


@dataclass(frozen=True)
class _Job:
    what: str
    key: str
    case: StepCase | CollectiveCase
    step: StepTarget | None = None
    collective: CollectiveTarget | None = None

    def about(self, env: Environment, plan: Plan) -> str:
        """The start of the row's notes: what ran."""
        if self.step is not None:
            return step_notes(self.step, env)
        assert self.collective is not None  # a job is a step or a collective
        return collective_notes(self.collective, plan)


def _jobs(plan: Plan, options: MeasureOptions, *, cpu: bool) -> list[_Job]:
    jobs: list[_Job] = []
    if options.steps or options.vae:
        steps = step_targets(
            plan, top=options.top, baselines=options.baselines, vae=options.vae,
            steps=options.steps,
        )  # fmt: skip
        for t in steps:
            jobs.append(_Job(t.label, t.key, step_case(t, cpu=cpu), step=t))
    if options.collectives:
        targets = collective_targets(plan, sizes_bytes=options.sizes_bytes, kinds=options.kinds)
        for c in targets:
            jobs.append(_Job(c.label, c.key, collective_case(c, plan), collective=c))
    if not jobs:
        raise MeasureError(
            "nothing to measure: --no-steps without --collectives and without a VAE decode "
            "(the plan has no VAE plan, or --no-vae); add --collectives, e.g. "
            "--collectives --sizes 1MiB,16MiB"
        )
    return jobs


def _agreed(flags: Sequence[bool]) -> list[bool]:
    """Process 0's ``flags`` on every process (all run the same targets)."""
    if jax.process_count() == 1:
        return list(flags)
    from jax.experimental import multihost_utils

    values = multihost_utils.broadcast_one_to_all(np.asarray(flags, dtype=np.int32))
    return [bool(v) for v in np.asarray(values)]


def _slowest_process(timing: Timing) -> Timing:
    """Each repeat's time on the slowest process: the step ends when every host's part has."""
    if jax.process_count() == 1:
        return timing
    from jax.experimental import multihost_utils

    every = np.asarray(multihost_utils.process_allgather(np.asarray(timing.samples_s)))
    return dataclasses.replace(timing, samples_s=tuple(float(s) for s in every.max(axis=0)))


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}"


def _time_job(
    job: _Job,
    plan: Plan,
    devices: Sequence[Any],
    *,
    backend: str,
    options: MeasureOptions,
    workloads: dict[str, Workload],
    clock: Clock,
    say: Progress,
    profile: ProfileRequest | None = None,
) -> Timing:
    if job.step is not None:
        workload = workloads[job.step.plan.workload]  # built for every step target
        hbm = plan.slice.chip.per_device().memory_budget_bytes  # where the runtime reports no limit

        def fits(compiled: Any) -> None:
            check = check_memory(compiled, devices, backend=backend, hbm_bytes=hbm)
            say(f"memory: {check.summary()}")
            require_fit(check, backend=backend)

        return time_step(
            job.step, workload, devices, backend=backend, warmup=options.warmup,
            repeats=options.repeats, clock=clock, say=say, profile=profile, check=fits,
        )  # fmt: skip
    assert job.collective is not None
    mesh = plan_mesh(plan, devices, backend=backend)
    return time_collective(
        job.collective, mesh, warmup=options.warmup, repeats=options.repeats, clock=clock
    )


def _say_header(say: Progress, env: Environment, plan: Plan, jobs: Sequence[_Job]) -> None:
    dry = " (dry run on the host CPU)" if env.is_cpu else ""
    say(
        f"measure {env.plan_file} (sha256 {env.plan_sha256[:10]}): {plan.workload} on "
        f"{plan.slice_name}; {env.num_devices} {env.device_kind} devices on {env.num_hosts} "
        f"host(s){dry}; {sum(j.step is not None for j in jobs)} steps, "
        f"{sum(j.collective is not None for j in jobs)} collectives"
    )


def run_measure(
    plan_file: str | Path,
    out: str | Path,
    *,
    backend: str = "tpu",
    options: MeasureOptions = MeasureOptions(),
    devices: Sequence[Any] | None = None,
    clock: Clock = time.perf_counter,
    progress: Progress | None = None,
    today: str | None = None,
) -> MeasureReport:
    """Time ``plan_file``'s targets on ``devices`` (default: the backend's) into ``out``.

    Raises :class:`MeasureError` / :class:`~aoizora.errors.PlanError` before any device
    work when the plan, the devices or the output file do not fit (module docstring).
    """
    say = progress or (lambda _: None)
    plan = load_plan(plan_file)
    devs = list(devices) if devices is not None else backend_devices(backend, plan)
    env = current_environment(devs, backend=backend, plan_file=plan_file, today=today)
    plan, clip_note = dry_run_plan(plan, options.cpu_clip) if env.is_cpu else (plan, "")
    if clip_note:
        say(f"dry run: {clip_note}")
    plan_mesh(plan, devs, backend=backend)  # the devices are the plan's, before any work
    jobs = _jobs(plan, options, cpu=env.is_cpu)
    # Every program to time, built (and checked against the plan) before any device work.
    workloads = {
        j.step.plan.workload: plan_workload(j.step.plan) for j in jobs if j.step is not None
    }
    store = RowStore.open(out, cpu=env.is_cpu, restart=options.restart, writes=env.writes)
    held = [store.holds(plan.slice_name, j.case) for j in jobs]
    skip = _agreed([h is not None for h in held])
    _say_header(say, env, plan, jobs)
    measured: list[tuple[str, Measurement, float | None]] = []
    kept: list[tuple[str, str]] = []
    failed: list[tuple[str, str]] = []
    skipped: list[tuple[str, str]] = []
    profiles: list[tuple[str, ProfileRequest]] = []
    for i, (job, old) in enumerate(zip(jobs, held, strict=True), start=1):
        head = f"[{'step' if job.step else 'collective'} {i}/{len(jobs)}] {job.what}"
        if skip[i - 1]:
            kept.append((job.what, old.row_id if old is not None else "?"))
            say(f"{head}: already in {out} (row {kept[-1][1]}), kept")
            continue
        say(f"{head}: compiling and timing ...")
        request = _profile_request(job, env, out, options)
        try:
            timing = _time_job(
                job, plan, devs, backend=backend, options=options, workloads=workloads,
                clock=clock, say=functools.partial(_prefixed, say, head), profile=request,
            )  # fmt: skip
        except TargetTooLarge as exc:  # refused before it ran: the machine stays up
            skipped.append((job.what, str(exc)))
            say(f"{head}: SKIPPED: {exc}")
            continue
        except Exception as exc:  # this target only: the others are still worth measuring
            failed.append((job.what, _one_line(exc)))
            say(f"{head}: FAILED: {failed[-1][1]}")
            continue
        timing = _slowest_process(timing)
        row = measured_row(
            env=env, plan=plan, key=job.key, timing=timing,
            about="; ".join(t for t in (job.about(env, plan), clip_note) if t),
            step=job.case if isinstance(job.case, StepCase) else None,
            collective=job.case if isinstance(job.case, CollectiveCase) else None,
            step_kind=job.step.kind if job.step is not None else "step",
        )  # fmt: skip
        store.add(row)
        if request is not None:
            profiles.append((row.row_id, request))
        predicted = job.step.predicted_s if job.step is not None else None
        measured.append((job.what, row, predicted))
        how = job.step.plan.predicted.source if job.step is not None else ""
        say(f"{head}: {_format_timing(timing, predicted, how)} -> {row.row_id}")
    return MeasureReport(
        Path(out), env, tuple(measured), tuple(kept), tuple(failed), tuple(profiles),
        tuple(skipped),
    )  # fmt: skip


def profile_dir(out: str | Path) -> Path:
    """Where ``--profile`` saves traces beside the rows file: ``rows.csv`` -> ``rows.profiles/``."""
    path = Path(out)
    return path.with_name(path.stem + ".profiles")


def _profile_request(
    job: _Job, env: Environment, out: str | Path, options: MeasureOptions
) -> ProfileRequest | None:
    if options.profile_steps < 1 or job.step is None:
        return None
    stem = row_id(env, job.key)
    where = profile_dir(out)
    return ProfileRequest(
        where / f"{stem}.xplane.pb", where / f"{stem}.hlo.txt", options.profile_steps
    )


def _prefixed(say: Progress, head: str, message: str) -> None:
    say(f"{head}: {message}")


def _format_timing(timing: Timing, predicted_s: float | None, how: str = "simulated") -> str:
    std = "" if timing.std_s is None else f" +- {_seconds(timing.std_s)}"
    text = f"{_seconds(timing.mean_s)}{std} over {len(timing.samples_s)} repeats"
    if predicted_s is not None:
        text += f"; the plan predicts {_seconds(predicted_s)} ({how or 'simulated'})"
    return text


def _seconds(value: float) -> str:
    if value >= 1.0:
        return f"{value:.3f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.3f} ms"
    return f"{value * 1e6:.1f} us"
