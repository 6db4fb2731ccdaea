"""libtpu's devices: start-up chatter filtered (real errors kept), undescribable slices early."""

from __future__ import annotations

import itertools
import math
import os
import random
import re
import subprocess
import sys

import pytest

from aoizora import tpu
from aoizora.errors import CompileError
from aoizora.tpu import (
    _without_chatter,
    check_slice,
    describable_shapes_near,
    is_libtpu_chatter,
    libtpu_describes,
    slice_backend,
    topology_devices,
)
from sim.topology import generations, load_chip, load_slice

needs_libtpu = pytest.mark.skipif(
    slice_backend(load_slice("v5e:2x2")) != "tpu", reason="libtpu unavailable"
)

# What libtpu 0.0.52 writes on fd 2 when it starts on a machine that is not a TPU VM
# (recorded on this machine, `python -c "import jax; jax.devices()"`).
RECORDED_CHATTER = """\
Failed to find host bounds for accelerator type: WARNING: could not determine TPU accelerator type, please set env var `TPU_ACCELERATOR_TYPE` manually, otherwise libtpu.so may not properly initialize.
WARNING: Logging before InitGoogle() is written to STDERR
E0000 00:00:1796283125.461843    7656 common_lib.cc:906] INVALID_ARGUMENT: Error: unexpected worker hostname 'WARNING: could not determine TPU worker hostnames or IP addresses' from env var TPU_WORKER_HOSTNAMES. Expecting a valid hostname or IP address without port number, or hostname:port:address triple. (Full TPU workers' addr string: WARNING: could not determine TPU worker hostnames or IP addresses, please set env var `TPU_WORKER_HOSTNAMES` manually, otherwise libtpu.so may not properly initialize.)
=== Source Location Trace: === 
learning/45eac/tfrc/runtime/libtpu_init_utils.cc:370
"""  # noqa: E501, W291

REAL_ERRORS = (
    "E0000 00:00:1796283125.46 7656 tpu_compiler.cc:12] RESOURCE_EXHAUSTED: out of HBM",
    "F0000 00:00:1.0 1 pjrt_client.cc:1] Check failed: device != nullptr",
    "Traceback (most recent call last):",
    "WARNING: something else entirely",
)


def test_recorded_chatter_is_recognised_and_real_errors_are_not() -> None:
    assert all(is_libtpu_chatter(line) for line in RECORDED_CHATTER.splitlines())
    assert not any(is_libtpu_chatter(line) for line in REAL_ERRORS)


def test_capture_drops_chatter_and_keeps_everything_else(capfd: pytest.CaptureFixture[str]) -> None:
    with _without_chatter():
        os.write(2, RECORDED_CHATTER.encode())
        os.write(2, (REAL_ERRORS[0] + "\n").encode())
        sys.stderr.write("a Python warning\n")
    err = capfd.readouterr().err
    # (pytest captures sys.stderr apart from fd 2, so the order of the two may differ.)
    assert sorted(err.splitlines()) == sorted([REAL_ERRORS[0], "a Python warning"])
    # Outside the capture fd 2 is the terminal again.
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "after\n"


def test_a_real_error_survives_an_abort_inside_the_capture() -> None:
    # libtpu may abort the process (a failed CHECK) while fd 2 is captured: its last
    # words must still reach the terminal, and the chatter must not.
    proc = _fresh_python(
        "import os\n"
        "from aoizora.tpu import _without_chatter\n"
        "with _without_chatter():\n"
        "    os.write(2, b'WARNING: Logging before InitGoogle() is written to STDERR\\n')\n"
        "    os.write(2, b'F0000 00:00:1.0 1 tpu.cc:1] Check failed: x == y\\n')\n"
        "    os.abort()\n"
    )
    assert proc.returncode != 0
    assert "Check failed: x == y" in proc.stderr
    assert "InitGoogle" not in proc.stderr


def _fresh_python(code: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )


@needs_libtpu
@pytest.mark.skipif(tpu.on_tpu_vm(), reason="a TPU VM's libtpu has no off-VM chatter to filter")
def test_starting_libtpu_through_aoizora_is_quiet() -> None:
    # Without the filter libtpu does chatter here (so the next check means something) ...
    noisy = _fresh_python("import jax; jax.devices()")
    assert "TPU_ACCELERATOR_TYPE" in noisy.stderr
    # ... and through aoizora.tpu it does not; devices are described all the same.
    quiet = _fresh_python(
        "from aoizora.tpu import check_slice, topology_devices\n"
        "from sim.topology import load_slice\n"
        "s = load_slice('v5e:2x4'); check_slice(s); print(len(topology_devices(s)))"
    )
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stdout.strip() == "8" and quiet.stderr == ""


def _libtpu_accepts(name: str) -> bool:
    from jax.experimental import topologies

    with _without_chatter():
        try:
            # the host block clipped to the slice, as aoizora.tpu passes it: on a TPU VM
            # libtpu's default follows the attached host (issue 34)
            shape = [int(d) for d in name.split(":")[1].split("x")]
            bounds = list(tpu.chips_per_host_bounds(shape))
            topologies.get_topology_desc(
                topology_name=name, platform="tpu", chips_per_host_bounds=bounds
            )
        except Exception:
            return False
    return True


