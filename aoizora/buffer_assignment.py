"""XLA's own per-device memory of a program, in seconds: its buffer assignment, no code.

An AOT compile for a TPU runs XLA's HLO passes and buffer assignment in a second or
two, then spends the rest -- minutes for a VAE decoder, 2-10 s a convolution --
generating the TPU's code (docs/serving.md, "Why the VAE is ranked by Stage 1"). The
memory a program needs is decided before that: the buffer assignment places every
argument, output and temporary, and XLA's dump writes it out then
(``--xla_dump_to``: ``*after_optimizations-buffer-assignment.txt``). So
:func:`assigned_memory` compiles in a child process with the dump on, reads the
assignment as soon as the dump is complete, and ends the child before the code
generation: XLA's figure for about the price of a lowering (Wan 2.1 VAE decode of
832x480x21 on v5e:1x1: 3.7 s, where its compile takes minutes).

:func:`parse_buffer_assignment` reads the dump's allocations: those of the default memory
space (HBM; a ``color`` other than 0 is VMEM or the DMAs' sync flags), split into
parameters, live-out outputs and temporaries (thread-local and constant allocations
left out, as ``memory_analysis()`` leaves them). Their sum is
:attr:`aoizora.compile.MemoryUsage.total_bytes` without the generated code, which only
code generation knows (docs/stage1.md, "Memory per chip": 6-22 MB a step, 141-154 MB a
VAE decode). ``tests/aoizora/test_buffer_assignment.py`` holds the parse to the compiled
program's ``memory_analysis()``.

    >>> text = '''BufferAssignment:
    ... allocation 0: size 512, page 0, thread-local:
    ... allocation 1: size 4096, page 0, parameter 0, shape |f32[1024]| at ShapeIndex {}:
    ... allocation 2: size 2048, page 0, output shape is |f32[512]|, maybe-live-out:
    ... allocation 3: size 9000, page 0, preallocated-temp:
    ... allocation 4: size 92, color 2, page 0, preallocated-temp:
    ... allocation 5: size 65536, color 1, page 0, preallocated-temp:
    ... '''
    >>> m = parse_buffer_assignment(text)
    >>> m.argument_bytes, m.output_bytes, m.temp_bytes, m.total_bytes
    (4096, 2048, 9000, 15144)
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cloudpickle

from aoizora.cache import JsonCache
from aoizora.candidates.space import Candidate
from aoizora.compile import candidate_key, lower
from aoizora.errors import CompileError
from aoizora.interrupts import on_hard_exit, pause_point, worker_start
from aoizora.resources import take_exceeded
from aoizora.workloads.base import Workload
from sim.topology import Slice

__all__ = [
    "ASSIGNMENT_TIMEOUT_S",
    "AssignedMemory",
    "assigned_memory",
    "cached_assigned_memory",
    "parse_buffer_assignment",
]

# How long a child may take to reach the buffer assignment before it is ended: lowering
# and XLA's passes take seconds (the 14B step on v5e:8x8 included), code generation minutes.
ASSIGNMENT_TIMEOUT_S = 300.0
_ASSIGNMENT_SUFFIX = "after_optimizations-buffer-assignment.txt"
# Written after the assignment file is complete (the dump writes them one after another).
_AFTER_SUFFIX = ".after_optimizations.txt"
_POLL_S = 0.05
_CACHE_BACKEND = "tpu buffer assignment"  # a cache key part no compile uses
_FIELDS = ("argument_bytes", "output_bytes", "temp_bytes")
_EXIT_S = 10.0  # how long the child may take to clean up after answering
_ALLOCATION = re.compile(r"^allocation \d+: size (\d+), (.*)$", re.MULTILINE)
_COLOR = re.compile(r"\bcolor (\d+)\b")


@dataclass(frozen=True)
class AssignedMemory:
    """One device's HBM as XLA's buffer assignment places it (bytes): what
    ``memory_analysis()`` would report, less the generated code."""

    argument_bytes: int
    output_bytes: int
    temp_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.argument_bytes + self.output_bytes + self.temp_bytes


def parse_buffer_assignment(text: str) -> AssignedMemory:
    """The HBM allocations of an XLA buffer-assignment dump (module docstring). Raises
    :class:`CompileError` when ``text`` holds no allocation."""
    arguments = outputs = temps = 0
    found = False
    for match in _ALLOCATION.finditer(text):
        found = True
        size, rest = int(match.group(1)), match.group(2)
        color = _COLOR.search(rest)
        if color is not None and color.group(1) != "0":
            continue  # VMEM, or the DMAs' sync flags: not HBM
        if "thread-local" in rest or re.search(r"\bconstant\b", rest):
            continue
        if re.search(r"\bparameter \d+", rest):
            arguments += size
        elif "maybe-live-out" in rest:
            outputs += size
        else:
            temps += size
    if not found:
        raise CompileError(
            "the XLA buffer-assignment dump holds no 'allocation N: size S, ...' line; "
            f"it starts {text[:120]!r}"
        )
    return AssignedMemory(arguments, outputs, temps)


def _complete_assignment(dump_dir: Path) -> Path | None:
    """The dump's buffer-assignment file once the file written after it exists."""
    names = os.listdir(dump_dir)
    done = [n for n in names if n.endswith(_ASSIGNMENT_SUFFIX)]
    if len(done) == 1 and any(n.endswith(_AFTER_SUFFIX) for n in names):
        return dump_dir / done[0]
    return None


