"""Fan-out: a process pool and Ray give the serial run's results and the same plan file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from aoizora.errors import AoizoraError, WorkerDied
from aoizora.fanout import _exitcode, default_workers, fan_out
from aoizora.hlo.graph import graph_from_text
from aoizora.interrupts import phase
from aoizora.placement.space import PlacementSpace
from aoizora.planner import PlanOutcome, run_plan
from aoizora.rank.evaluate import BatchEvaluator, Program
from aoizora.rank.search import Leaf
from aoizora.report.summary import outcome_summary
from aoizora.workloads.wan import parse_resolution, wan_workload
from sim.topology import load_slice
from tests.child_env import child_env

CLIP = parse_resolution("256x256", frames=5)
MODEL = "wan-tiny"


def test_a_process_pool_returns_what_a_serial_run_returns() -> None:
    offset = 7  # a closure: travels by value (cloudpickle), as workloads do

    def work(x: int) -> tuple[int, int]:
        return (x + offset, os.getpid())

    with fan_out(workers=1) as serial, fan_out(workers=2) as pool:
        assert serial.label == "serial" and pool.label == "2 processes"
        one = serial.map(work, list(range(6)))
        many = pool.map(work, list(range(6)))
    assert [r for r, _ in one] == [r for r, _ in many] == [x + 7 for x in range(6)]
    assert {p for _, p in many} != {os.getpid()}  # ran elsewhere
    assert default_workers() >= 1


_POOL_WITHOUT_THE_COMPILED_CORE = """
from aoizora.fanout import fan_out
from sim.engine import Flow, simulate
from sim.topology import make_slice

def work(n: int) -> float:
    s = make_slice([3], link_bandwidth_bytes_per_s=1e9, hop_latency_s=1e-6)
    return simulate(s, [Flow("f", (0,), (2,), 1e6 * n)]).makespan_s

if __name__ == "__main__":  # spawned workers import this file too
    with fan_out(workers=2) as pool:
        print(pool.map(work, [1, 2, 3, 4]), work(1))
