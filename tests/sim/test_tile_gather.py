"""A reshape gathering 8-row tiles out of 2-row ones moves at its own measured rates
(sim.tile_gather; validation/README.md, section 17)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from sim.compute import ComputeModel, ComputeParams, Work
from sim.compute_table import parse_compute_params
from sim.errors import TopologyError
from sim.tile_gather import TileGather, parse_tile_gather
from sim.topology import load_chip
from tests.sim.tables import compute_table


def _table(**change: Any) -> dict[str, Any]:
    good = {"from_hbm": [3.0e11, 5.5e11], "from_vmem": [2.2e11, 3.5e11], "source": "measured"}
    return {**good, **change}


def test_each_gather_moves_at_its_group_rate_and_the_rest_as_before() -> None:
    gather = TileGather((3.0e11, 5.5e11), (2.2e11, 3.5e11), "measured")
    model = ComputeModel(1e15, 1e12, ComputeParams(hbm_efficiency=0.5, tile_gather=gather))
    # 1e8 HBM bytes streamed at 0.5 of 1e12, 2e8 gathered from HBM (aligned) at 5.5e11,
    # 4.4e7 gathered from VMEM (unaligned) at 2.2e11
    work = Work(hbm_bytes=3.44e8, tile_gathers=((False, True, 2e8), (True, False, 4.4e7)))
    assert model.hbm_s(work) == pytest.approx(1e8 / 5e11 + 2e8 / 5.5e11 + 4.4e7 / 2.2e11)
    # without the table the same bytes stream as any HBM pass
    plain = dataclasses.replace(model, params=ComputeParams(hbm_efficiency=0.5))
    assert plain.hbm_s(work) == pytest.approx(3.44e8 / 5e11)
    # gathers add up as kernels fuse
    assert (work + work).tile_gathers == work.tile_gathers * 2


def test_v5e_ships_a_sourced_table_slower_than_its_stream() -> None:
    chip = load_chip("v5e")
    gather = chip.compute.tile_gather
    assert gather is not None and "validation/v5e/upsample" in gather.source
    stream = chip.compute_model().hbm_bandwidth_bytes_per_s * chip.compute.hbm_efficiency
    rates = gather.from_hbm + gather.from_vmem
    assert all(rate < stream for rate in rates)  # every group measured below the stream
    assert gather.from_hbm[1] > gather.from_hbm[0] and gather.from_vmem[1] > gather.from_vmem[0]
    # generations without a measurement price it as a stream
    assert load_chip("v6e").compute.tile_gather is None


def test_the_table_is_parsed_and_checked(tmp_path: Path) -> None:
    path = tmp_path / "g.toml"
    sources: list[tuple[str, str]] = []
    t = parse_tile_gather(_table(), path, sources)
    assert t == TileGather((3.0e11, 5.5e11), (2.2e11, 3.5e11), "measured")
    assert sources == [("compute.tile_gather", "measured")]
    assert parse_tile_gather(None, path, []) is None
    bad = [
        (_table(from_hbm=[3.0e11]), r"from_hbm = \[300000000000.0\] must be two rates > 0"),
        (_table(from_vmem=[0, 3.5e11]), r"from_vmem = .* e\.g\. \[3\.0e11, 5\.5e11\]"),
        (_table(from_hbm=[True, 1.0]), "must be two rates"),
        (_table(from_hbm="fast"), "must be two rates"),
        ({"from_hbm": [1.0, 2.0], "source": "s"}, r"must hold exactly from_hbm, from_vmem"),
        ("fast", r"got str"),
    ]
    for table, message in bad:
        with pytest.raises(TopologyError, match=message):
            parse_tile_gather(table, path, [])


def test_a_compute_table_carries_its_gather_rates(tmp_path: Path) -> None:
    params = parse_compute_params(compute_table(tile_gather=_table()), tmp_path / "g.toml")
    assert params.tile_gather is not None
    # the rates are part of what a cached prediction depends on
    assert params.key() != dataclasses.replace(params, tile_gather=None).key()
