"""The TPU-compiled HLO of every legal wan-tiny candidate on v5e:2x4, kept as a fixture.

``test_bytes.py`` compares Stage 1 with the compiled program of all 56 legal candidates.
Compiling them is libtpu's work, not ours, and took four minutes of the test suite on two
cores; the texts are deterministic for the pinned jax/jaxlib/libtpu (pyproject.toml pins
them exactly), so they are kept here, compressed, with the versions that printed them.
``test_bytes.py::test_the_fixture_is_what_the_pinned_libtpu_compiles`` compiles some of
them afresh and checks that their collectives and FLOPs are the fixture's; when the pin
moves, that test fails and says to regenerate::

    python -m tests.aoizora.stage1.compiled_fixtures [--cache-dir DIR]

``--cache-dir`` reuses a plan cache the suite filled (AOIZORA_TEST_CACHE_DIR).
"""

from __future__ import annotations

import argparse
import json
import lzma
import re
import tempfile
from pathlib import Path

from aoizora.cache import install_neutral, plan_caches
from aoizora.candidates.space import Candidate, enumerate_candidates
from aoizora.compile import CompileResult, compile_candidate
from aoizora.fanout import fan_out
from aoizora.software import running_versions
from aoizora.workloads.wan import parse_resolution, wan_workload
from sim.topology import load_slice

__all__ = ["FIXTURE", "SLICE", "WORKLOAD", "compile_one", "load_fixture", "write_fixture"]

SLICE = load_slice("v5e:2x4")
WORKLOAD = wan_workload("wan-tiny", parse_resolution("256x256", frames=5))
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "wan-tiny-256x256x5-v5e-2x4.hlo.json.xz"
# Source locations name the checkout that compiled (metadata's source_file, the stack
# frame tables after the module line, the debug locations in a Pallas kernel's bytecode):
# not read by the HLO reader, different on every machine, so left out of the fixture;
# what remains is the same text wherever the pinned versions compile it.
_METADATA = re.compile(r", metadata=\{[^{}]*\}")
_FRAME_TABLES = re.compile(
    r"^(?:FileNames|FunctionNames|FileLocations|StackFrames)\n(?:.+\n)*\n", re.MULTILINE
)


def compile_one(args: tuple[Candidate, Path]) -> CompileResult:
    """One candidate's TPU compile (picklable for :func:`aoizora.fanout.fan_out`)."""
    cand, cache_dir = args
    return compile_candidate(WORKLOAD, cand, SLICE, cache=plan_caches(cache_dir).compiled)


def load_fixture() -> tuple[dict[str, str | None], dict[str, str]]:
    """(the versions that compiled, {candidate id: compiled HLO text})."""
    doc = json.loads(lzma.decompress(FIXTURE.read_bytes()))
    return doc["versions"], doc["programs"]


def strip_metadata(hlo_text: str) -> str:
    """``hlo_text`` without source locations: per-instruction ``metadata={...}``, the
    stack frame tables, and the paths inside Pallas kernels' bytecode (each kernel body
    is its digest without debug locations: :func:`aoizora.cache.install_neutral`)."""
    return install_neutral(_FRAME_TABLES.sub("", _METADATA.sub("", hlo_text)))


def write_fixture(cache_dir: Path) -> int:
    """Compile every legal candidate (through ``cache_dir``) and write :data:`FIXTURE`."""
    legal = enumerate_candidates(WORKLOAD, SLICE.num_devices).legal
    with fan_out() as pool:
        results = pool.map(compile_one, [(c, cache_dir) for c in legal])
    programs = {}
    for cand, result in zip(legal, results, strict=True):
        if not result.ok:
            raise SystemExit(f"{cand.id}: {result.error}")
        programs[cand.id] = strip_metadata(result.hlo_text)
    doc = {"versions": running_versions(), "programs": programs}
    text = json.dumps(doc, sort_keys=True, indent=0)
    FIXTURE.write_bytes(lzma.compress(text.encode(), preset=9 | lzma.PRESET_EXTREME))
    return len(programs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        n = write_fixture(args.cache_dir or Path(tmp))
    print(f"{FIXTURE}: {n} programs, {FIXTURE.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
