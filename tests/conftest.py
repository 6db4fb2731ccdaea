"""Test-wide settings: deterministic Hypothesis in CI, JAX kept on the CPU."""

from __future__ import annotations

import os

from hypothesis import settings

# JAX must never try to grab an accelerator here; TPU programs are compiled
# ahead of time against libtpu topology descriptions, not run.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Eight host devices let CPU-backend tests build real multi-device meshes.
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    ).strip()

settings.register_profile("ci", derandomize=True, deadline=None, max_examples=100)
settings.register_profile("dev", deadline=None, max_examples=100)
settings.load_profile("ci" if os.environ.get("CI") else "dev")
