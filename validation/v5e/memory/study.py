"""On-chip memory study (issue 39): XLA's memory analysis against what the chip holds.

For each program (a Wan step or a VAE decode on one chip, its first legal sharding):
``memory_stats()`` at each stage, ``compiled.memory_analysis()``, three timed calls, and
the largest ballast (zeros held on the device beside the program, 64 MiB steps) with which
the program still runs -- what it needs is the limit less that ballast. It wrote
``validation/v5e/memory/study.json`` (validation/README.md, section 7). Run on a TPU VM from a
checkout, one line of JSON per program into ``$OUT/mem.jsonl``::

    OUT=/tmp/out PYTHONPATH=$PWD python3 validation/v5e/memory/study.py \
        vae:wan2.1-1.3b:832x480x21 step:wan2.2-ti2v-5b:1280x704x61 step:wan2.1-1.3b:832x480x21:1

(``kind:model:WxHxF[:vae_decode_chunk]``; ``BACKEND=cpu`` runs it on the host, without
memory statistics.)
"""

import gc
import json
import os
import sys
import time
import traceback
from typing import Any

import jax
import jax.numpy as jnp

from aoizora.candidates.space import enumerate_candidates
from aoizora.compile import jit_step, make_mesh
from aoizora.measure.steps import random_arguments
from aoizora.request.clip_plan import vae_for
from aoizora.workloads.clip import Clip
from aoizora.workloads.wan import wan_workload

BALLAST_STEP = 64 << 20  # the ballast search's resolution


def stats(dev: Any) -> dict[str, int]:
    return {k: int(v) for k, v in (dev.memory_stats() or {}).items()}


def log(out: str, rec: dict[str, Any]) -> None:
    with open(f"{out}/mem.jsonl", "a") as f:
        f.write(json.dumps(rec) + "\n")
    print(json.dumps({k: v for k, v in rec.items() if k != "stats"})[:600], flush=True)


def run_once(compiled: Any, args: Any) -> None:
    out = compiled(*args)
    jax.block_until_ready(out)


def ballast_search(dev: Any, compiled: Any, args: Any, rec: dict[str, Any]) -> None:
    """The largest ballast (zeros on the device) with which ``compiled`` still runs."""
    limit = rec["stats_after"].get("bytes_limit", 0)
    hi = max(0, limit - rec["stats_after"].get("bytes_in_use", 0))
    need = rec["analysis"]["temp_size_in_bytes"] + rec["analysis"]["output_size_in_bytes"]
    lo = max(0, min(hi, hi - int(need * 1.25)) // BALLAST_STEP * BALLAST_STEP)
    probes: list[Any] = []

    def probe(size: int) -> bool:
        ballast = None
        try:
            ballast = jnp.zeros((size,), jnp.uint8, device=dev)
            ballast.block_until_ready()
            run_once(compiled, args)
            probes.append((size, True))
            return True
        except Exception as e:  # out of memory: the ballast is too big
            probes.append((size, False, str(e).splitlines()[0][:200]))
            return False
        finally:
            del ballast
            gc.collect()

    if lo > 0 and not probe(lo):
        hi, lo = lo, 0
    while hi - lo > BALLAST_STEP:
        mid = (lo + hi) // 2 // BALLAST_STEP * BALLAST_STEP
        if probe(mid):
            lo = mid
        else:
            hi = mid
    rec.update(ballast_ok_bytes=lo, ballast_fail_bytes=hi, probes=probes)


def study(dev: Any, spec: list[str]) -> dict[str, Any]:
    kind, model, clip_s = spec[:3]
    chunk = int(spec[3]) if len(spec) > 3 else 1
    w, h, f = map(int, clip_s.split("x"))
    rec: dict[str, Any] = {"what": kind, "model": model, "clip": clip_s, "chunk": chunk}
    step = wan_workload(model, Clip(w, h, f))
    wl = vae_for(step, chunk=chunk) if kind == "vae" else step
    cand = enumerate_candidates(wl, 1).legal[0]
    rec.update(workload=wl.name, candidate=cand.id)
    mesh = make_mesh(cand, [dev])
    gc.collect()
    rec["stats_before"] = stats(dev)
    t0 = time.perf_counter()
    jitted = jit_step(wl, cand, mesh, os.environ.get("BACKEND", "tpu"))
    compiled = jitted.lower(*wl.abstract_args).compile()
    rec["compile_s"] = time.perf_counter() - t0
    ma = compiled.memory_analysis()
    keys = ("argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes",
            "temp_size_in_bytes", "generated_code_size_in_bytes")  # fmt: skip
    rec["analysis"] = {k: int(getattr(ma, k)) for k in keys}
    rec["stats_compiled"] = stats(dev)
    args = random_arguments(wl.abstract_args, compiled.input_shardings[0])
    jax.block_until_ready(args)
    rec["stats_args"] = stats(dev)
    out = compiled(*args)
    jax.block_until_ready(out)
    rec["stats_run1"] = stats(dev)  # the outputs alive: what the program holds
    del out
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        run_once(compiled, args)
        times.append(time.perf_counter() - t0)
    rec["times_s"] = times
    rec["stats_after"] = stats(dev)
    ballast_search(dev, compiled, args, rec)
    rec["stats_end"] = stats(dev)
    return rec


def main() -> None:
    out = os.environ["OUT"]
    dev = jax.devices()[0]
    log(out, {"what": "device", "kind": dev.device_kind, "stats": stats(dev),
              "jax": jax.__version__})  # fmt: skip
    for arg in sys.argv[1:]:  # kind:model:WxHxF[:chunk]
        spec = arg.split(":")
        try:
            rec = study(dev, spec)
        except Exception as e:  # a program that does not fit is a finding: record it
            error = "".join(traceback.format_exception_only(type(e), e))[-800:]
            rec = {"what": spec[0], "model": spec[1], "clip": spec[2], "error": error}
        gc.collect()
        log(out, rec)


if __name__ == "__main__":
    main()
