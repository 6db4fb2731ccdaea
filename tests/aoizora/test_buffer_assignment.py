"""XLA's buffer assignment, read before code generation, against the compiled program.

The independent check is jaxlib's own ``compiled.memory_analysis()`` of the full compile
(:func:`aoizora.compile.compile_candidate`): the assignment read from the dump and ended
early must give the same arguments, outputs and temporaries, on steps and a VAE decode,
on one chip and on a mesh. The child process that reads it must leave nothing behind.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

import aoizora.buffer_assignment
from aoizora.buffer_assignment import (
    AssignedMemory,
    assigned_memory,
    cached_assigned_memory,
    parse_buffer_assignment,
)
from aoizora.cache import plan_caches
from aoizora.candidates.space import enumerate_candidates
from aoizora.compile import compile_candidate
from aoizora.errors import CompileError
from aoizora.request.clip_plan import vae_for
from aoizora.workloads.base import Workload
from aoizora.workloads.factory import load_workload
from aoizora.workloads.wan import parse_resolution, wan_workload
from sim.topology import load_slice


def _tiny_step() -> Workload:
    return wan_workload("wan-tiny", parse_resolution("64x64", frames=9))


def _own_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary directory of this test's own for the dumps (other tests may be reading
    an assignment beside it, in another worker)."""
    own = tmp_path / "tmp"
    own.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(own))
    return own


def test_parse_keeps_hbm_and_splits_parameters_outputs_and_temporaries() -> None:
    text = "\n".join(
        [
            "BufferAssignment:",
            "allocation 0: size 1024, page 0, thread-local:",
            "allocation 1: size 100, page 0, parameter 0, shape |f32[25]| at ShapeIndex {}:",
            "allocation 2: size 200, page 0, parameter 1, shape |f32[50]| at ShapeIndex {}:",
            # an output that aliases a parameter is one allocation: counted once, as it
            "allocation 3: size 300, page 0, parameter 2, maybe-live-out, shape |f32[75]|:",
            "allocation 4: size 40, page 0, output shape is |f32[10]|, maybe-live-out:",
            "allocation 5: size 7000, page 0, preallocated-temp:",
            "allocation 6: size 64, page 0, constant:",
            "allocation 7: size 92, color 2, page 0, preallocated-temp:",  # DMA flags
            "allocation 8: size 50000, color 1, page 0, preallocated-temp:",  # VMEM
            "allocation 9: size 512, color 0, page 0, preallocated-temp:",
        ]
    )
    assert parse_buffer_assignment(text) == AssignedMemory(600, 40, 7512)
    with pytest.raises(CompileError, match="holds no 'allocation N"):
        parse_buffer_assignment("BufferAssignment:\n")


def _workload(kind: str) -> Workload:
    if kind == "user":  # a --workload of one's own: the DiT block of examples/
        return load_workload("examples/dit_block.py:make_small")
    return vae_for(_tiny_step()) if kind == "vae" else _tiny_step()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kind", "slice_name", "pick"),
    [
        ("step", "v5e:1x1", 0),
        ("step", "v5e:2x2", -1),
        ("vae", "v5e:2x2", 0),
        ("user", "v5e:2x2", 0),
        ("step", "v6e:2x2", 0),
        ("step", "tpu7x:2x2x1", 0),  # one TensorCore chiplet a device
    ],
)
def test_the_assignment_is_what_the_compiled_program_allocates(
    kind: str,
    slice_name: str,
    pick: int,
    plan_cache_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Steps of a Wan model on each generation, the VAE decoder and a user workload."""
    workload = _workload(kind)
    slice_ = load_slice(slice_name)
    cand = enumerate_candidates(workload, slice_.num_devices).legal[pick]
    own = _own_tmp(tmp_path, monkeypatch)
    found = assigned_memory(workload, cand, slice_)
    assert os.listdir(own) == []  # its dump is gone
    full = compile_candidate(workload, cand, slice_, cache=plan_caches(plan_cache_dir).compiled)
    mem = full.memory
    assert full.ok and mem is not None
    assert found.argument_bytes == mem.argument_bytes
    assert found.output_bytes == mem.output_bytes - mem.alias_bytes
    # memory_analysis' temporaries and the assignment's temp allocation differ by a few
    # hundred KB at most, whatever the program's size (the DiT block: 213 KB allocated,
    # 0 reported; the Wan 2.2 decode of 640x352x41: 15.9 KB of 4.93 GB)
    assert abs(found.temp_bytes - mem.temp_bytes) <= max(256 * 1024, 1e-4 * mem.temp_bytes)
    # and the generated code is what a plan's figure then leaves out
    assert (
        found.total_bytes < mem.total_bytes <= found.total_bytes + mem.generated_code_bytes + 2**18
    )


@pytest.mark.slow
def test_a_cached_assignment_starts_no_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workload, slice_ = _tiny_step(), load_slice("v5e:1x1")
    cand = enumerate_candidates(workload, 1).legal[0]
    cache = plan_caches(tmp_path).buffers
    first = cached_assigned_memory(workload, cand, slice_, cache=cache)
    assert len(list((tmp_path / "buffers").rglob("*.json"))) == 1

    def no_process(*_: object, **__: object) -> AssignedMemory:
        raise AssertionError("a cached assignment started a process")

    monkeypatch.setattr(aoizora.buffer_assignment, "assigned_memory", no_process)
    assert cached_assigned_memory(workload, cand, slice_, cache=cache) == first


def test_a_child_that_overruns_is_ended_and_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workload, slice_ = _tiny_step(), load_slice("v5e:1x1")
    cand = enumerate_candidates(workload, 1).legal[0]
    own = _own_tmp(tmp_path, monkeypatch)
    with pytest.raises(CompileError, match=r"took over 0.01 s \(ASSIGNMENT_TIMEOUT_S\)"):
        assigned_memory(workload, cand, slice_, timeout_s=0.01)
    assert os.listdir(own) == []  # the child was ended and its dump removed
