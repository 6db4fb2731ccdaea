"""The program zoo (``aoizora.zoo``) timed and profiled on one TPU v5e chip.

Run on the chip from a checkout (docs/measure.md) as
``OUT=DIR START=0 STOP=240 DEADLINE_S=420 python3 validation/v5e/zoo/measure.py``: for each
program ``p<START>`` .. ``p<STOP-1>`` it compiles the program as ``aoizora measure`` runs a
plan's step on one chip (``aoizora.compile.jit_step``, the workload's first rule set, no
compiler option), times it (2 warm-up calls, 5 repeats, each to ``block_until_ready``), reads
the memory it holds and the compiler's memory analysis, and profiles 3 calls: the HLO that
ran and the per-op device times go to ``$OUT/zoo/<id>.{hlo.txt,ops.json}.gz``, one JSON line
a program to ``$OUT/zoo/rows.jsonl``. Compiles run ahead in threads while the chip times the
previous program. No new program starts after ``DEADLINE_S``; ``$OUT/zoo.tar.gz`` holds
everything (rewritten every 20 programs, so a call cut short keeps what it measured).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import tarfile
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh

from aoizora.candidates.space import Candidate
from aoizora.compile import jit_step
from aoizora.measure.capture import save_profiled_call
from aoizora.measure.memory import held_bytes, own_held_bytes, reserved_bytes
from aoizora.measure.steps import random_arguments
from aoizora.measure.timing import time_calls
from aoizora.zoo import Program, catalog, workload

_MODULE = re.compile(r"^HloModule (\S+?),", re.M)


def _compile(item: Program, device: Any) -> tuple[Any, Any, float]:
    t0 = time.perf_counter()
    w = workload(item)
    rules = w.rule_sets[0]
    axes = tuple(sorted({a for _, mesh_axes in rules.pairs for a in mesh_axes}))
    cand = Candidate(axes, (1,) * len(axes), rules.name, rules, "none")
    mesh = Mesh(np.array([device]).reshape((1,) * len(axes)), axes)
    backend = "cpu" if device.platform == "cpu" else "tpu"  # a local smoke run: ONLY=p011
    compiled = jit_step(w, cand, mesh, backend).lower(*w.abstract_args).compile()
    return w, compiled, time.perf_counter() - t0


def _memory(compiled: Any) -> dict[str, int]:
    m = compiled.memory_analysis()
    keys = ("argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes",
            "alias_size_in_bytes", "generated_code_size_in_bytes")  # fmt: skip
    return {k: int(getattr(m, k, 0) or 0) for k in keys}


def _measure(item: Program, w: Any, compiled: Any, out: Path) -> dict[str, Any]:
    devices = [jax.devices()[0]]
    before = reserved_bytes(devices)
    args = random_arguments(w.abstract_args, compiled.input_shardings[0])
    timing = time_calls(lambda: compiled(*args), warmup=2, repeats=5)
    result = compiled(*args)
    jax.block_until_ready(result)
    held = own_held_bytes(held_bytes(devices), before, reserved_bytes(devices))
    del result
    text = compiled.as_text()
    match = _MODULE.search(text)
    prof = save_profiled_call(lambda: compiled(*args), hlo_text=text,
                              module=match.group(1) if match else None, out=out,
                              name=item.id)  # fmt: skip
    return {"id": item.id, "family": item.family, "params": dict(item.params),
            "name": w.name, "samples_s": list(timing.samples_s),
            "median_s": timing.median_s, "device_s": prof.step_s,
            "peak_hbm_bytes": held, "memory": _memory(compiled)}  # fmt: skip


def _tar(root: Path) -> None:
    tmp = root.parent / "zoo.tar.gz.tmp"
    with tarfile.open(tmp, "w:gz") as tar:
        tar.add(root, arcname="zoo")
    tmp.replace(root.parent / "zoo.tar.gz")


def main() -> None:
    root = Path(os.environ["OUT"]) / "zoo"
    root.mkdir(parents=True, exist_ok=True)
    start, stop = int(os.environ.get("START", 0)), int(os.environ.get("STOP", 240))
    deadline = time.time() + float(os.environ.get("DEADLINE_S", 420))
    only = os.environ.get("ONLY", "").split()
    items = [p for p in catalog(stop)[start:] if not only or p.id in only]
    device = jax.devices()[0]
    pool = concurrent.futures.ThreadPoolExecutor(int(os.environ.get("THREADS", 6)))
    # SERIAL=1 compiles each program just before timing it: a compile running beside a
    # timed call holds the interpreter's lock and slows the host's launch (first calls).
    serial = os.environ.get("SERIAL") == "1"
    futures: list[Any] = [None if serial else pool.submit(_compile, p, device) for p in items]
    if os.environ.get("BATCH") == "1":
        # BATCH=1: compile first (until TIME_AT_S before the deadline), then time what
        # compiled with nothing else running
        compile_until = deadline - float(os.environ.get("TIME_AT_S", 90))
        concurrent.futures.wait(futures, timeout=max(0.0, compile_until - time.time()))
        pool.shutdown(wait=True, cancel_futures=True)  # no compile runs while timing
        kept = [(p, f) for p, f in zip(items, futures, strict=True) if not f.cancelled()]
        items, futures = [p for p, _ in kept], [f for _, f in kept]
        print(f"compiled {len(items)} programs; timing them", flush=True)
    done = 0
    with (root / "rows.jsonl").open("a") as rows:
        for item, fut in zip(items, futures, strict=True):
            if time.time() > deadline:
                print(f"deadline: stopped before {item.id}", flush=True)
                break
            t0 = time.time()
            try:
                w, compiled, compile_s = _compile(item, device) if serial else fut.result()
                row = _measure(item, w, compiled, root)
                row["compile_s"] = compile_s
                said = f"{row['median_s'] * 1e3:.3f} ms (device {row['device_s'] * 1e3:.3f})"
            except Exception as exc:  # this program only
                row = {"id": item.id, "family": item.family, "params": dict(item.params),
                       "error": f"{type(exc).__name__}: {str(exc)[:400]}"}  # fmt: skip
                said = "FAILED " + row["error"][:200]
            rows.write(json.dumps(row, sort_keys=True, default=list) + "\n")
            rows.flush()
            done += 1
            print(f"{item.id} {item.family} {time.time() - t0:.1f}s {said}", flush=True)
            if done % 20 == 0:
                _tar(root)
    pool.shutdown(wait=False, cancel_futures=True)
    _tar(root)


if __name__ == "__main__":
    main()
