"""What ``aoizora serve`` reads: rates, prices (shipped and overridden), traces, replica ranges."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from aoizora.commands.serve import parse_replicas
from aoizora.errors import ServingError
from aoizora.serving.prices import PRICES_FILE, load_prices
from aoizora.serving.rates import format_rate, parse_rate
from aoizora.serving.requests import RequestKind, read_trace, trace_rate_per_s
from aoizora.workloads.clip import Clip
from aoizora.workloads.wan_config import WAN_CONFIGS, model_clip
from sim.chips import generations


@pytest.mark.parametrize(
    ("text", "per_s"),
    [("2/min", 2 / 60), ("0.5/s", 0.5), ("30/h", 30 / 3600), ("1.5 / hour", 1.5 / 3600),
     ("120/minute", 2.0), ("1e2/h", 100 / 3600)],
)  # fmt: skip
def test_rates(text: str, per_s: float) -> None:
    assert parse_rate(text) == pytest.approx(per_s)
    assert parse_rate(format_rate(per_s)) == pytest.approx(per_s, rel=1e-3)


@pytest.mark.parametrize("text", ["2", "2/day", "-1/s", "0/min", "two/min", "2/min/h"])
def test_bad_rates_say_what_is_allowed(text: str) -> None:
    with pytest.raises(ServingError, match=r"e\.g\. 2/min"):
        parse_rate(text)


def test_shipped_prices_are_sourced_and_cover_the_served_generations() -> None:
    raw = tomllib.loads(PRICES_FILE.read_text(encoding="utf-8"))
    table = load_prices()
    for gen in ("v5e", "v6e", "tpu7x"):
        price = table.price(gen)
        assert price.usd_per_chip_hour > 0
        # A source names where the number was read, a basis what kind of price it is.
        assert re.search(r"https://|PR #\d+", raw[gen]["source"]), gen
        assert raw[gen]["basis"]
    assert set(raw) <= set(generations())
    # TPU7x has no Google list price: the table says its number is an estimate.
    assert "estimate" in table.price("tpu7x").basis


def test_a_prices_file_overrides_some_generations(tmp_path: Path) -> None:
    f = tmp_path / "p.toml"
    f.write_text('[v6e]\nusd_per_chip_hour = 1.5\nbasis = "negotiated"\n', encoding="utf-8")
    table = load_prices(f)
    assert table.price("v6e").usd_per_chip_hour == 1.5
    assert table.price("v6e").source == f"--prices {f}"
    assert table.price("v5e") == load_prices().price("v5e")  # the others stay
    assert table.slice_usd_per_hour("v6e", 8) == 12.0
    bad = tmp_path / "bad.toml"
    for text, needle in [("[v6e]\nusd_per_chip_hour = -1\n", "positive usd_per_chip_hour"),
                         ("[v6e]\nprice = 1\n", "positive usd_per_chip_hour"),
                         ("v6e = 1\n", "must be a table"), ("[v6e\n", "not valid TOML"),
                         ("", "names no generation")]:  # fmt: skip
        bad.write_text(text, encoding="utf-8")
        with pytest.raises(ServingError, match=needle):
            load_prices(bad)
    with pytest.raises(ServingError, match="cannot read prices file"):
        load_prices(tmp_path / "missing.toml")


def _kind_of(model: str, resolution: str, frames: int | None, steps: int | None) -> RequestKind:
    return RequestKind(model, model_clip(model, resolution, frames=frames),
                       steps or WAN_CONFIGS[model].sample_steps)  # fmt: skip


def test_trace_rows_defaults_and_order(tmp_path: Path) -> None:
    f = tmp_path / "t.csv"
    f.write_text(
        "arrival_s,model,resolution,frames,steps\n"
        "30.0,wan2.1-14b,720p,81,40\n"
        "0.0,,,,\n"
        "30.0,wan2.1-1.3b,480p,,\n",
        encoding="utf-8",
    )
    reqs = read_trace(f, kind_of=_kind_of, default_model="wan2.1-14b", default_resolution="480p")
    assert [r.arrival_s for r in reqs] == [0.0, 30.0, 30.0]  # sorted, ties in file order
    assert reqs[0].kind == RequestKind("wan2.1-14b", Clip(832, 480, 81), 50)
    assert reqs[1].kind == RequestKind("wan2.1-14b", Clip(1280, 720, 81), 40)
    assert reqs[2].kind.steps == 30  # wan2.1-1.3b's own default
    assert [r.id for r in reqs] == [0, 1, 2]
    assert trace_rate_per_s(reqs) == pytest.approx(2 / 30)


@pytest.mark.parametrize(
    ("text", "needle"),
    [("when,model\n1,x\n", "a trace has arrival_s"),
     ("arrival_s,model\nsoon,wan2.1-14b\n", "line 2: arrival_s 'soon' is not a number"),
     ("arrival_s,model,resolution\n1,wan9,720p\n", "line 2: unknown Wan model 'wan9'"),
     ("arrival_s,model,resolution,frames\n1,wan2.1-14b,720p,80\n", "line 2: clip frames 80"),
     ("arrival_s\n-1\n", "must be a time >= 0"),
     ("arrival_s\n1\n", "no model or resolution"),
     ("arrival_s,model,resolution\n", "has no requests")],
)  # fmt: skip
def test_bad_traces_name_the_line(text: str, needle: str, tmp_path: Path) -> None:
    f = tmp_path / "t.csv"
    f.write_text(text, encoding="utf-8")
    with pytest.raises(ServingError, match=re.escape(needle)):
        read_trace(f, kind_of=_kind_of)


def test_replica_ranges() -> None:
    assert parse_replicas("1-8") == (1, 8) and parse_replicas(" 4 ") == (4, 4)
    for bad in ("0-3", "5-2", "a-b", "1-", "1-999"):
        with pytest.raises(ServingError, match="MIN-MAX"):
            parse_replicas(bad)
