"""``python -m sim``: the JSON flow-replay command and the demo, via subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.flowfile import FlowFileError, _checked_flow, _plain_flow, format_output, replay
from sim.topology import make_slice

SPEC_EXAMPLE: dict[str, Any] = {
    "topology": {
        "shape": [4, 4],
        "wraparound": False,
        "link_bandwidth": 4.5e10,
        "hop_latency": 1e-6,
        "routing": "xy",
    },
    "flows": [
        {"id": "f0", "src": [0, 0], "dst": [3, 2], "bytes": 1e6, "start": 0.0, "after": ["f1"]},
        {"id": "f1", "src": [0, 0], "dst": [3, 0], "bytes": 1e6},
    ],
}


def run_sim(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sim", *args], capture_output=True, text=True, cwd=cwd, timeout=60
    )


def write(tmp_path: Path, doc: Any, name: str = "flows.json") -> Path:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc), encoding="utf-8")
    return path


def test_spec_example_prints_start_finish_and_makespan(tmp_path: Path) -> None:
    proc = run_sim("flows", str(write(tmp_path, SPEC_EXAMPLE)))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert set(out) == {"flows", "makespan"}
    assert list(out["flows"]) == ["f0", "f1"]
    # f1: 3 hops then 1e6 B at 4.5e10 B/s; f0 released when f1 finishes, 5 hops.
    f1_end = 3e-6 + 1e6 / 4.5e10
    assert out["flows"]["f1"] == {"start": 0.0, "finish": pytest.approx(f1_end, rel=1e-12)}
    assert out["flows"]["f0"]["start"] == pytest.approx(f1_end, rel=1e-12)
    assert out["flows"]["f0"]["finish"] == pytest.approx(f1_end + 5e-6 + 1e6 / 4.5e10, rel=1e-12)
    assert out["makespan"] == out["flows"]["f0"]["finish"]
    assert proc.stderr == ""


def test_out_file_and_named_slice_with_overrides(tmp_path: Path) -> None:
    doc = {
        "topology": {"slice": "v5e:4x4", "wraparound": [True, False], "routing": "yx"},
        "flows": [{"id": "a", "src": [0, 0], "dst": [3, 1], "bytes": 4.5e6}],
    }
    out_path = tmp_path / "result.json"
    proc = run_sim("flows", str(write(tmp_path, doc)), "--out", str(out_path))
    assert proc.returncode == 0 and proc.stdout == ""
    result = json.loads(out_path.read_text())
    # Wrapped x: 0 -> 3 is one hop backwards; plus one y hop: 2 us + 100 us.
    assert result["flows"]["a"]["finish"] == pytest.approx(2e-6 + 1e-4, rel=1e-12)
    assert replay(doc) == result


def test_same_input_same_bytes(tmp_path: Path) -> None:
    path = write(tmp_path, SPEC_EXAMPLE)
    assert run_sim("flows", str(path)).stdout == run_sim("flows", str(path)).stdout


def _without(key: str) -> dict[str, Any]:
    doc = json.loads(json.dumps(SPEC_EXAMPLE))
    del doc["flows"][1][key]
    return doc


def _with_flow(**changes: Any) -> dict[str, Any]:
    doc = json.loads(json.dumps(SPEC_EXAMPLE))
    doc["flows"][1].update(changes)
    return doc


def _with_topology(**changes: Any) -> dict[str, Any]:
    doc = json.loads(json.dumps(SPEC_EXAMPLE))
    doc["topology"].update(changes)
    return doc


BAD_INPUTS: list[tuple[str, Any, str]] = [
    ("invalid json", '{"topology": ', "is not valid JSON"),
    ("not an object", "[1, 2]", "must be a JSON object"),
    ("missing flows", {"topology": SPEC_EXAMPLE["topology"]}, "missing top-level field 'flows'"),
    ("missing id", _without("id"), "missing field 'id'"),
    ("missing src", _without("src"), "missing field 'src'"),
    ("missing bytes", _without("bytes"), "missing field 'bytes'"),
    (
        "missing bandwidth",
        {"topology": {"shape": [2, 2], "hop_latency": 0}, "flows": []},
        "topology.link_bandwidth is missing",
    ),
    ("unknown after", _with_flow(after=["nope"]), "unknown id 'nope'"),
    ("outside mesh", _with_flow(dst=[4, 0]), "outside the mesh of shape [4, 4]"),
    ("wrong rank", _with_flow(dst=[1, 0, 0]), "outside the mesh"),
    ("negative bytes", _with_flow(bytes=-5), "bytes must be finite and >= 0"),
    ("string bytes", _with_flow(bytes="1e6"), "bytes must be a number"),
    ("negative start", _with_flow(start=-1), "start must be finite"),
    ("cycle", _with_flow(after=["f0"]), "dependency cycle"),
    ("duplicate id", _with_flow(id="f0"), "duplicate node id 'f0'"),
    ("unknown field", _with_flow(size=3), "unknown field 'size'"),
    ("bad routing", _with_topology(routing="xz"), "topology.routing must order the axes 'xy'"),
    ("bad wrap", _with_topology(wraparound=[True]), "one bool per dimension"),
    ("zero bandwidth", _with_topology(link_bandwidth=0), "link_bandwidth must be finite and > 0"),
    ("unknown slice", {"topology": {"slice": "v7x:2x2"}, "flows": []}, "valid generations"),
    ("bad shape", _with_topology(shape=[0, 4]), "positive integers"),
]


@pytest.mark.parametrize(("label", "doc", "fragment"), BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_exits_2_with_one_line(
    tmp_path: Path, label: str, doc: Any, fragment: str
) -> None:
    proc = run_sim("flows", str(write(tmp_path, doc)))
    assert proc.returncode == 2, (label, proc.stdout)
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("python -m sim: error: ")
    assert fragment in lines[0]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("flows", "/definitely/not/here.json"), "does not exist"),
        (("flows",), "the following arguments are required: file"),
        (("bogus",), "invalid choice: 'bogus'"),
        ((), "required: command"),
    ],
)
def test_usage_errors_exit_2_with_one_line(args: tuple[str, ...], fragment: str) -> None:
    proc = run_sim(*args)
    assert proc.returncode == 2
    assert len(proc.stderr.splitlines()) == 1 and fragment in proc.stderr


def test_directory_as_file(tmp_path: Path) -> None:
    proc = run_sim("flows", str(tmp_path))
    assert proc.returncode == 2 and "is a directory" in proc.stderr


def test_demo_shows_placement_changes_time() -> None:
    proc = run_sim("demo")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    times = [float(line.split("time=")[1].split()[0]) for line in lines if "time=" in line]
    assert len(times) == 2 and times[0] > times[1] > 0


_JSON_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 5),
    st.integers(2**53 - 1, 2**53 + 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=2),
    st.lists(st.integers(-1, 4), max_size=3),
    st.lists(st.text(max_size=2), max_size=2),
    st.lists(st.floats(0, 3), max_size=2),
)


@st.composite
def flow_items(draw: st.DrawFn) -> Any:
    """Flow objects, mostly valid, some with a wrong, missing or extra field."""
    item: dict[str, Any] = {
        "id": draw(st.sampled_from(["f", "g7", ""])),
        "src": draw(st.lists(st.integers(0, 3), min_size=2, max_size=2)),
        "dst": draw(st.lists(st.integers(0, 3), min_size=2, max_size=2)),
        "bytes": draw(st.one_of(st.floats(0, 1e9), st.integers(0, 10**6))),
    }
    if draw(st.booleans()):
        item["start"] = draw(st.one_of(st.floats(0, 1.0), st.integers(0, 3)))
    if draw(st.booleans()):
        item["after"] = draw(st.lists(st.sampled_from(["a", "b"]), max_size=2))
    for _ in range(draw(st.integers(0, 2))):
        key = draw(st.sampled_from(["id", "src", "dst", "bytes", "start", "after", "zz"]))
        if draw(st.booleans()):
            item[key] = draw(_JSON_VALUES)
        else:
            item.pop(key, None)
    return draw(st.sampled_from([item, item, item, [item], "flow"]))


@settings(max_examples=400, deadline=None)
@given(flow_items())
def test_plain_flows_are_what_the_field_checks_accept(item: Any) -> None:
    # The fast path of parse_flow_document takes only what the field-by-field
    # checks accept, and builds the same Flow; everything else (errors
    # included) goes the checked way.
    s = make_slice([4, 4], link_bandwidth_bytes_per_s=1.0, hop_latency_s=0.0)
    quick = _plain_flow(item, s.shape)
    try:
        checked = _checked_flow(item, 0, s)
    except FlowFileError:
        assert quick is None
        return
    assert quick is None or quick == checked
    if quick is not None:
        assert [type(c) for c in (*quick.src, *quick.dst)] == [int] * 4
        assert type(quick.size_bytes) is float and type(quick.start_s) is float


# Times in replay's key order ("start" then "finish"); any floats, NaN and
# infinities included, and any ids (quotes, control and non-ASCII characters).
_TIMES = st.tuples(st.floats(), st.floats()).map(lambda t: {"start": t[0], "finish": t[1]})


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=6), _TIMES, max_size=5), st.floats())
def test_output_text_is_json_dumps_indent_2(flows: dict[str, Any], makespan: float) -> None:
    output = {"flows": flows, "makespan": makespan}
    assert format_output(output) == json.dumps(output, indent=2) + "\n"


def test_output_text_of_a_replay_is_json_dumps_indent_2() -> None:
    output = replay(SPEC_EXAMPLE)
    assert output["flows"]
    assert format_output(output) == json.dumps(output, indent=2) + "\n"
