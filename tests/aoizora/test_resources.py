"""The memory bound: the command's processes held to it, a crossing said in one line."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aoizora.errors import MemoryBoundExceeded, WorkloadError
from aoizora.fanout import fan_out
from aoizora.interrupts import phase
from aoizora.resources import MemoryBound, memory_bound, memory_guard, tree_rss_bytes

linux = pytest.mark.skipif(not os.path.isdir("/proc"), reason="the bound reads /proc")


def _hold(megabytes: int) -> int:
    """Allocate and touch ``megabytes`` in a worker, then wait for the watchdog."""
    block = bytearray(megabytes * 1_000_000)
    for i in range(0, len(block), 4096):
        block[i] = 1
    time.sleep(30)
    return len(block)


def _started(_: int) -> int:
    return os.getpid()


@linux
def test_a_worker_over_the_bound_is_killed_and_the_plan_says_which_phase() -> None:
    """A worker whose memory takes the tree over the bound is killed by the watchdog (in
    half a second, not the 30 s it would hold it) and the map ends in the bound's one
    line: the phase and its slice, what the processes held, the flag that raises it."""
    with fan_out(workers=2) as pool:
        pool.map(_started, [0, 1])  # both workers up: the bound is over what they hold idle
        bound = MemoryBound(tree_rss_bytes(os.getpid()) + 300_000_000, "a test's")
        start = time.monotonic()
        with (
            memory_guard(bound, prog="aoizora plan"),
            phase("Stage 1 on tpu7x:8x8x8"),
            pytest.raises(MemoryBoundExceeded) as got,
        ):
            pool.map(_hold, [0, 1_000])
    assert time.monotonic() - start < 20
    message = str(got.value)
    assert message.startswith("the memory bound was reached during Stage 1 on tpu7x:8x8x8")
    assert "--max-memory-gb GB raises it" in message and "a test's" in message
    assert "\n" not in message and got.value.exit_code == 3


def test_the_bound_comes_from_the_flag_or_the_machine() -> None:
    assert memory_bound(0) is None  # no bound
    eight = memory_bound(8)
    assert eight is not None and eight.limit_bytes == 8_000_000_000
    assert eight.source == "--max-memory-gb 8"
    with pytest.raises(WorkloadError, match=r"--max-memory-gb -1.0: must be a number of GB >= 0"):
        memory_bound(-1.0)
    default = memory_bound(None)
    if os.path.isdir("/proc"):
        assert default is not None and "80% of the" in default.source
        assert 0 < default.limit_bytes < 1e15


@linux
@pytest.mark.slow
def test_a_planner_over_its_bound_ends_in_one_line_with_exit_code_3(tmp_path: Path) -> None:
    """The planner's own process over the bound (0.3 GB: less than jax takes): the
    watchdog ends the command in one line naming the phase and the flag, exit code 3."""
    proc = subprocess.run(
        [sys.executable, "-m", "aoizora", "plan", "--model", "wan-tiny", "--resolution",
         "64x64", "--frames", "9", "--slice", "v5e:2x2", "--no-clip", "--quiet",
         "--max-memory-gb", "0.3", "--cache-dir", str(tmp_path / "cache"),
         "--out", str(tmp_path / "plan.json")],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr[-3000:]
    [line] = proc.stderr.splitlines()
    assert line.startswith("aoizora plan: error: the memory bound was reached during ")
    assert "of the 0.3 GB bound (--max-memory-gb 0.3); --max-memory-gb GB raises it" in line
    assert not (tmp_path / "plan.json").exists()