def _compile_in_thread(lowered: Any, dump_dir: str, errors: list[BaseException]) -> None:
    options = {"xla_dump_to": dump_dir, "xla_dump_hlo_as_text": True}
    try:
        lowered.compile(compiler_options=options)
    except BaseException as exc:  # reported by the child's main thread
        errors.append(exc)


def _child(payload: bytes, dump_dir: str, conn: Any, parent_pid: int) -> None:
    """The child process: lower, compile with the dump in a thread, send the assignment
    (or the error, as text) as soon as it is written, and end before code generation."""
    worker_start(parent_pid)
    try:
        workload, candidate, slice_, order = cloudpickle.loads(payload)
        lowered = lower(workload, candidate, slice_, order=order)
        errors: list[BaseException] = []
        thread = threading.Thread(
            target=_compile_in_thread, args=(lowered, dump_dir, errors), daemon=True
        )
        thread.start()
        while (found := _complete_assignment(Path(dump_dir))) is None:
            if not thread.is_alive():
                why = repr(errors[0]) if errors else "no buffer assignment was dumped"
                raise CompileError(f"compiling for the buffer assignment failed: {why}")
            time.sleep(_POLL_S)
        conn.send(("ok", parse_buffer_assignment(found.read_text(encoding="utf-8"))))
    except BaseException as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()
        os._exit(0)  # the compile thread is generating code: end it with the process


def assigned_memory(
    workload: Workload,
    candidate: Candidate,
    slice_: Slice,
    *,
    order: Sequence[int] | None = None,
    timeout_s: float = ASSIGNMENT_TIMEOUT_S,
) -> AssignedMemory:
    """XLA's buffer assignment of ``candidate``'s program on ``slice_`` (device ``order``
    as :func:`aoizora.compile.lower` takes it), from a child process ended before code
    generation. Raises :class:`CompileError` when lowering or XLA's passes fail, or the
    assignment takes over ``timeout_s``."""
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    payload = cloudpickle.dumps((workload, candidate, slice_, None if order is None else
                                 tuple(order)))  # fmt: skip
    # the parent owns the dump: it is removed however the child ends
    dump_dir = tempfile.mkdtemp(prefix="aoizora-buffers-")
    process = context.Process(
        target=_child, args=(payload, dump_dir, send, os.getpid()), name="aoizora-buffers",
        daemon=True,
    )  # fmt: skip
    process.start()
    send.close()
    unregister = on_hard_exit(process.kill)
    try:
        pause_point("buffer assignment")  # a test seam (aoizora.interrupts), a no-op otherwise
        if not receive.poll(timeout_s):
            raise CompileError(
                f"XLA's buffer assignment of {workload.name} {candidate.id} on {slice_.name} "
                f"took over {timeout_s:g} s (ASSIGNMENT_TIMEOUT_S); its compile decides"
            )
        try:
            status, value = receive.recv()
        except EOFError as exc:
            over = take_exceeded()  # the memory bound's watchdog killed it
            if over is not None:
                raise over from None
            raise CompileError(
                f"the buffer-assignment process for {workload.name} {candidate.id} ended "
                f"without an answer (exit code {process.exitcode})"
            ) from exc
        if status != "ok":
            raise CompileError(
                f"XLA's buffer assignment of {workload.name} {candidate.id} on "
                f"{slice_.name} failed: {value}"
            )
        process.join(_EXIT_S)  # the child ends itself once it has answered
        return value
    finally:
        unregister()
        if process.is_alive():
            with contextlib.suppress(Exception):
                process.kill()
        process.join()
        receive.close()
        shutil.rmtree(dump_dir, ignore_errors=True)


def cached_assigned_memory(
    workload: Workload, candidate: Candidate, slice_: Slice, *, cache: JsonCache | None
) -> AssignedMemory:
    """:func:`assigned_memory` at the default device order, kept in ``cache`` (the
    ``buffers/`` cache of :func:`aoizora.cache.plan_caches`) under the workload's
    ``cache_id``, the candidate and the slice: a warm plan does not start a process."""
    key = candidate_key(workload, candidate, slice_, _CACHE_BACKEND, ())
    hit = cache.get(key) if cache is not None else None
    if hit is not None:
        with contextlib.suppress(KeyError, TypeError, ValueError):
            return AssignedMemory(**{k: int(hit[k]) for k in _FIELDS})
    found = assigned_memory(workload, candidate, slice_)
    if cache is not None:
        cache.put(key, {k: getattr(found, k) for k in _FIELDS})
    return found
