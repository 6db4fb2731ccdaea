"""Test-wide settings: deterministic Hypothesis in CI, JAX kept on the CPU."""

from __future__ import annotations

import os
from collections import Counter

import pytest
from hypothesis import settings

from aoizora.cli import quiet_tpu_runtime_warning
from aoizora.software import PINNED, running_versions

# JAX must never try to grab an accelerator here; TPU programs are compiled
# ahead of time against libtpu topology descriptions, not run.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Eight host devices let CPU-backend tests build real multi-device meshes.
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    ).strip()
# The CPU programs the tests run are tiny; LLVM's optimisation of their machine code was
# most of their compile time (a VAE test: 25 s at the default level, 9 s at 0). The level
# is the CPU backend's alone: libtpu compiles the same HLO with it (test_bytes.py checks
# fresh TPU compiles byte for byte against a fixture the default level printed).
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0"
    ).strip()

# jax warns on a TPU VM without transparent hugepages when it starts, even on the CPU
# backend the tests keep it on; tests that read a child's stderr must not see it.
quiet_tpu_runtime_warning()

settings.register_profile("ci", derandomize=True, deadline=None, max_examples=100)
settings.register_profile("dev", deadline=None, max_examples=100)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


# Seconds the longest test modules took (pytest --durations, 2 workers, 7 December 2026).
# xdist hands a worker one module at a time in collection order (the Makefile turns off
# its reordering by test count, which put these few-test modules last): the longest go
# first, so that none starts last and leaves the other worker idle (longest processing
# time first); the rest follow, the most tests first. Only the order changes.
_LONGEST_MODULES_S = {
    "tests/aoizora/test_interrupts.py": 225, "tests/aoizora/test_fanout.py": 196,
    "tests/aoizora/test_vae_rank.py": 178, "tests/aoizora/test_rank.py": 126,
    "tests/aoizora/stage1/test_bytes.py": 94, "tests/aoizora/test_search_budget.py": 92,
    "tests/aoizora/stage1/test_wan.py": 90, "tests/aoizora/stage1/test_sweep.py": 84,
    "tests/aoizora/test_set_bounds.py": 74, "tests/test_packaging.py": 69,
    "tests/aoizora/test_workload_cli.py": 67, "tests/aoizora/test_fuzz_inputs.py": 64,
    "tests/aoizora/test_measure.py": 63, "tests/aoizora/workload/test_vae.py": 53,
    "tests/aoizora/test_validation.py": 48, "tests/aoizora/test_measure_vae.py": 43,
    "tests/aoizora/test_clip_cli.py": 38, "tests/aoizora/compute/test_async_copies.py": 37,
}  # fmt: skip


def _longest_modules_first(items: list[pytest.Item]) -> None:
    """Order ``items`` module by module: the known long modules first, then by test count
    (each module's tests stay together, in their order)."""
    modules = [item.nodeid.split("::")[0] for item in items]
    count = Counter(modules)
    first = {m: i for i, m in reversed(list(enumerate(modules)))}
    cost = {m: _LONGEST_MODULES_S.get(m, 0.0) for m in count}
    order = sorted(count, key=lambda m: (-cost[m], -count[m], first[m]))
    rank = {m: i for i, m in enumerate(order)}
    items.sort(key=lambda item: rank[item.nodeid.split("::")[0]])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Order the modules for the workers (:func:`_longest_modules_first`), and skip
    ``pinned_libtpu`` tests under another libtpu: they compare what the pinned libtpu
    compiles (collectives, group forms, predicted steps) with what we expect, and another
    release compiles another program (on a TPU VM whose libtpu is preinstalled)."""
    _longest_modules_first(items)
    running = running_versions().get("libtpu")
    if running is None or running == PINNED["libtpu"]:
        return
    skip = pytest.mark.skip(
        reason=f"checks the HLO libtpu {PINNED['libtpu']} (the pin) compiles; "
        f"libtpu {running} runs here"
    )
    for item in items:
        if "pinned_libtpu" in item.keywords:
            item.add_marker(skip)
