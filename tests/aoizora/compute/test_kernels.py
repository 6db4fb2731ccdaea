"""``aoizora measure --kernels`` on the host CPU: the suite's plumbing, not the TPU's rates.

Run in a child process, like the CPU capture of test_profile.py: creating jax's
ProfilerSession segfaults on some hosts, which must cost these tests, not the suite.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from aoizora.errors import MeasureError
from aoizora.measure.kernels import KERNEL_KINDS, KernelCase, kernel_cases
from tests.child_env import child_env

ROOT = Path(__file__).resolve().parents[3]

_RUN = """
import json, sys
from aoizora.measure.kernels import KernelCase, run_kernels
cases = (
    KernelCase("matmul", "matmul_m64_k128_n32", (("m", 64), ("k", 128), ("n", 32))),
    KernelCase("stream", "stream_size_bytes65536", (("size_bytes", 65536),)),
)
saved = []
results = run_kernels(cases, executions=2, on_result=lambda rs: saved.append(len(rs)))
print(json.dumps({"saved": saved, "results": [r.to_json_dict() for r in results]}))
"""


def test_two_cpu_kernels_are_timed_and_saved_after_each() -> None:
    env = child_env(JAX_PLATFORMS="cpu")
    done = subprocess.run(
        [sys.executable, "-c", _RUN],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=300, check=False,
    )  # fmt: skip
    if done.returncode < 0:
        pytest.skip(f"jax.profiler died of signal {-done.returncode} on this host")
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["saved"] == [1, 2]  # an interrupted run keeps what it timed
    for result in got["results"]:
        assert not result.get("error"), result
        samples = result["samples_s"]
        assert len(samples) == 2 and all(s > 0 for s in samples)


def test_the_suite_covers_every_kind_once_in_a_fixed_order() -> None:
    cases = kernel_cases()
    assert {c.kind for c in cases} == set(KERNEL_KINDS)
    assert len({c.name for c in cases}) == len(cases)
    assert kernel_cases() == cases
    assert all(isinstance(c, KernelCase) for c in kernel_cases(["attention"]))


def test_the_tile_sweep_asks_only_tiles_splash_accepts() -> None:
    """Every tile divides into 128-lane blocks and its compute block divides its kv block
    (splash's BlockSizes rule), the 512s are among them, and each shape meets every tile."""
    tiles = kernel_cases(["tile"])
    blocks = {(c.args["block_q"], c.args["block_kv"], c.args["block_kv_compute"]) for c in tiles}
    assert (512, 512, 512) in blocks
    assert all(b % 128 == 0 for t in blocks for b in t)
    assert all(kv % kvc == 0 for _, kv, kvc in blocks)
    shapes = {(c.args["heads"], c.args["q_length"]) for c in tiles}
    assert len(tiles) == len(shapes) * len(blocks)


def test_an_unknown_kind_is_refused_with_the_known_ones() -> None:
    with pytest.raises(MeasureError, match=r"unknown kinds \['matmull'\]; known: matmul"):
        kernel_cases(["matmull"])
