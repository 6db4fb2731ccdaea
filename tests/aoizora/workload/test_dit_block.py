"""examples/dit_block.py, the DiT block whose steps were timed on a v5e chip
(validation/v5e/workloads): its CI-size factory plans on v5e:1x1, and its compiled softmax
holds the whole-row reduce-window the compute model prices as one reduce."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from aoizora.hlo.compute import CostModel, window_taps
from aoizora.hlo.text import parse_module
from aoizora.planner import run_plan
from aoizora.workloads.factory import load_workload
from sim.topology import load_slice

ROOT = Path(__file__).resolve().parents[3]


def test_the_small_dit_block_plans_and_its_softmax_is_one_reduce(
    plan_cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)  # a --workload spec is a path from the current directory
    workload = load_workload("examples/dit_block.py:make_small")
    assert os.path.exists(ROOT / "examples" / "dit_block.py")
    outcome = run_plan(workload, load_slice("v5e:1x1"), cache_dir=str(plan_cache_dir))
    assert outcome.winner.candidate.splash_blocks is None  # XLA attention: no splash tile
    module = parse_module(outcome.winner.compile.hlo_text)
    windows = [i for c in module.computations.values() for i in c.instructions
               if i.opcode == "reduce-window"]  # fmt: skip
    assert windows and all(window_taps(i) == 1 for i in windows)
    rows = [r for c in module.computations.values() for i in c.instructions
            for r in CostModel(module).instruction(c, i).row_windows
            if c.is_entry]  # fmt: skip
    assert rows and all(n == 128 for n, _ in rows)  # the block's 128 tokens
    assert 0 < outcome.winner_q2_s < 1e-3