"""


def test_a_pool_without_the_compiled_core_says_so_once(tmp_path: Path) -> None:
    # No C compiler at install: the planner and every pool worker run sim's
    # pure-Python core, and the user reads one line about it, not one per process.
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['sim._flowcore'] = None\n")
    script = tmp_path / "pool.py"
    script.write_text(_POOL_WITHOUT_THE_COMPILED_CORE)
    env = child_env(tmp_path, drop=["SIM_CORE_FALLBACK_NOTED"])
    proc = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, check=True
    )
    assert proc.stdout.strip() == "[0.001002, 0.002002, 0.003002, 0.004002] 0.001002"
    [line] = proc.stderr.splitlines()
    assert line.startswith("sim: the compiled event core is unavailable") and "make core" in line


def test_bad_fan_out_arguments_are_errors() -> None:
    with pytest.raises(AoizoraError, match="positive integer"), fan_out(workers=0):
        pass


def _plan(cache: Path, shared: dict[str, Path], **fan: object) -> PlanOutcome:
    """Plan wan-tiny on v5e:2x2 into ``cache``, whose subfolders named in ``shared``
    are links to those folders (the rest start empty)."""
    cache.mkdir(parents=True, exist_ok=True)
    for name, folder in shared.items():
        folder.mkdir(parents=True, exist_ok=True)
        link = cache / name
        if not link.exists():
            link.symlink_to(folder, target_is_directory=True)
    return run_plan(
        wan_workload(MODEL, CLIP), load_slice("v5e:2x2"), top_k=2, cache_dir=str(cache), **fan
    )  # type: ignore[arg-type]


@pytest.mark.slow
def test_the_planner_on_ray_writes_the_serial_plan(plan_cache_dir: Path, tmp_path: Path) -> None:
    ray = pytest.importorskip("ray")  # make test installs the extra aoizora[ray]
    compiled = {"compiled": plan_cache_dir / "compiled"}
    # The serial reference reads Stage 1 (estimates, modules) from the session's cache,
    # which other wan-tiny plans on v5e:2x2 fill (keyed by the code, so never stale);
    # its replays and search start fresh, as Ray's do.
    session = {name: plan_cache_dir / name for name in ("stage1", "shardy")}
    serial = _plan(tmp_path / "serial", compiled | session, workers=1)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:  # Stage 1 from nothing: Ray workers lower every candidate
        on_ray = _plan(tmp_path / "ray", compiled, ray="local")
    finally:
        ray.shutdown()
    assert on_ray.search is not None and on_ray.search.fan_out.startswith("ray")
    assert serial.search is not None and serial.search.fan_out == "serial"
    # Fresh Q2 caches on both sides: the exact replays ran in Ray workers.
    assert on_ray.search.simulated == serial.search.simulated > 0
    assert (
        on_ray.plan(model=MODEL, clip=CLIP).to_json()
        == serial.plan(model=MODEL, clip=CLIP).to_json()
    )
    # The pool's workers score Stage 1 from the modules Ray's stored (lowering in pool
    # workers: stage1/test_sweep.py); its estimates, replays and search start fresh.
    pooled = _plan(tmp_path / "pool", compiled | {"shardy": tmp_path / "ray" / "shardy"}, workers=2)
    assert (
        pooled.plan(model=MODEL, clip=CLIP).to_json()
        == serial.plan(model=MODEL, clip=CLIP).to_json()
    )
    timings = outcome_summary(on_ray)["timings_s"]
    assert sorted(timings) == ["compile", "rank", "stage1", "total", "winner_compile"]


class _CountingPool:
    """A pool that records what it was asked to run (and runs it here)."""

    label = "2 processes"

    def __init__(self) -> None:
        self.items = 0

    def map(self, fn, items):  # type: ignore[no-untyped-def]
        self.items += len(items)
        return [fn(item) for item in items]


_HLO = """HloModule m, num_partitions=8
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %e (p: f32[262144]) -> f32[1048576] {
  %p = f32[262144]{0} parameter(0)
  %ar = f32[262144]{0} all-reduce(%p), replica_groups={{0,1},{2,3},{4,5},{6,7}}, to_apply=%add
  ROOT %ag = f32[1048576] all-gather(%ar), replica_groups={{0,2,4,6},{1,3,5,7}}, dimensions={0}
}"""


def test_the_evaluator_fans_out_only_batches_worth_a_worker() -> None:
    s = load_slice("v5e:2x4")
    program = Program(_HLO, graph_from_text(_HLO), (4, 2))
    space = PlacementSpace((4, 2), s)
    leaves = [Leaf(0, space.label(n), space.physical_ids(n), space.complexity(n))
              for n in space.leaves()][:6]  # fmt: skip
    assert len(leaves) == 6
    serial = BatchEvaluator([program], s)(leaves)
    cheap, eager = _CountingPool(), _CountingPool()
    assert BatchEvaluator([program], s, pool=cheap)(leaves) == serial  # type: ignore[arg-type]
    assert cheap.items == 0  # replays of a few ms each: not worth a worker's start
    got = BatchEvaluator([program], s, pool=eager, fanout_min_s=0.0)(leaves)  # type: ignore[arg-type]
    assert got == serial
    assert eager.items == len(leaves) - 1  # the first replay, here, timed the program


def _die_by_sigkill(x: int) -> int:
    if x == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return x


def _die_by_exit(x: int) -> int:
    if x == 1:
        os._exit(7)
    return x


def _run_out_of_memory(x: int) -> int:
    if x == 1:
        raise MemoryError
    return x


@pytest.mark.parametrize(
    ("task", "how"),
    [
        (_die_by_sigkill, "killed by SIGKILL (what the kernel's OOM killer sends"),
        (_die_by_exit, "exit status 7"),
        (_run_out_of_memory, "it ran out of memory (MemoryError)"),
    ],
)
def test_a_worker_that_dies_is_one_error_naming_the_phase_and_how(
    task: Callable[[int], int], how: str
) -> None:
    """A pool worker killed by a signal (the OOM killer's SIGKILL), exiting, or raising
    MemoryError ends the map in a WorkerDied (exit code 3 in the CLI) that names the
    phase (and so the slice), how the worker ended and what to change."""
    with (
        pytest.raises(WorkerDied) as got,
        phase("Stage 1 on v5p:8x8x8"),
        fan_out(workers=2) as pool,
    ):
        pool.map(task, [0, 1, 2, 3])
    message = str(got.value)
    assert message.startswith("a worker process died during Stage 1 on v5p:8x8x8: ")
    assert how in message and "--workers" in message and "\n" not in message
    assert got.value.exit_code == 3


class _ReapedElsewhere:
    """A dead worker as the broken pool's manager thread leaves it for a moment: that
    thread's ``waitpid`` reaped it, so ours read ``None`` until the thread stores the
    code (its first ``reads`` reads)."""

    def __init__(self, reads: int, code: int) -> None:
        self.reads, self.code, self.joins = reads, code, 0

    def join(self, timeout: float | None = None) -> None:
        self.joins += 1

    @property
    def exitcode(self) -> int | None:
        self.reads -= 1
        return None if self.reads >= 0 else self.code


def test_a_worker_reaped_by_the_pools_own_thread_still_gives_its_exit_code() -> None:
    """The race CI met: ``exit status 7`` read as ``None`` left only the SIGTERM the
    pool sent the other worker, and the error named the wrong death."""
    dead = _ReapedElsewhere(reads=3, code=7)
    assert _exitcode(dead, deadline_s=time.monotonic() + 2.0) == 7
    assert dead.joins == 1
    alive = _ReapedElsewhere(reads=10**9, code=0)
    started = time.monotonic()
    assert _exitcode(alive, deadline_s=started + 0.05) is None  # a live worker: the bound
    assert time.monotonic() - started < 1.0


# Loaded first by every Python process of the command (the planner and each spawned
# worker): a Stage-1 worker dies, as one the kernel's OOM killer ends or out of memory.
_DYING_WORKER = """
import os

if os.environ.get("AOIZORA_TEST_WORKER_DIES"):
    import aoizora.stage1.sweep as _sweep

    _real = _sweep._score_chunk

    def _dying(task):
        import multiprocessing
        import signal

        if multiprocessing.parent_process() is not None:  # a pool worker, not the planner
            if os.environ["AOIZORA_TEST_WORKER_DIES"] == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise MemoryError
        return _real(task)

    _sweep._score_chunk = _dying
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "how"),
    [("sigkill", "killed by SIGKILL (what the kernel's OOM killer"), ("memory", "MemoryError")],
)
def test_a_plan_whose_worker_dies_ends_in_one_line_with_exit_code_3(
    mode: str, how: str, tmp_path: Path
) -> None:
    (tmp_path / "sitecustomize.py").write_text(_DYING_WORKER)
    env = child_env(tmp_path, AOIZORA_TEST_WORKER_DIES=mode)
    proc = subprocess.run(
        [sys.executable, "-m", "aoizora", "plan", "--model", MODEL, "--resolution", "64x64",
         "--frames", "9", "--slice", "v5e:2x2", "--no-clip", "--workers", "2", "--quiet",
         "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "plan.json")],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr[-3000:]
    [line] = proc.stderr.splitlines()
    assert line.startswith("aoizora plan: error: a worker process died during Stage 1 on v5e:2x2")
    assert how in line and "--workers" in line and "a rerun resumes" in line
    assert not (tmp_path / "plan.json").exists()


def test_a_memory_error_in_the_planner_itself_is_one_line_naming_the_phase(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import aoizora.planner
    from aoizora.cli import main

    def out_of_memory(*_args: object, **_kwargs: object) -> None:
        with phase("the placement search on v5e:2x2"):
            raise MemoryError

    monkeypatch.setattr(aoizora.planner, "run_plan", out_of_memory)
    code = main(["plan", "--model", MODEL, "--resolution", "64x64", "--frames", "9",
                 "--slice", "v5e:2x2", "--no-clip", "--quiet"])  # fmt: skip
    [line] = capsys.readouterr().err.splitlines()
    assert code == 3
    assert line.startswith(
        "aoizora plan: error: out of memory during the placement search on v5e:2x2"
    )
