"""Reading device profiles: real TPU v5e traces, synthetic XSpaces, and a CPU capture."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from jax.profiler import ProfileData

from aoizora.errors import MeasureError
from aoizora.hlo.profile import (
    DeviceProfile,
    load_profile,
    op_name_of,
    profile_of,
    read_text_file,
)
from aoizora.hlo.text import parse_module
from tests.aoizora.compute.conftest import PROFILES
from tests.child_env import child_env

ROOT = Path(__file__).resolve().parents[3]
_CONTROL = ("while", "call", "conditional")


def _xspace(*, partial_first: bool) -> ProfileData:
    """Two executions of jit_step: fusion.1 then copy.2 each; the first cut at its start
    when ``partial_first`` (its fusion.1 never seen, as when a trace starts mid-step)."""
    first = "" if partial_first else "events { metadata_id: 2 offset_ps: 0 duration_ps: 3000000 }"
    text = f"""
    planes {{ id: 1 name: "/device:TPU:0"
      lines {{ id: 1 name: "XLA Modules" timestamp_ns: 0
        events {{ metadata_id: 1 offset_ps: 0 duration_ps: 5000000 }}
        events {{ metadata_id: 1 offset_ps: 6000000 duration_ps: 5000000 }}
        events {{ metadata_id: 4 offset_ps: 12000000 duration_ps: 1000000 }} }}
      lines {{ id: 2 name: "XLA Ops" timestamp_ns: 0
        {first}
        events {{ metadata_id: 3 offset_ps: 3000000 duration_ps: 2000000 }}
        events {{ metadata_id: 2 offset_ps: 6000000 duration_ps: 3000000 }}
        events {{ metadata_id: 3 offset_ps: 9000000 duration_ps: 2000000 }}
        events {{ metadata_id: 3 offset_ps: 12000000 duration_ps: 1000000 }} }}
      event_metadata {{ key: 1 value {{ id: 1 name: "jit_step(77)" }} }}
      event_metadata {{ key: 2 value {{ id: 2 name: "%fusion.1 = f32[8]{{0}} fusion(%p)" }} }}
      event_metadata {{ key: 3 value {{ id: 3 name: "%copy.2 = f32[8]{{0}} copy(%q)" }} }}
      event_metadata {{ key: 4 value {{ id: 4 name: "jit_other(5)" }} }}
    }}"""  # fmt: skip
    return ProfileData.from_text_proto(text)


def test_ops_are_counted_per_execution_of_the_module_asked_for() -> None:
    p = profile_of(_xspace(partial_first=False), module="jit_step")
    assert p.module == "jit_step" and p.executions_s == pytest.approx((5e-6, 5e-6))
    # jit_other's copy.2 at 12 us is another program's op: not counted
    assert p.op("fusion.1").per_step_s == pytest.approx(3e-6)
    assert p.op("copy.2").per_step_s == pytest.approx(2e-6)
    assert p.op("copy.2").count_per_step == 1.0


def test_an_execution_cut_by_the_trace_start_is_left_out() -> None:
    p = profile_of(_xspace(partial_first=True), module="jit_step")
    assert p.executions_s == pytest.approx((5e-6,))  # the whole second one only
    assert p.op("fusion.1").events == 1 and p.op("copy.2").events == 1


def test_a_trace_without_the_module_names_what_it_has() -> None:
    with pytest.raises(MeasureError, match=r"no device events of module 'jit_nope'.*TPU:0"):
        profile_of(_xspace(partial_first=False), module="jit_nope")


def test_op_names_are_the_instruction_names() -> None:
    assert op_name_of("%fusion.3 = bf16[2]{0} fusion(%a)") == "fusion.3"
    assert op_name_of("copy-start.19") == "copy-start.19"


@pytest.mark.parametrize("row", ["m-24893bf72f-winner", "m-80c6028188-winner"])
def test_a_real_v5e_trace_adds_up_to_its_step_and_matches_its_op_table(row: str) -> None:
    """The device runs one op at a time: the ops (control flow aside) sum to the step;
    the saved op table is the trace read again."""
    module = parse_module(read_text_file(PROFILES / f"{row}.hlo.txt.gz"))
    traced = load_profile(PROFILES / f"{row}.xplane.pb.gz", module=module.name)
    table = load_profile(PROFILES / f"{row}.ops.json.gz")
    assert traced.to_json_dict() == table.to_json_dict()
    names = {i.name: i.opcode for c in module.computations.values() for i in c.instructions}
    assert all(o.name in names for o in traced.ops)  # every op is an instruction of the HLO
    busy = sum(o.per_step_s for o in traced.ops if names[o.name] not in _CONTROL)
    assert busy == pytest.approx(traced.step_s, rel=0.002)
    loops = [o for o in traced.ops if names[o.name] == "while"]
    assert loops and max(o.per_step_s for o in loops) <= traced.step_s


def test_a_profile_round_trips_through_json() -> None:
    p = profile_of(_xspace(partial_first=False), module="jit_step")
    assert DeviceProfile.from_json_dict(p.to_json_dict()) == p


_CPU_CAPTURE = """
import json, sys
import jax, jax.numpy as jnp
from aoizora.hlo.text import parse_module
from aoizora.hlo.profile import load_profile
import gzip, pathlib
from aoizora.measure.capture import capture_profile, save_profiled_call
f = jax.jit(lambda a, b: jnp.tanh(a @ b) + 1.0)
a = jnp.ones((64, 64), jnp.float32)
compiled = f.lower(a, a).compile()
trace = capture_profile(lambda: compiled(a, a), executions=2, out=sys.argv[1])
module = parse_module(compiled.as_text())
p = load_profile(trace, module=module.name, executions=2)
names = sorted(i.name for c in module.computations.values() for i in c.instructions)
out = pathlib.Path(sys.argv[1]).parent / "saved"
saved = save_profiled_call(lambda: compiled(a, a), hlo_text=compiled.as_text(),
                           module=module.name, out=out, name="k")
