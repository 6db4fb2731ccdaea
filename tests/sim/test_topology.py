"""Chip data files, slice names, wrap-around rules, links and chip numbering."""

from __future__ import annotations

import math
import tomllib

import pytest

from sim.errors import TopologyError
from sim.topology import Link, generations, load_chip, load_slice, make_slice, topologies_dir


def expected_link_count(shape: tuple[int, ...], wrap: tuple[bool, ...]) -> int:
    """Directed links counted per dimension: lines of n chips have n-1 pairs (+1 if wrapped)."""
    total = 0
    for dim, n in enumerate(shape):
        lines = math.prod(shape) // n
        pairs = (n - 1) + (1 if wrap[dim] and n > 1 else 0)
        total += 2 * lines * pairs
    return total


def test_generations_have_data_with_a_source_beside_every_number() -> None:
    assert generations() == ("tpu7x", "v4", "v5e", "v5p", "v6e")
    for gen in generations():
        with (topologies_dir() / f"{gen}.toml").open("rb") as fh:
            data = tomllib.load(fh)
        numeric = [k for k, v in data.items() if isinstance(v, dict) and "value" in v]
        # devices_per_chip is optional (one device per chip when absent).
        assert len(numeric) == 9 + ("devices_per_chip" in data) + ("usable_hbm_bytes" in data), gen
        for key in numeric:
            assert data[key]["source"].strip(), (gen, key)
        assert data["wrap_rule"]["source"].strip()


def test_chip_numbers_match_facts() -> None:
    # docs/facts.md, TPU chips (scaling-book / Cloud docs).
    table = {
        "v5e": (1.97e14, 4.5e10, 4, 2),
        "v6e": (9.2e14, 9e10, 4, 2),
        "v4": (2.75e14, 4.5e10, 6, 3),
        "v5p": (4.59e14, 9e10, 6, 3),
        # Cloud TPU7x docs: 2307 TFLOPs bf16; 1200 GB/s bidirectional ICI over 6 ports.
        "tpu7x": (2.307e15, 1e11, 6, 3),
    }
    for gen, (flops, link_bw, ports, dims) in table.items():
        chip = load_chip(gen)
        assert chip.generation == gen
        assert chip.bf16_flops_per_s == flops
        assert chip.link_bandwidth_bytes_per_s == link_bw
        assert (chip.ports, chip.num_dims) == (ports, dims)
        assert chip.hop_latency_s == 1e-6
        assert chip.collective_overhead_s >= 0.0


@pytest.mark.parametrize(
    ("name", "shape", "wrap"),
    [
        ("v5e:2x4", (2, 4), (False, False)),
        ("v5e:4x4", (4, 4), (False, False)),
        ("v5e:8x16", (8, 16), (False, True)),
        ("v5e:16x16", (16, 16), (True, True)),
        ("v5e:6x6", (6, 6), (False, False)),
        ("v6e:16x8", (16, 8), (True, False)),
        ("v5p:2x2x4", (2, 2, 4), (False, False, False)),
        ("v5p:4x4x4", (4, 4, 4), (True, True, True)),
        ("v5p:4x4x8", (4, 4, 8), (True, True, True)),
        ("v4:2x4x4", (2, 4, 4), (False, False, False)),
        # MaxText accelerator_to_spec_map: tpu7x wraps only for whole 4x4x4 cubes.
        ("tpu7x:2x2x1", (2, 2, 1), (False, False, False)),
        ("tpu7x:2x4x4", (2, 4, 4), (False, False, False)),
        ("tpu7x:4x4x8", (4, 4, 8), (True, True, True)),
    ],
)
def test_load_slice_shapes_and_default_wrap(
    name: str, shape: tuple[int, ...], wrap: tuple[bool, ...]
) -> None:
    s = load_slice(name)
    assert (s.name, s.shape, s.wraparound) == (name, shape, wrap)
    assert s.num_chips == math.prod(shape) == len(s.coords) == len(set(s.coords))
    assert len(s.links) == expected_link_count(shape, wrap)
    assert sum(link.wrap for link in s.links) == sum(
        2 * (math.prod(shape) // n) for n, w in zip(shape, wrap, strict=True) if w
    )


def test_wrap_override_per_dimension_and_scalar() -> None:
    assert load_slice("v5e:4x4", wraparound=[True, False]).wraparound == (True, False)
    assert load_slice("v5e:8x16", wraparound=False).wraparound == (False, False)
    assert make_slice((4, 1), wraparound=True, link_bandwidth_bytes_per_s=1.0, hop_latency_s=0.0)
    # A length-1 axis has no self-loop wrap link.
    s = make_slice((4, 1), wraparound=True, link_bandwidth_bytes_per_s=1.0, hop_latency_s=0.0)
    assert s.wraparound == (True, False)
    assert len(s.links) == 8


def test_links_are_neighbour_pairs_one_per_direction() -> None:
    s = load_slice("v5e:16x16")
    seen = set()
    for link in s.links:
        diff = [(a - b) % n for a, b, n in zip(link.dst, link.src, s.shape, strict=True)]
        assert sorted(diff) == [0, 1] or sorted(diff) == [0, s.shape[link.dim] - 1]
        assert diff[link.dim] in (1, s.shape[link.dim] - 1)
        key = (link.src, link.dst, link.wrap)
        assert key not in seen
        seen.add(key)
        assert s.link_id(link) == s.links.index(link)
    # Every chip of a 16x16 torus has 4 outgoing and 4 incoming links (4 ports).
    outgoing = {c: 0 for c in s.coords}
    for link in s.links:
        outgoing[link.src] += 1
    assert set(outgoing.values()) == {load_chip("v5e").ports}


def test_length_two_wrap_gives_two_parallel_cables() -> None:
    s = make_slice([2], wraparound=True, link_bandwidth_bytes_per_s=1.0, hop_latency_s=0.0)
    assert sorted((lk.src, lk.dst, lk.wrap) for lk in s.links) == [
        ((0,), (1,), False),
        ((0,), (1,), True),
        ((1,), (0,), False),
        ((1,), (0,), True),
    ]


def test_physical_id_round_trip_x_fastest() -> None:
    s = load_slice("v5p:2x2x4")
    for pid, coord in enumerate(s.coords):
        assert s.physical_id(coord) == pid
        assert s.coord_of(pid) == coord
        x, y, z = coord
        assert pid == x + 2 * y + 4 * z
    with pytest.raises(TopologyError, match="0..15"):
        s.coord_of(16)
    with pytest.raises(TopologyError, match=r"\(2, 0, 0\)"):
        s.physical_id((2, 0, 0))


@pytest.mark.parametrize("name", ["v5e:2x4", "v5e:4x4", "v5p:2x2x2"])
def test_physical_ids_match_libtpu_device_ids(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Independent oracle: libtpu's own AOT topology numbers devices x fastest.
    # Other processes (test workers, the planner) may hold libtpu at the same
    # time; without this its process lockfile makes the load fail.
    monkeypatch.setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    topologies = pytest.importorskip("jax.experimental.topologies")
    desc = topologies.get_topology_desc(topology_name=name, platform="tpu")
    s = load_slice(name)
    for device in desc.devices:
        coord = tuple(device.coords[: s.num_dims])
        assert s.physical_id(coord) == device.id


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("v9:2x2", "valid generations: tpu7x, v4, v5e, v5p, v6e"),
        ("v5e", "must look like '<generation>:<shape>'"),
        ("v5e:2x", "malformed shape '2x'"),
        ("v5e:0x4", "malformed shape '0x4'"),
        ("v5e:2x2x2", "has 3 dimensions but v5e slices have 2"),
        ("v5p:2x4", "has 2 dimensions but v5p slices have 3"),
        ("v5e:32x2", "does not fit in a v5e pod (16x16)"),
    ],
)
def test_bad_slice_names_say_what_is_valid(name: str, fragment: str) -> None:
    with pytest.raises(TopologyError) as info:
        load_slice(name)
    assert fragment in str(info.value)


