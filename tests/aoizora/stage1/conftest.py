"""Fixtures of the Stage-1 tests: libtpu AOT devices of a v5e:2x4 slice, meshes over them."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

# Several test processes may load libtpu at once on this machine; without this
# the second one fails on libtpu's process lockfile (no TPU is ever opened).
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")


@pytest.fixture(scope="session")
def v5e_2x4_devices() -> list[Any]:
    from jax.experimental import topologies

    try:
        return list(topologies.get_topology_desc(topology_name="v5e:2x4", platform="tpu").devices)
    except Exception as e:  # noqa: BLE001 - libtpu raises several kinds
        pytest.skip(f"libtpu AOT topology v5e:2x4 unavailable: {e}")


@pytest.fixture(scope="session")
def tpu_mesh(v5e_2x4_devices: list[Any]) -> Callable[..., Any]:
    """``tpu_mesh(("data", "model"), (2, 4))`` -> an Auto-axes Mesh over the 8 chips."""
    from jax.sharding import AxisType, Mesh

    def make(names: tuple[str, ...], shape: tuple[int, ...]) -> Any:
        devices = np.array(v5e_2x4_devices).reshape(shape)
        return Mesh(devices, names, axis_types=(AxisType.Auto,) * len(names))

    return make