@needs_libtpu
def test_nearest_shapes_agree_with_brute_force() -> None:
    near = describable_shapes_near(load_slice("v5e:3x3"))
    # Brute force over every 2D shape of 1..16 chips in the 16x16 pod.
    accepted = {
        (a, b): _libtpu_accepts(f"v5e:{a}x{b}")
        for a, b in itertools.product(range(1, 17), repeat=2)
        if a * b <= 16
    }
    by_count: dict[int, set[str]] = {}
    for (a, b), ok in accepted.items():
        if ok:
            by_count.setdefault(a * b, set()).add(f"{a}x{b}")
    assert 9 not in by_count  # 3x3, 1x9 and 9x1: libtpu takes none
    below = max(m for m in by_count if m < 9)
    above = min(m for m in by_count if m > 9)
    assert {m: set(v) for m, v in near.items()} == {below: by_count[below], above: by_count[above]}
    assert near[8][0] == "2x4"  # squarest first


@needs_libtpu
def test_check_slice() -> None:
    check_slice(load_slice("v5e:2x4"))  # described: no error
    with pytest.raises(CompileError) as info:
        check_slice(load_slice("v5p:3x3x3"))
    text = str(info.value)
    assert text.startswith("libtpu cannot describe slice 'v5p:3x3x3' (its first two dimensions")
    assert "the v5p shapes it describes nearest to 27 chips are 26 chips:" in text
    listed = re.findall(r"\b\d+(?:x\d+)+\b", text.split(" are ", 1)[1])
    assert listed and all(_libtpu_accepts(f"v5p:{shape}") for shape in listed)


@needs_libtpu
def test_check_slice_on_tpu7x_counts_chips_not_devices() -> None:
    # tpu7x:2x2x1 is 4 chips and 8 devices (docs/facts.md, Ironwood (TPU7x)): described.
    check_slice(load_slice("tpu7x:2x2x1"))
    assert len(topology_devices(load_slice("tpu7x:2x2x1"))) == 8
    with pytest.raises(CompileError) as info:
        check_slice(load_slice("tpu7x:3x3x1"))
    text = str(info.value)
    assert text.startswith("libtpu cannot describe slice 'tpu7x:3x3x1' (its first two dimensions")
    # The nearest shapes are counted in chips (9 here), and every one listed is described.
    assert "nearest to 9 chips are 8 chips: 2x2x2," in text
    listed = re.findall(r"\b\d+(?:x\d+)+\b", text.split(" are ", 1)[1])
    assert listed and all(_libtpu_accepts(f"tpu7x:{shape}") for shape in listed)


def _shapes_up_to(pod: tuple[int, ...], max_chips: int) -> list[tuple[int, ...]]:
    return [
        s for s in itertools.product(*(range(1, p + 1) for p in pod)) if math.prod(s) <= max_chips
    ]


@needs_libtpu
@pytest.mark.parametrize("generation", generations())
def test_libtpu_rule_matches_libtpu_itself(generation: str) -> None:
    # libtpu_describes decides refusals without starting libtpu; here libtpu answers for
    # every shape of up to 8 chips and for 12 random shapes (seeded) of up to 1,024 chips
    # (every shape of v5e/v6e and of up to 64 chips of the others agreed when checked by
    # hand: docs/facts.md, libtpu AOT topologies).
    pod = load_chip(generation).pod_shape
    shapes = _shapes_up_to(pod, 8)
    larger = [s for s in _shapes_up_to(pod, 1024) if math.prod(s) > 8]
    shapes += random.Random(generation).sample(larger, 12)
    name = "x".join
    wrong = [
        s
        for s in shapes
        if libtpu_describes(s) != _libtpu_accepts(f"{generation}:{name(map(str, s))}")
    ]
    assert wrong == [], f"libtpu disagrees with libtpu_describes on {generation} {wrong}"


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (
            ["plan", "--model", "wan2.1-1.3b", "--slice", "v5e:3x5"],
            "cannot describe slice 'v5e:3x5'",
        ),
        (["plan", "--workload", "examples/tiny_block.py:make", "--slice", "tpu7x:3x3x1"], "3x3x1"),
        (["whatif", "--model", "wan-tiny", "--slices", "v5e:2x2,v6e:5x5"], "'v6e:5x5'"),
        (["plan", "--model", "wan2.1-1.3b", "--slice", "v9:2x2"], "unknown chip generation 'v9'"),
    ],
)
def test_bad_slices_are_refused_before_jax_starts(argv: list[str], needle: str) -> None:
    # The "< 2 s" promise rests on this: jax (1.5-2 CPU s to import) is never loaded
    # for a refused slice. benchmarks/slice_check_bench.py measures the wall time.
    proc = _fresh_python(
        "import sys\nfrom aoizora.cli import main\n"
        f"code = main({argv!r})\nprint(code, 'jax' in sys.modules, 'libtpu' in sys.modules)\n"
    )
    assert proc.stdout.split() == ["2", "False", "False"], proc.stderr[-2000:]
    assert needle in proc.stderr


def test_a_shape_libtpu_refuses_despite_the_rule_keeps_libtpus_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Should libtpu ever refuse a shape the rule lets through, its own reason is reported.
    def refuse(name: str, shape: object) -> tuple[object, ...]:
        raise ValueError(f"INVALID_ARGUMENT: no {name} today\nsecond line")

    monkeypatch.setattr(tpu, "_describe", refuse)
    monkeypatch.setattr(tpu.importlib.util, "find_spec", lambda name: object())
    with pytest.raises(CompileError) as info:
        check_slice(load_slice("v6e:2x6"))
    text = str(info.value)
    assert text.startswith("libtpu cannot describe slice 'v6e:2x6' (INVALID_ARGUMENT: no v6e:2x6")
    assert "second line" not in text and text.endswith("e.g. --slice v6e:2x6")
