"""Compile seconds for the Wan 2.1 step on v5e slices, cold and with a warm cache.

Each case compiles one candidate -- the "maxdiffusion recipe" baseline (data = 2 x
context = rest, maxdiffusion rules, K/V all-gathered, mesh_utils device order) --
twice, each time in a fresh subprocess so that no in-process cache helps:

* cold: an empty persistent compilation cache directory;
* warm: the same directory again (jax's persistent cache hit).

Usage:
    .venv/bin/python benchmarks/compile_bench.py                  # every case
    .venv/bin/python benchmarks/compile_bench.py --case wan2.1-1.3b:480p:v5e:2x4
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

__all__ = ["CASES", "main", "run_case"]

CASES: tuple[str, ...] = tuple(
    f"{model}:{res}:{sl}"
    for model, res in (("wan2.1-1.3b", "480p"), ("wan2.1-14b", "720p"))
    for sl in ("v5e:2x2", "v5e:2x4", "v5e:4x4")
)


def run_case(case: str, cache_dir: str) -> dict[str, object]:
    """Compile one case in this process; returns the figures as a JSON-ready dict."""
    from aoizora.cache import plan_caches
    from aoizora.candidates.baselines import baseline_candidates
    from aoizora.compile import compile_candidate
    from aoizora.workloads.wan import parse_resolution, wan_workload
    from sim.topology import load_slice

    model, res, chip, shape = case.split(":")
    slice_ = load_slice(f"{chip}:{shape}")
    wl = wan_workload(model, parse_resolution(res))
    base = {b.name: b for b in baseline_candidates(wl, slice_)}["maxdiffusion recipe"]
    t0 = time.perf_counter()
    result = compile_candidate(
        wl, base.candidate, slice_, order=base.device_order, cache=plan_caches(cache_dir).compiled
    )
    mem = result.memory
    return {
        "case": case,
        "candidate": result.candidate_id,
        "backend": result.backend,
        "ok": result.ok,
        "error": (result.error or "").splitlines()[0][:300] if result.error else "",
        "lower_s": round(result.lower_s, 2),
        "compile_s": round(result.compile_s, 2),
        "wall_s": round(time.perf_counter() - t0, 2),
        "per_chip_gib": None if mem is None else round(mem.total_bytes / 2**30, 2),
        "feasible": result.feasible,
        "hlo_chars": len(result.hlo_text),
        "cache_hit": result.cache_hit,
    }


def _subprocess(case: str, cache_dir: str) -> dict[str, object]:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    cmd = [sys.executable, __file__, "--child", case, "--cache-dir", cache_dir]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    for line in reversed(out.stdout.splitlines()):
        if line.startswith("{"):
            parsed: dict[str, object] = json.loads(line)
            return parsed
    return {"case": case, "ok": False, "error": out.stderr.strip().splitlines()[-1:]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", help=f"one of {list(CASES)}")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--cache-dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(run_case(args.child, args.cache_dir)))
        return 0
    cases = args.case or list(CASES)
    header = (
        f"{'case':34} {'candidate':42} {'lower':>6} {'cold':>7} {'warm':>7} {'GiB/chip':>8} fits"
    )
    print(header)
    for case in cases:
        with tempfile.TemporaryDirectory(prefix="aoizora-cc-") as cache_dir:
            cold = _subprocess(case, cache_dir)
            warm = _subprocess(case, cache_dir) if cold.get("ok") else {}
        if warm and not warm.get("cache_hit"):
            warm["compile_s"] = f"{warm.get('compile_s')}(miss)"
        if not cold.get("ok") and cold.get("feasible") is False:
            # The TPU compiler refused the program for HBM: a verdict, with its time.
            print(
                f"{case:34} {cold['candidate']!s:42} {cold['lower_s']!s:>6} "
                f"{cold['compile_s']!s:>7} {'-':>7} {'OOM':>8} False  ({cold['error']!s:.160})",
                flush=True,
            )
            continue
        if not cold.get("ok"):
            print(f"{case:34} FAILED: {cold.get('error')}", flush=True)
            continue
        print(
            f"{case:34} {cold['candidate']!s:42} {cold['lower_s']!s:>6} {cold['compile_s']!s:>7} "
            f"{warm.get('compile_s', '-')!s:>7} {cold['per_chip_gib']!s:>8} {cold['feasible']}"
            + ("" if cold.get("backend") == "tpu" else "  (CPU FALLBACK)"),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