again = load_profile(out / "k.ops.json.gz", module=module.name)
same_hlo = gzip.decompress((out / "k.hlo.txt.gz").read_bytes()).decode() == compiled.as_text()
print(json.dumps({"ops": sorted(o.name for o in p.ops), "names": names,
                  "executions": len(p.executions_s), "saved_round_trips": again == saved,
                  "saved_ops": sorted(o.name for o in saved.ops), "same_hlo": same_hlo}))
"""


def test_a_cpu_capture_names_the_ops_of_the_compiled_module(tmp_path: Path) -> None:
    # A child process: on some hosts (CI's sandbox) creating jax's ProfilerSession
    # segfaults, which must cost this one test, not the whole suite.
    env = child_env(JAX_PLATFORMS="cpu")
    done = subprocess.run(
        [sys.executable, "-c", _CPU_CAPTURE, str(tmp_path / "t.xplane.pb")],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    if done.returncode < 0:
        pytest.skip(
            f"jax.profiler died of signal {-done.returncode} on this host: {done.stderr[-300:]}"
        )
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["ops"] and set(got["ops"]) <= set(got["names"])
    assert got["executions"] == 2
    # what the chip experiments save (save_profiled_call) reads back as it was profiled
    assert got["saved_round_trips"] and got["same_hlo"]
    assert got["saved_ops"] and set(got["saved_ops"]) <= set(got["names"])


def test_unreadable_files_are_refused_by_name(tmp_path: Path) -> None:
    bad = tmp_path / "x.xplane.pb"
    bad.write_bytes(b"not a trace")
    with pytest.raises(MeasureError, match="not a readable profiler trace"):
        load_profile(bad)
    with pytest.raises(MeasureError, match="cannot read"):
        read_text_file(tmp_path / "missing.hlo.txt")
