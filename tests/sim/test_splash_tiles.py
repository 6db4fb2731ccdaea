"""A generation's measured splash tiles (sim/splash_tiles.py) and how the compute model
prices a call at a tile: the 512 tile keeps the price it was fitted at, a measured tile
costs that price times the sweep's ratio, the VMEM rule refuses what holds a failed tile,
and a malformed table is refused with the entry, the rule and an example."""

from __future__ import annotations

import dataclasses
import itertools
import math
from pathlib import Path
from typing import Any

import pytest

from sim.chips import load_chip
from sim.compute import Attention, compute_model_of
from sim.compute_table import parse_compute_params
from sim.errors import TopologyError
from sim.splash_tiles import BASE_TILE, SplashTiles, parse_splash_tiles, tile_problem
from tests.sim.tables import compute_table

V5E = load_chip("v5e")
TILES = V5E.compute.splash_tiles


def _call(lead: int, sq: int, skv: int, tile: tuple[int, int, int]) -> Attention:
    bq, bkv, bkvc = tile
    return Attention(lead, math.ceil(sq / bq) * bq, math.ceil(skv / bkv) * bkv, 128, 128,
                     block_q=bq, block_kv=bkv, kernel="splash", block_kv_compute=bkvc)  # fmt: skip


def test_v5e_ships_a_sourced_table_with_the_512_tile() -> None:
    assert TILES is not None and TILES.kernel == "splash"
    assert BASE_TILE in TILES.plannable()
    assert "measure --kernels tile" in TILES.source
    assert ("compute.splash_tiles", TILES.source) in V5E.compute.sources
    # What failed to compile on the chip is never plannable, nor anything holding it.
    for bad in TILES.failed:
        assert bad not in TILES.plannable()
        assert not TILES.fits_vmem(tuple(b * 2 for b in bad))  # type: ignore[arg-type]


@pytest.mark.parametrize("lead,length", [(12, 9360), (24, 8190), (12, 32760), (40, 75600)])
def test_the_512_tile_keeps_its_price_and_others_scale_by_the_sweep(lead: int, length: int) -> None:
    # the table alone (a generation without the kernel's model prices tiles by it)
    full = compute_model_of(V5E)
    with_table = dataclasses.replace(
        full, params=dataclasses.replace(full.params, splash_kernel=None)
    )
    without = dataclasses.replace(
        with_table, params=dataclasses.replace(with_table.params, splash_tiles=None)
    )
    base = _call(lead, length, length, BASE_TILE)
    assert full.attention_s(base) == without.attention_s(base)  # 512: no model moves it
    assert with_table.attention_s(base) == without.attention_s(base)
    assert TILES is not None
    for tile in TILES.plannable():
        call = _call(lead, length, length, tile)
        # a tile's price: the 512 price at the call's lengths times the sweep's ratio
        # (each term written out from the table's own numbers)
        step = dict(((a, b, c), s) for a, b, c, s in TILES.compiled)
        q_blocks = lead * call.q_length // tile[0]  # the call's lengths are whole tiles
        sweep = q_blocks * (call.kv_length // tile[1]) * step[tile] + q_blocks * dict(
            TILES.q_block
        ).get(tile[0], 0.0)
        # the 512 kernel at the same (padded) lengths: whole 512 blocks, the last partial
        base_blocks = lead * math.ceil(call.q_length / 512)
        sweep_512 = base_blocks * math.ceil(call.kv_length / 512) * step[BASE_TILE]
        at_512 = dataclasses.replace(call, block_q=512, block_kv=512, block_kv_compute=512)
        share = 1 - sweep / sweep_512  # what the tile saves alone
        expected = without.attention_s(at_512) * (
            1 - TILES.step_gain * share if tile != BASE_TILE else 1
        )
        assert with_table.attention_s(call) == pytest.approx(expected, rel=1e-12)


def test_an_unmeasured_tile_is_priced_as_the_kernel_without_a_ratio() -> None:
    full = compute_model_of(V5E)  # the table alone, as above
    model = dataclasses.replace(full, params=dataclasses.replace(full.params, splash_kernel=None))
    call = _call(12, 9360, 9360, (384, 384, 384))
    bare = dataclasses.replace(model, params=dataclasses.replace(model.params, splash_tiles=None))
    assert model.attention_s(call) == bare.attention_s(call)


def test_the_vmem_rule_is_blockwise_domination() -> None:
    t = SplashTiles("splash", ((512, 512, 512, 1e-6),), (), ((1024, 4096, 512),), "s")
    for tile in itertools.product((512, 1024, 2048, 4096), repeat=3):
        holds = all(a >= b for a, b in zip(tile, (1024, 4096, 512), strict=True))
        assert t.fits_vmem(tile) is not holds


def test_tile_problems_name_the_rule() -> None:
    assert tile_problem((512, 2048, 512)) == ""
    assert "multiple of 128" in tile_problem((500, 512, 512))
    assert "three integers" in tile_problem((512, 512))
    assert "must divide block_kv 1024" in tile_problem((512, 1024, 768))
    assert "multiple of 128" in tile_problem((True, 512, 512))


def _table(**change: Any) -> dict[str, Any]:
    good: dict[str, Any] = {
        "kernel": "splash",
        "compiled": [[512, 512, 512, 1e-6], [512, 2048, 512, 3e-6]],
        "q_block": [[512, 0.0]],
        "failed": [[2048, 2048, 2048]],
        "source": "measured",
    }
    return {**good, **change}


def test_the_table_is_parsed_and_checked(tmp_path: Path) -> None:
    path = tmp_path / "g.toml"
    sources: list[tuple[str, str]] = []
    t = parse_splash_tiles(_table(), ("splash",), path, sources)
    assert t is not None and t.plannable() == ((512, 512, 512), (512, 2048, 512))
    assert sources == [("compute.splash_tiles", "measured")]
    assert parse_splash_tiles(None, ("splash",), path, []) is None
    bad = [
        (_table(kernel="flash"), "has no attention efficiency"),
        (_table(compiled=[[512, 2048, 512, 3e-6]]), "must measure the 512 tile"),
        (
            _table(compiled=[[512, 512, 512]]),
            r"must be \[block_q, block_kv, block_kv_compute, step_s\]",
        ),
        (_table(compiled=[[512, 512, 512, -1.0]]), "step_s"),
        (_table(q_block=[[512]]), r"\[block_q, q_block_s\]"),
        (_table(failed=[[0, 512, 512]]), "e.g. \\[2048, 2048, 2048\\]"),
        ({k: v for k, v in _table().items() if k != "source"}, "must hold compiled"),
        (_table(step_gain=0), "step_gain = 0 must be a number in"),
    ]
    for table, message in bad:
        with pytest.raises(TopologyError, match=message):
            parse_splash_tiles(table, ("splash",), path, [])


def test_a_compute_table_carries_its_tiles(tmp_path: Path) -> None:
    params = parse_compute_params(compute_table(splash_tiles=_table()), tmp_path / "g.toml")
    assert params.splash_tiles is not None
    # the tiles are part of what a cached prediction depends on
    assert params.key() != dataclasses.replace(params, splash_tiles=None).key()
