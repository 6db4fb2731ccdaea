"""Test-wide settings: deterministic Hypothesis in CI, JAX kept on the CPU."""

from __future__ import annotations

import os

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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip ``pinned_libtpu`` tests under another libtpu: they compare what the pinned
    libtpu compiles (collectives, group forms, predicted steps) with what we expect, and
    another release compiles another program (on a TPU VM whose libtpu is preinstalled)."""
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
