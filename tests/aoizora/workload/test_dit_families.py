"""The DiT families of examples/ measured on a v5e chip besides examples/dit_block.py:
``cross_dit.py`` (validation/v5e/heldout4) and ``rope_dit.py`` (heldout6, heldout7). Each
one's CI-size factory plans on v5e:1x1 with XLA attention, and each measured plan names a
spec that still builds the program it was planned from (what ``aoizora measure`` checks)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aoizora.planner import run_plan
from aoizora.workloads.factory import load_workload
from sim.topology import load_slice

ROOT = Path(__file__).resolve().parents[3]
V5E = ROOT / "validation" / "v5e"
PLANS = sorted(
    [*(V5E / "heldout4" / "plans").glob("xdit-*.json")]
    + [
        p
        for folder in ("heldout6", "heldout7")
        for p in (V5E / folder / "plans").glob("rdit-*.json")
    ]
)


@pytest.mark.parametrize("example", ["cross_dit", "rope_dit"])
def test_the_small_factory_plans_with_xla_attention(
    example: str, plan_cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rope_dit.py runs its layers under jax.lax.scan: a loop in the compiled step."""
    monkeypatch.chdir(ROOT)  # a --workload spec is a path from the current directory
    workload = load_workload(f"examples/{example}.py:make_small")
    outcome = run_plan(workload, load_slice("v5e:1x1"), cache_dir=str(plan_cache_dir))
    assert outcome.winner.candidate.splash_blocks is None  # no Pallas kernel in the step
    memory = outcome.winner.compile.memory
    assert memory is not None and memory.argument_bytes > 0
    assert 0 < outcome.winner_q2_s < 1e-2


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: f"{p.parent.parent.name}-{p.stem}")
def test_the_measured_plans_name_the_program_that_ran(
    plan: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    data = json.loads(plan.read_text())
    source = data["workload_source"]
    workload = load_workload(source["spec"])
    assert workload.name == data["workload"]
    assert workload.program_fingerprint == source["program"]
