"""``aoizora hlo``: the table, the exact JSON keys, orders and errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aoizora.cli import main
from tests.aoizora.hlo import compiled

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def hlo_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("hlo") / "kinds.hlo"
    path.write_text(compiled.kinds_tpu().text)
    return path


def test_json_has_exactly_the_documented_keys(
    hlo_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["hlo", str(hlo_file), "--slice", "v5e:2x4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out) == ["num_partitions", "collectives", "step_time_s"]
    assert out["num_partitions"] == 8 and out["step_time_s"] > 0
    for entry in out["collectives"]:
        if entry["kind"] == "collective-permute":
            assert list(entry) == ["kind", "pairs", "bytes_per_device", "count"]
        else:
            assert list(entry) == ["kind", "groups", "bytes_per_device", "count"]
    kinds = sorted(e["kind"] for e in out["collectives"])
    assert kinds == sorted(
        ["all-gather", "all-reduce", "all-reduce", "all-to-all", "collective-permute"]
    )
    gather = next(e for e in out["collectives"] if e["kind"] == "all-gather")
    assert gather["groups"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert gather["bytes_per_device"] == 4 * compiled.SHARD_BYTES and gather["count"] == 1


def test_order_changes_the_time_and_the_table_prints(
    hlo_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["hlo", str(hlo_file), "--slice", "v5e:2x4", "--json"])
    identity = json.loads(capsys.readouterr().out)["step_time_s"]
    main(["hlo", str(hlo_file), "--slice", "v5e:2x4", "--json", "--order", "0,7,2,5,4,3,6,1"])
    scattered = json.loads(capsys.readouterr().out)["step_time_s"]
    assert scattered != identity
    assert main(["hlo", str(hlo_file), "--slice", "v5e:2x4"]) == 0
    table = capsys.readouterr().out
    assert "collective-permute" in table and "simulated step time:" in table


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--slice", "v5e:2x2"], "runs on 8 devices"),
        (["--slice", "v5e:2x4", "--order", "0,1,2"], "not a permutation"),
        (["--slice", "v5e:2x4", "--order", "a,b"], "comma-separated"),
    ],
)
def test_errors_exit_2(
    hlo_file: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(["hlo", str(hlo_file), *argv]) == 2
    assert message in capsys.readouterr().err


def test_bad_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.hlo"
    bad.write_text("HloModule m\n\nENTRY %e {\n  %p = f32[2] parameter(0)\n")
    assert main(["hlo", str(bad), "--slice", "v5e:2x4"]) == 2
    assert "line 3" in capsys.readouterr().err
    assert main(["hlo", str(tmp_path / "missing.hlo"), "--slice", "v5e:2x4"]) == 2
