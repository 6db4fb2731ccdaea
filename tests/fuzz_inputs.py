"""Fuzzing every file a user hands in, in-process, through each command's entry point.

Shared by ``tests/aoizora/test_fuzz_inputs.py`` (a small sample in CI) and
``benchmarks/fuzz_bench.py`` (at least 1,000 cases a format). A case is a real file
mutated by Hypothesis (:func:`mutated`: truncation, byte flips, deleted, duplicated
or swapped lines, numbers made huge, negative, NaN or infinite, tokens of the wrong
type), written to disk and handed to the command as a user would, with its output
captured and a time limit. Its outcome (:data:`OUTCOMES`):

``accepted``
    the command succeeded and the file round-trips: parsed, written by our own
    writer and parsed again, it gives the same value (HLO text has no writer of
    ours, the compiler writes it: parsing twice gives the same graph);
``rejected``
    exit code 2 (or the documented exception of a Python API: ``PlanError`` from
    ``load_plan``) with one line that names the file;
``skipped``
    a measurement file whose rows would compile (step rows): parsed only;
``traceback``, ``hang``, ``unclear``, ``no-round-trip``
    failures: an exception escaped, the time limit passed, the error was not one
    line naming the file, or the round trip changed the value.

``named_line`` counts the rejections whose line also names a line number.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import re
import shutil
import signal
import tomllib
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from hypothesis import strategies as st

from tests.sim.test_cli import SPEC_EXAMPLE

__all__ = [
    "OUTCOMES",
    "TARGETS",
    "Tally",
    "Target",
    "mutated",
    "run_case",
]

OUTCOMES = ("accepted", "rejected", "skipped", "traceback", "hang", "unclear", "no-round-trip")
FAILURES = ("traceback", "hang", "unclear", "no-round-trip")
TIME_LIMIT_S = 30.0
ROOT = Path(__file__).resolve().parent.parent
_NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_TOKEN = re.compile(rb"[A-Za-z_][A-Za-z0-9_.:-]*")
_ODD = (
    b"1e400",
    b"-1",
    b"0",
    b"NaN",
    b"nan",
    b"inf",
    b"-inf",
    b"1e308",
    b"1e-320",
    b"-0",
    b"99999999999999999999999999",
    b"3.5",
    b"1_000",
    b'"x"',
    b"true",
    b"null",
    b"[]",
    b"{}",
    b"",
    b" ",
    b",",
    b"\x00",
    b"\xff\xfe",
    b"\xe2\x82\xac",
    b"#",
)
_LINE_NUMBER = re.compile(r"(:\d+\b|\bline \d+|\blines? \d+)")


# -- mutations ----------------------------------------------------------------------


@st.composite
def mutated(draw: st.DrawFn, seed: bytes) -> bytes:
    """``seed`` with one to three mutations."""
    data = seed
    for _ in range(draw(st.integers(1, 3))):
        data = draw(_one_mutation(data))
    return data


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


@st.composite
def _one_mutation(draw: st.DrawFn, data: bytes) -> bytes:
    kind = draw(
        st.sampled_from(
            ["truncate", "flip", "delete", "duplicate", "swap", "number", "token", "insert"]
        )
    )
    n = max(len(data), 1)
    if kind == "truncate":
        return data[: draw(st.integers(0, n))]
    if kind == "flip":
        i = draw(st.integers(0, n - 1))
        return (
            data[:i]
            + bytes([(data[i : i + 1] or b"\0")[0] ^ draw(st.integers(1, 255))])
            + data[i + 1 :]
        )
    if kind == "insert":
        i = draw(st.integers(0, len(data)))
        return data[:i] + draw(st.sampled_from(_ODD) | st.binary(max_size=8)) + data[i:]
    lines = _lines(data)
    k = draw(st.integers(0, len(lines) - 1))
    if kind == "delete":
        return b"\n".join(lines[:k] + lines[k + 1 :])
    if kind == "duplicate":
        return b"\n".join(lines[: k + 1] + lines[k:])
    if kind == "swap":
        j = draw(st.integers(0, len(lines) - 1))
        lines[k], lines[j] = lines[j], lines[k]
        return b"\n".join(lines)
    regex = _NUMBER if kind == "number" else _TOKEN
    found = list(regex.finditer(data))
    if not found:
        return data
    m = found[draw(st.integers(0, len(found) - 1))]
    if kind == "number":
        new = draw(
            st.sampled_from(_ODD) | st.integers(-(10**30), 10**30).map(lambda v: str(v).encode())
        )
    else:
        others = [t.group() for t in found]
        new = draw(st.sampled_from(others) | st.sampled_from(_ODD))
    return data[: m.start()] + new + data[m.end() :]


# -- running one case ---------------------------------------------------------------


class _Hang(Exception):
    pass


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise _Hang()


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@dataclass
class Tally:
    """Outcomes per format, and a few examples of each failure."""

    counts: Counter[str] = field(default_factory=Counter)
    named_line: int = 0
    examples: dict[str, list[str]] = field(default_factory=dict)
    no_line: list[str] = field(default_factory=list)  # a few rejections without a line number

    def add(self, outcome: str, detail: str) -> None:
        self.counts[outcome] += 1
        if outcome == "rejected" and _LINE_NUMBER.search(detail):
            self.named_line += 1
        elif outcome == "rejected" and len(self.no_line) < 200:
            self.no_line.append(detail)
        if outcome in FAILURES:
            self.examples.setdefault(outcome, [])
            if len(self.examples[outcome]) < 3:
                self.examples[outcome].append(detail[-2000:])

    @property
    def failures(self) -> int:
        return sum(self.counts[o] for o in FAILURES)


@dataclass(frozen=True)
class Target:
    """One file format: its seeds (real files) and how a case runs."""

    name: str
    filename: str
    seeds: Callable[[], list[bytes]]
    run: Callable[[Path, Path], tuple[str, str]]  # (file, scratch dir) -> (outcome, detail)


def run_case(target: Target, data: bytes, scratch: Path, tally: Tally) -> str:
    """Write ``data`` as ``target``'s file, run it, count the outcome; returns it."""
    path = scratch / target.filename
    path.write_bytes(data)
    out, err = io.StringIO(), io.StringIO()
    try:
        with (
            _time_limit(TIME_LIMIT_S),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            outcome, detail = target.run(path, scratch)
    except _Hang:
        outcome, detail = "hang", f"over {TIME_LIMIT_S} s\n{data[:300]!r}"
    except (Exception, SystemExit, GeneratorExit):  # an escaped exception is the failure counted
        outcome, detail = "traceback", f"{traceback.format_exc()}\n{data[:300]!r}"
    tally.add(outcome, detail)
    return outcome


def _cli(code: int, err: str, path: Path) -> tuple[str, str] | None:
    """The outcome of a command that failed (``None``: it succeeded)."""
    if code == 0:
        return None
    lines = err.strip().splitlines()
    if code == 2 and len(lines) == 1 and path.name in lines[0]:
        return "rejected", lines[0]
    return "unclear", f"exit {code}: {err[-1500:]}"


@contextlib.contextmanager
def _captured() -> Iterator[io.StringIO]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        yield err


# -- measurement files (validate, calibrate) -----------------------------------------


def _csv_blocks(rows_per_block: int | None) -> list[bytes]:
    """The shipped measurement file (parsed only: its step rows would compile), its
    collective rows, and those of each chip generation with the header (the first
    ``rows_per_block`` of them: a case predicts a few rows, not all)."""
    text = (ROOT / "validation" / "measurements.csv").read_bytes()
    lines = text.split(b"\n")
    head = [ln for ln in lines if ln.startswith(b"#")]
    header = next(ln for ln in lines if ln.startswith(b"row_id"))
    rows = [ln for ln in lines if ln and not ln.startswith((b"#", b"row_id"))]
    rows = [ln for ln in rows if ln.split(b",")[1] == b"collective"]
    blocks: dict[bytes, list[bytes]] = {}
    for row in rows:
        blocks.setdefault(row.split(b",")[2].split(b":")[0], []).append(row)
    collectives = b"\n".join([*head, header, *rows]) + b"\n"
    return [text, collectives] + [
        b"\n".join([*head, header, *block[:rows_per_block]]) + b"\n"
        for generation, block in blocks.items()
        # whole blocks: the one generation whose rows determine a default fit
        if rows_per_block is not None or generation == b"v5e"
    ]


def _csv_seeds() -> list[bytes]:
    return _csv_blocks(3)


def _calibration_seeds() -> list[bytes]:
    return _csv_blocks(None)


def _measurements_round_trip(path: Path) -> tuple[str, str] | None:
    """Parse, write, parse: the same rows (``None``), or the failure; ``skipped`` for
    files with step rows (they would compile)."""
    from aoizora.errors import ValidationError
    from aoizora.studies.validation.format import format_measurements, parse_measurements

    try:
        rows = parse_measurements(path.read_text(encoding="utf-8"), name=str(path))
    except (ValidationError, UnicodeDecodeError):
        return "parse-failed", ""
    if any(r.kind == "step" for r in rows):
        return "skipped", "step rows"
    again = parse_measurements(format_measurements(rows), name="rewritten")
    if again != rows:
        return "no-round-trip", f"{rows}\n!=\n{again}"
    return None


def _validate(path: Path, scratch: Path) -> tuple[str, str]:
    from aoizora.cli import main

    pre = _measurements_round_trip(path)
    if pre is not None and pre[0] != "parse-failed":
        return pre
    with _captured() as err:
        code = main(["validate", str(path), "--cache-dir", str(scratch / "cache")])
    failed = _cli(code, err.getvalue(), path)
    if failed is not None:
        return failed
    if pre is not None:  # the command read a file the parser refused
        return "unclear", "validate accepted a file parse_measurements refuses"
    return "accepted", ""


def _calibrate(path: Path, scratch: Path) -> tuple[str, str]:
    from aoizora.cli import main

    pre = _measurements_round_trip(path)
    if pre is not None and pre[0] != "parse-failed":
        return pre
    # The generation of the file's first row (a seed's block is one generation).
    named = re.search(
        rb"^[^#\n][^,\n]*,collective,(v5e|v6e|tpu7x|v4|v5p):", path.read_bytes(), re.M
    )
    generation = named.group(1).decode() if named else "v5e"
    with _captured() as err:
        code = main(["calibrate", str(path), "--generation", generation, "--dry-run"])
    failed = _cli(code, err.getvalue(), path)
    return failed if failed is not None else ("accepted", "")


# -- compiled HLO (aoizora hlo) -------------------------------------------------------


def _hlo_seeds() -> list[bytes]:
    from aoizora.tpu import check_slice
    from sim.topology import load_slice
    from tests.aoizora.hlo import compiled

    check_slice(load_slice("v5e:2x4"))  # libtpu starts here, its start-up chatter filtered
    return [compiled.kinds_tpu().text.encode(), compiled.scan_tpu().text.encode()]


def _hlo(path: Path, scratch: Path) -> tuple[str, str]:
    from aoizora.cli import main
    from aoizora.hlo.graph import graph_from_text

    with _captured() as err:
        code = main(["hlo", str(path), "--slice", "v5e:2x4", "--json"])
    failed = _cli(code, err.getvalue(), path)
    if failed is not None:
        return failed
    text = path.read_text(encoding="utf-8")
    first, second = graph_from_text(text).to_json_dict(), graph_from_text(text).to_json_dict()
    return ("accepted", "") if first == second else ("no-round-trip", "two parses differ")


# -- flow files (python -m sim flows) ---------------------------------------------------


def _flow_seeds() -> list[bytes]:
    spec = SPEC_EXAMPLE  # the CLI tests' example flow file
    ring = {
        "topology": {"slice": "v5e:2x4", "wraparound": [False, True]},
        "flows": [
            {
                "id": f"r{i}",
                "src": [i % 2, i // 2],
                "dst": [(i + 1) % 2, ((i + 1) % 8) // 2],
                "bytes": 2.5e5 * (i + 1),
                "start": 1e-6 * i,
            }
            for i in range(8)
        ],
    }
    return [json.dumps(doc, indent=2).encode() for doc in (spec, ring)]


def _flow_key(parsed: tuple[Any, ...]) -> tuple[Any, ...]:
    s, flows, order = parsed
    return (s.shape, s.wraparound, s.link_bandwidth_bytes_per_s, s.hop_latency_s, order, flows)


def _flows(path: Path, scratch: Path) -> tuple[str, str]:
    from sim.__main__ import main
    from sim.flowfile import flow_document, parse_flow_document

    with _captured() as err:
        code = main(["flows", str(path), "--out", str(scratch / "result.json")])
    failed = _cli(code, err.getvalue(), path)
    if failed is not None:
        return failed
    parsed = parse_flow_document(json.loads(path.read_text(encoding="utf-8")))
    again = parse_flow_document(json.loads(json.dumps(flow_document(*parsed))))
    return ("accepted", "") if _flow_key(parsed) == _flow_key(again) else ("no-round-trip", "")


# -- topology TOML (every command that names a slice) -----------------------------------


def _toml_seeds() -> list[bytes]:
    return [
        (ROOT / "topologies" / "v5e.toml").read_bytes(),
        (ROOT / "topologies" / "tpu7x.toml").read_bytes(),
    ]


def _toml_value(value: Any) -> str:
    if isinstance(value, dict):
        return (
            "{ " + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
        )
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return {"inf": "inf", "-inf": "-inf", "nan": "nan"}.get(repr(value), repr(value))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    raise TypeError(f"no TOML for {value!r}")  # dates: not in a topology file


def toml_text(data: dict[str, Any]) -> str:
    """A TOML document that ``tomllib`` reads back to ``data`` (the fuzz round trip's
    writer: top-level keys, then tables)."""
    plain = [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in data.items() if not _is_table(v)]
    tables = [
        f"\n[{json.dumps(k)}]\n"
        + "\n".join(f"{json.dumps(a)} = {_toml_value(b)}" for a, b in v.items())
        for k, v in data.items()
        if _is_table(v)
    ]
    return "\n".join(plain + tables) + "\n"


def _is_table(value: Any) -> bool:
    return isinstance(value, dict) and not ("value" in value and "source" in value)


@contextlib.contextmanager
def _topologies(directory: Path) -> Iterator[None]:
    from sim import chips

    before = os.environ.get("AOIZORA_TOPOLOGIES_DIR")
    os.environ["AOIZORA_TOPOLOGIES_DIR"] = str(directory)
    chips._load_chip_cached.cache_clear()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("AOIZORA_TOPOLOGIES_DIR", None)
        else:
            os.environ["AOIZORA_TOPOLOGIES_DIR"] = before
        chips._load_chip_cached.cache_clear()


def _toml(path: Path, scratch: Path) -> tuple[str, str]:
    from sim.__main__ import main
    from sim.chips import load_chip

    named = re.search(rb'^generation = "(tpu7x|v5e)"', path.read_bytes(), re.MULTILINE)
    generation = named.group(1).decode() if named else "v5e"
    directory = scratch / "topologies"
    if directory.exists():
        shutil.rmtree(directory)
    shutil.copytree(ROOT / "topologies", directory, ignore=shutil.ignore_patterns("calibrated"))
    target = directory / f"{generation}.toml"
    shutil.copyfile(path, target)
    shape = "2x2x1" if generation == "tpu7x" else "2x2"
    dims = [[0, 0, 0], [1, 1, 0]] if generation == "tpu7x" else [[0, 0], [1, 1]]
    flows = scratch / "toml-flows.json"
    flows.write_text(
        json.dumps(
            {
                "topology": {"slice": f"{generation}:{shape}"},
                "flows": [{"id": "a", "src": dims[0], "dst": dims[1], "bytes": 1e6}],
            }
        )
    )
    with _topologies(directory):
        with _captured() as err:
            code = main(["flows", str(flows)])
        lines = err.getvalue().strip().splitlines()
        if code != 0 and not (code == 2 and len(lines) == 1):
            return "unclear", f"exit {code}: {err.getvalue()[-1500:]}"
        if code == 2 and target.name in lines[0]:
            return "rejected", lines[0]
        # Accepted (or a valid chip on which the flow file's slice does not fit: the
        # line names the flow file): the chip must load and round-trip.
        chip = load_chip(generation)
        with target.open("rb") as fh:
            target.write_text(toml_text(tomllib.load(fh)), encoding="utf-8")
        from sim import chips

        chips._load_chip_cached.cache_clear()
        again = load_chip(generation)
    same = dataclasses.astuple(chip) == dataclasses.astuple(again) or chip == again
    return ("accepted", "") if same else ("no-round-trip", f"{chip} != {again}")


# -- plan files (load_plan) -------------------------------------------------------------


def _plan_seeds() -> list[bytes]:
    from aoizora.placement.enumerate import enumerate_placements
    from aoizora.plan import Clip, Plan, PlanInput, PredictedLatencies, Provenance
    from aoizora.workloads.rules import Rules
    from sim.topology import load_slice

    out = []
    for name, shape in (("v5e:2x4", (2, 4)), ("tpu7x:2x2x1", (2, 4))):
        s = load_slice(name)
        placement = enumerate_placements(shape, s, mesh_axis_names=("data", "context"))[1]
        plan = Plan.create(
            model="wan2.1-1.3b",
            workload="wan2.1-1.3b@832x480x81",
            clip=Clip(width=832, height=480, frames=81),
            inputs=(
                PlanInput(
                    "arg0",
                    (2, 32760, 1536),
                    "bfloat16",
                    ("activation_batch", "activation_length", None),
                ),
            ),
            mesh_axis_names=("data", "context"),
            order=placement.order,
            rules=Rules.of(
                "seq", [("activation_batch", ("data",)), ("activation_length", "context")]
            ),
            attention="gather_kv",
            candidate_id="data2.context4/seq/gather_kv",
            placement_id=placement.id,
            predicted=PredictedLatencies(winner_s=0.0123, baselines_s=(("logical search", 0.015),)),
            provenance=Provenance(aoizora="0.1.0", jax="0.10.2", jaxlib="0.10.2", libtpu="0.0.52"),
        )
        out.append(plan.to_json().encode())
    return out


def _plan(path: Path, scratch: Path) -> tuple[str, str]:
    from aoizora.errors import PlanError
    from aoizora.plan import Plan, load_plan

    try:
        plan = load_plan(path)
    except PlanError as exc:
        lines = str(exc).strip().splitlines()
        if len(lines) == 1 and path.name in lines[0]:
            return "rejected", lines[0]
        return "unclear", str(exc)[-1500:]
    again = Plan.from_json(plan.to_json())
    ok = again == plan and again.to_json() == plan.to_json()
    return ("accepted", "") if ok else ("no-round-trip", plan.to_json()[:500])


# -- --workload factories that raise or return junk ----------------------------------------

_JUNK = (
    "raise ValueError('no')",
    "raise TypeError",
    "raise KeyError('w')",
    "raise RuntimeError('x' * 5000)",
    "raise AssertionError",
    "raise RecursionError",
    "raise ValueError('two\\nlines\\n')",
    "raise MemoryError",
    "raise SystemExit(3)",
    "raise NotImplementedError",
    "raise ZeroDivisionError",
    "return None",
    "return 0",
    "return 'mlp'",
    "return []",
    "return {}",
    "return object()",
    "return make",
    "return float('nan')",
    "return type('W', (), {'name': 'x'})()",
    "return (1, 2)",
    "return b'junk'",
    "return user_workload('mlp', None, (), ())",
    "return user_workload('mlp', lambda x: x, (1,), (('a',),))",
)


def _workload_seeds() -> list[bytes]:
    header = "from aoizora import user_workload, Rules\n\n\ndef make():\n    "
    return [(header + body + "\n").encode() for body in _JUNK]


def _workload(path: Path, scratch: Path) -> tuple[str, str]:
    from aoizora.cli import main

    with _captured() as err:
        code = main(
            [
                "plan",
                "--workload",
                f"{path}:make",
                "--slice",
                "v5e:2x2",
                "--out",
                str(scratch / "p.json"),
                "--cache-dir",
                str(scratch / "cache"),
            ]
        )
    if code == 0:
        return "unclear", "a junk factory planned"
    got = _cli(code, err.getvalue(), path)
    assert got is not None
    return got


TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target("hlo", "step.hlo", _hlo_seeds, _hlo),
        Target("validate-csv", "measurements.csv", _csv_seeds, _validate),
        Target("calibrate-csv", "measurements.csv", _calibration_seeds, _calibrate),
        Target("flows", "flows.json", _flow_seeds, _flows),
        Target("topology-toml", "chip.toml", _toml_seeds, _toml),
        Target("plan-json", "plan.json", _plan_seeds, _plan),
        Target("workload", "factory.py", _workload_seeds, _workload),
    )
}
