"""The compiled event core (``sim/_flowcore.c``) against its twin and against the textbook.

- **It is built.** ``simulate`` falls back to the pure-Python core when the
  extension is missing; this test makes a missing build fail CI instead of
  quietly testing the slow path only.
- **Bit for bit the pure-Python reference** (:mod:`sim.pycore`: SimPy clock,
  :class:`sim.sharing.LinkSharing`): same release, drain and finish doubles,
  same event log, same busy seconds, same rate log -- on random DAGs (flows,
  computes, ``after``, latency on and off, zero sizes, 0-hop flows, wrapped
  axes), on the benchmark's traffic shapes (staggered random flows, collective
  storms, a layer replay, a burst) and in both sharing modes (the lazy update
  the whole solve of big batches, and the solve by bottleneck classes).
- **Every allocation it logs is the textbook one**: oracle routing
  (:mod:`tests.sim.oracle`) and textbook progressive filling, after every
  update, in both sharing modes.
- Core selection, the fallback's one line (and how to build), and bad
  arrays (an error, not a crash).

The oracle tests elsewhere (``test_incremental``, ``test_conservation``,
``test_engine``) run ``core="compiled"`` explicitly.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sim.engine
from sim.engine import Compute, Flow, compiled_core, core_status, run_core, simulate
from sim.errors import SimError
from sim.nodes import validate_graph
from sim.problem import Problem, build_problem
from sim.pycore import CoreOutput
from sim.records import Event
from sim.topology import Slice, make_slice
from tests.child_env import child_env
from tests.sim.oracle import oracle_problem, reference_max_min
from tests.sim.test_incremental import random_dags

# The benchmark's own case builders, so the comparison covers its traffic shapes.
_spec = importlib.util.spec_from_file_location(
    "sim_bench", Path(__file__).resolve().parents[2] / "benchmarks" / "sim_bench.py"
)
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)
random_flows, row_col_storm, step_replay = (
    bench.random_flows,
    bench.row_col_storm,
    bench.step_replay,
)

LAZY_ONLY = 10**9  # batch_pairs: never the whole solve
WHOLE_ONLY = -1  # batch_pairs: always the whole solve
DEFAULT = sim.engine._BATCH_PAIRS
CLASSES = sim.engine._CLASS_LOAD  # class_load: by classes from this many pairs a link
ALL_CLASSES = 0  # class_load: every update solves by classes


def test_compiled_core_is_built() -> None:
    module, why = compiled_core()
    assert module is not None, why


def _problem(s: Slice, nodes: list[Flow | Compute]) -> Problem:
    return build_problem(s, nodes, validate_graph(s, nodes), None)


def _both(
    problem: Problem, *, batch_pairs: int, class_load: int = CLASSES
) -> tuple[CoreOutput, CoreOutput]:
    kw = dict(record_rates=True, batch_pairs=batch_pairs, class_load=class_load)
    compiled = run_core(problem, core="compiled", **kw)  # type: ignore[arg-type]
    python = run_core(problem, core="python", **kw)  # type: ignore[arg-type]
    return compiled, python


def _assert_identical(compiled: CoreOutput, python: CoreOutput) -> None:
    # repr() prints every double exactly (and nan as nan): equal text, equal bits.
    for field in CoreOutput._fields:
        assert repr(getattr(compiled, field)) == repr(getattr(python, field)), field


@settings(max_examples=120, deadline=None)
@given(
    random_dags(),
    st.sampled_from([DEFAULT, LAZY_ONLY, WHOLE_ONLY, 3]),
    st.sampled_from([CLASSES, ALL_CLASSES, 1]),
)
def test_random_dags_bit_for_bit(
    case: tuple[Slice, list[Flow | Compute]], pairs: int, class_load: int
) -> None:
    # class_load 1: the solve by classes starts and ends as flows come and go.
    s, nodes = case
    problem = _problem(s, nodes)
    compiled, python = _both(problem, batch_pairs=pairs, class_load=class_load)
    _assert_identical(compiled, python)
    # Without a rate log, the classes run on their clocks alone: the same doubles.
    kw = dict(record_rates=False, batch_pairs=pairs, class_load=class_load)
    quiet = run_core(problem, core="compiled", **kw)  # type: ignore[arg-type]
    _assert_identical(quiet, run_core(problem, core="python", **kw))  # type: ignore[arg-type]
    assert repr(quiet.finish_s) == repr(compiled.finish_s)


@pytest.mark.parametrize(
    ("label", "build"),
    [
        ("staggered", lambda: random_flows(600, mean_gap_s=2e-6, seed=3)),
        ("burst", lambda: random_flows(150, mean_gap_s=0.0, seed=4)),
        ("storm", lambda: row_col_storm(8)),
        ("replay", lambda: step_replay(3)),
    ],
)
@pytest.mark.parametrize(
    ("pairs", "class_load"),
    [(DEFAULT, CLASSES), (LAZY_ONLY, CLASSES), (WHOLE_ONLY, CLASSES), (DEFAULT, ALL_CLASSES)],
)
def test_benchmark_traffic_bit_for_bit(
    label: str, build: object, pairs: int, class_load: int
) -> None:
    s, nodes = build()  # type: ignore[operator]
    compiled, python = _both(_problem(s, nodes), batch_pairs=pairs, class_load=class_load)
    _assert_identical(compiled, python)
    assert compiled.rate_log, label  # the comparison covered some allocations


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([DEFAULT, LAZY_ONLY, WHOLE_ONLY, ALL_CLASSES]))
def test_every_logged_allocation_is_textbook(seed: int, pairs: int) -> None:
    # Staggered flows with some dependencies on a 4x4 mesh (with wrap-around
    # half the time): many flows drain at once and each update changes a part.
    rng = random.Random(seed)
    s = make_slice(
        (4, 4), wraparound=rng.random() < 0.5, link_bandwidth_bytes_per_s=1e9, hop_latency_s=1e-6
    )
    nodes: list[Flow | Compute] = []
    for k in range(36):
        src, dst = rng.sample(s.coords, 2)
        after = (f"f{rng.randrange(k)}",) if k and rng.random() < 0.2 else ()
        size = rng.uniform(1e3, 4e4)
        nodes.append(Flow(f"f{k}", src, dst, size, start_s=rng.uniform(0, 2e-5), after=after))
    # ALL_CLASSES: the default batches, and every update solved by classes.
    kw = {"class_load": 0} if pairs == ALL_CLASSES else {"batch_pairs": pairs}
    out = run_core(_problem(s, nodes), core="compiled", record_rates=True, **kw)
    paths, capacity = oracle_problem(s, [n for n in nodes if isinstance(n, Flow)])
    assert out.rate_log
    for snap in out.rate_log:
        if snap.rates:
            want = reference_max_min([paths[i] for i, _ in snap.rates], capacity)
            got = [r for _, r in snap.rates]
            assert got == pytest.approx(want, rel=1e-9), snap.time_s


def test_deterministic_across_runs() -> None:
    s, nodes = random_flows(300, mean_gap_s=1e-6, seed=9)
    a = simulate(s, nodes, core="compiled").to_json_dict()
    b = simulate(s, nodes, core="compiled").to_json_dict()
    assert a == b


def test_core_choice_and_errors(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    s = make_slice([3], link_bandwidth_bytes_per_s=1e9, hop_latency_s=1e-6)
    nodes: list[Flow | Compute] = [Flow("a", (0,), (2,), 1e6), Flow("b", (1,), (2,), 1e6)]
    python = simulate(s, nodes, core="python").to_json_dict()
    assert simulate(s, nodes, core="compiled").to_json_dict() == python
    with pytest.raises(SimError, match="core='fast' is not an event core; choose one of"):
        simulate(s, nodes, core="fast")
    # Without a usable build: an explicit request fails and says how to
    # rebuild; the default logs one line, once per process, and runs the
    # pure-Python core.
    reason = "sim._flowcore is stale (interface version 0, this sim needs 2); to build it, ..."
    monkeypatch.setattr(sim.engine, "compiled_core", lambda: (None, reason))
    monkeypatch.setattr(sim.engine, "_warned", False)
    monkeypatch.setenv(sim.engine._NOTED_ENV, "")
    with pytest.raises(SimError, match="stale"):
        simulate(s, nodes, core="compiled")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="sim"):
        assert simulate(s, nodes).to_json_dict() == python
        assert simulate(s, nodes).to_json_dict() == python
    [line] = [r.getMessage() for r in caplog.records]
    assert "\n" not in line
    assert line.startswith("sim: the compiled event core is unavailable, so the pure-Python")
    assert line.endswith(reason)
    assert os.environ[sim.engine._NOTED_ENV] == "1"  # processes started now stay quiet


def test_fallback_line_says_how_to_build(monkeypatch: pytest.MonkeyPatch) -> None:
    # A missing extension, as after a failed or compiler-less install.
    monkeypatch.setitem(sys.modules, "sim._flowcore", None)
    module, why = compiled_core()
    assert module is None
    assert why.startswith("sim._flowcore is not built (")
    assert "install a C compiler" in why and "make core" in why
    assert "\n" not in core_status()


def test_without_the_extension_a_fresh_process_prints_one_line(tmp_path: Path) -> None:
    # python -m sim flows with sim._flowcore unimportable: the same output,
    # and exactly one line on stderr naming the fallback and the fix.
    doc = {
        "topology": {"shape": [2, 2], "link_bandwidth": 1e9, "hop_latency": 1e-6},
        "flows": [{"id": "a", "src": [0, 0], "dst": [1, 1], "bytes": 1e6}],
    }
    path = tmp_path / "flows.json"
    path.write_text(json.dumps(doc))
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text("import sys\nsys.modules['sim._flowcore'] = None\n")
    root = Path(__file__).resolve().parents[2]
    drop = [sim.engine._NOTED_ENV]
    runs = [
        subprocess.run(
            [sys.executable, "-m", "sim", "flows", str(path)],
            env=child_env(tmp_path, drop=drop) if blocked else child_env(drop=drop),
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        )
        for blocked in (True, False)
    ]
    assert runs[0].stdout == runs[1].stdout
    assert runs[1].stderr == ""
    [line] = runs[0].stderr.splitlines()
    assert line.startswith("sim: the compiled event core is unavailable")
    assert "make core" in line


def test_bad_arrays_are_errors_not_crashes() -> None:
    module, why = compiled_core()
    assert module is not None, why
    ok = dict(
        capacity=[1.0],
        route_ptr=[0, 1],
        route_chan=[0],
        size_bytes=[1.0],
        duration_s=[0.0],
        is_flow=[1],
        ready_s=[0.0],
        waiting=[0],
        child_ptr=[0, 0],
        child_idx=[],
        ids=["a"],
        hop_latency_s=0.0,
        batch_pairs=128,
        class_load=8,
        record_rates=False,
        event_type=Event,
    )
    assert module.run(*ok.values())[2] == [1.0]
    for key, bad, error in [
        ("route_chan", [5], ValueError),  # a channel that does not exist
        ("route_ptr", [0, 2], ValueError),  # more route entries than given
        ("child_ptr", [1, 0], ValueError),
        ("size_bytes", [], ValueError),
        ("size_bytes", ["x"], TypeError),
        ("ids", ("a",), TypeError),
        ("event_type", dict, TypeError),
    ]:
        with pytest.raises(error):
            module.run(*{**ok, key: bad}.values())


_LONG_RUN = """
import signal, sys, traceback
signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started in background
from sim.engine import Flow, run_core
from sim.nodes import validate_graph
from sim.problem import build_problem
from sim.topology import make_slice
s = make_slice([16, 16], link_bandwidth_bytes_per_s=1e9, hop_latency_s=1e-6)
cs = list(s.coords)
flows = [Flow(f"f{i}-{j}", a, b, 1e6 * (1 + (7 * i + j) % 13),
              start_s=1e-5 * ((31 * i + 17 * j) % 4099))
         for i, a in enumerate(cs) for j, b in enumerate(cs) if a != b and (i + j) % 2 == 0]
problem = build_problem(s, flows, validate_graph(s, flows), None)
print("ready", flush=True)
try:
    # The lazy update throughout (class_load=-1): by classes the run is over in seconds.
    run_core(problem, core="compiled", class_load=-1)
except KeyboardInterrupt:
    print("interrupted in", traceback.extract_tb(sys.exc_info()[2])[-1].line, flush=True)
"""


@pytest.mark.slow
def test_a_long_compiled_run_answers_ctrl_c_from_inside_the_core() -> None:
    # 32,512 contending flows on 16x16, released over 41 ms of simulated time (no giant
    # instant): minutes in the core with the lazy update, uninterrupted. Python runs its
    # signal handlers only between bytecodes, so the core checks for them itself: without
    # that, the run would go on long past the wait below.
    proc = subprocess.Popen([sys.executable, "-c", _LONG_RUN], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().startswith("ready")
    time.sleep(10)  # in the core
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)  # far before the run would end
    assert out.strip() == "interrupted in release, drain, finish, events, busy, log = module.run("
