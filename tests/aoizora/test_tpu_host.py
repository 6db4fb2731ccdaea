"""On a TPU VM a slice is described as on a laptop: libtpu is given the host block it needs.

libtpu's AOT topology defaults follow the attached TPU host on a TPU VM: there a one-chip
v5e host refused ``v5e:1x1`` ("not divisible by the given (or default)
chips_per_host_bounds 2x2x1", issue 34). aoizora.tpu passes ``chips_per_host_bounds``
itself (the 2x2x1 host block clipped to the slice). Here, on a machine without a TPU,
(1) those bounds describe exactly the devices libtpu's defaults describe for every slice
the tests use, and (2) a libtpu that defaults to a 2x2x1 host, as the TPU VM's did, still
describes every slice through aoizora.tpu.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from aoizora import tpu
from aoizora.cli import DEVICE_COMMANDS, keep_off_accelerators
from aoizora.tpu import chips_per_host_bounds, on_tpu_vm, slice_backend, topology_devices
from sim.topology import load_slice

# Slices the test suite describes with libtpu, and the one-chip slices of issue 34 (not v4:
# libtpu gives two devices a v4 chip, topologies/v4.toml one, which aoizora.tpu refuses).
SLICES = (
    "v5e:1x1", "v5e:2x1", "v5e:1x2", "v5e:2x2", "v5e:2x4", "v5e:4x4", "v5e:1x8", "v5e:2x16",
    "v5e:8x8", "v5e:16x16", "v6e:1x1", "v6e:2x2", "v6e:2x4", "v6e:2x6", "v5p:2x2x2",
    "v5p:2x2x4", "tpu7x:2x2x1", "tpu7x:2x2x2", "tpu7x:1x1x1",
)  # fmt: skip

needs_libtpu = pytest.mark.skipif(
    slice_backend(load_slice("v5e:2x2")) != "tpu", reason="libtpu unavailable"
)


def _facts(devices: Any) -> list[tuple[int, tuple[int, ...], int, str]]:
    return [
        (int(d.id), tuple(d.coords), int(getattr(d, "core_on_chip", 0)), str(d.device_kind))
        for d in devices
    ]


def _defaults(name: str) -> Any:
    from jax.experimental import topologies

    return topologies.get_topology_desc(topology_name=name, platform="tpu").devices


def test_bounds_are_the_host_block_clipped_to_the_slice() -> None:
    assert chips_per_host_bounds((1, 1)) == (1, 1, 1)
    assert chips_per_host_bounds((2, 1)) == (2, 1, 1)
    assert chips_per_host_bounds((2, 4)) == (2, 2, 1)
    assert chips_per_host_bounds((16, 16)) == (2, 2, 1)
    assert chips_per_host_bounds((2, 2, 4)) == (2, 2, 1)
    assert chips_per_host_bounds((1, 1, 1)) == (1, 1, 1)


@needs_libtpu
# On a TPU VM libtpu's defaults are the attached host's, so they are no oracle there.
@pytest.mark.skipif(on_tpu_vm(), reason="libtpu's defaults follow the attached TPU here")
@pytest.mark.parametrize("name", SLICES)
def test_described_devices_equal_libtpus_defaults(name: str) -> None:
    assert _facts(topology_devices(load_slice(name))) == _facts(_defaults(name))


@pytest.fixture
def tpu_host_defaults(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """libtpu as on a TPU VM with 2x2x1 chips per host: that block unless told otherwise."""
    from jax.experimental import topologies

    real = topologies.get_topology_desc

    def as_on_a_tpu_host(topology_name: str = "", platform: str | None = None, **kw: Any) -> Any:
        kw.setdefault("chips_per_host_bounds", [2, 2, 1])
        return real(topology_name=topology_name, platform=platform, **kw)

    monkeypatch.setattr(topologies, "get_topology_desc", as_on_a_tpu_host)
    tpu._devices.cache_clear()  # describe afresh under the host's defaults
    yield
    tpu._devices.cache_clear()  # later tests describe with the real defaults again


@needs_libtpu
def test_a_tpu_hosts_defaults_refuse_what_aoizora_describes(tpu_host_defaults: None) -> None:
    from jax.experimental import topologies

    with pytest.raises(Exception, match="not divisible by the given .or default. chips_per_host"):
        topologies.get_topology_desc(topology_name="v5e:1x1", platform="tpu")
    for name in ("v5e:1x1", "v5e:2x1", "v5e:1x8", "v5e:2x4", "tpu7x:1x1x1"):
        devices = topology_devices(load_slice(name))
        assert len(devices) == load_slice(name).num_devices
    assert _facts(topology_devices(load_slice("v5e:1x1"))) == [(0, (0, 0, 0), 0, "TPU v5 lite")]


def test_commands_that_run_nothing_on_devices_keep_jax_on_the_cpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for command in ("plan", "whatif", "validate", "calibrate", "serve", "export", "explain"):
        monkeypatch.delenv("JAX_PLATFORMS", raising=False)
        keep_off_accelerators(command)
        assert os.environ["JAX_PLATFORMS"] == "cpu", command
    monkeypatch.delenv("JAX_PLATFORMS")
    keep_off_accelerators("measure")  # measures on the TPU (or --backend cpu asks)
    assert "JAX_PLATFORMS" not in os.environ and DEVICE_COMMANDS == {"measure"}
    monkeypatch.setenv("JAX_PLATFORMS", "tpu,cpu")
    keep_off_accelerators("plan")  # the user's own choice stands
    assert os.environ["JAX_PLATFORMS"] == "tpu,cpu"