def test_bad_make_slice_inputs() -> None:
    with pytest.raises(TopologyError, match="positive integers"):
        make_slice([0, 4], link_bandwidth_bytes_per_s=1.0, hop_latency_s=0.0)
    with pytest.raises(TopologyError, match="needs link_bandwidth_bytes_per_s"):
        make_slice([4, 4])
    with pytest.raises(TopologyError, match="positive finite"):
        make_slice([4, 4], link_bandwidth_bytes_per_s=0.0, hop_latency_s=0.0)
    with pytest.raises(TopologyError, match="non-negative"):
        make_slice([4, 4], link_bandwidth_bytes_per_s=1.0, hop_latency_s=-1.0)
    with pytest.raises(TopologyError, match="one bool per dimension"):
        make_slice([4, 4], wraparound=[True], link_bandwidth_bytes_per_s=1.0, hop_latency_s=0.0)


def test_make_slice_with_chip_overrides_network_numbers_only() -> None:
    chip = load_chip("v5e")
    s = make_slice([32, 32], chip=chip, link_bandwidth_bytes_per_s=1e11, name="big")
    assert s.link_bandwidth_bytes_per_s == 1e11
    assert s.hop_latency_s == chip.hop_latency_s
    assert s.chip.bf16_flops_per_s == chip.bf16_flops_per_s
    assert s.name == "big"
    assert isinstance(s.links[0], Link)


def test_slices_are_values() -> None:
    a, b = load_slice("v5e:4x4"), load_slice("v5e:4x4")
    assert a == b and hash(a) == hash(b)
    assert a != load_slice("v5e:4x4", wraparound=True)


def test_devices_per_chip_split_the_chip_not_the_network() -> None:
    chip = load_chip("tpu7x")
    assert chip.devices_per_chip == 2
    assert all(load_chip(g).devices_per_chip == 1 for g in ("v4", "v5e", "v5p", "v6e"))
    dev = chip.per_device()
    assert dev.bf16_flops_per_s * 2 == chip.bf16_flops_per_s
    assert dev.hbm_bytes * 2 == chip.hbm_bytes
    assert dev.hbm_bandwidth_bytes_per_s * 2 == chip.hbm_bandwidth_bytes_per_s
    assert dev.link_bandwidth_bytes_per_s == chip.link_bandwidth_bytes_per_s
    s = load_slice("tpu7x:2x2x2")
    assert (s.num_chips, s.num_devices) == (8, 16)
    # Consecutive device ids share a chip; chip ids run x fastest.
    assert [s.device_coord(i) for i in range(16)] == [c for c in s.coords for _ in range(2)]
    with pytest.raises(TopologyError, match="0..15"):
        s.device_coord(16)
