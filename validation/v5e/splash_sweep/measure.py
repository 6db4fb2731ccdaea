"""The splash kernel beyond the planned tiles: what compiles under which scoped VMEM limit,
and how fast each tile runs, on one TPU v5e chip.

Run on one TPU v5e chip from a checkout (jax 0.10.2, libtpu 0.0.42.1, docs/measure.md) with
``OUT=DIR python3 validation/v5e/splash_sweep/measure.py``: for each (heads, length) of
:data:`SHAPES` and each tile of :data:`TILES` it compiles jax's splash kernel as a step calls
it (:mod:`aoizora.measure.kernels`, kind ``tile``, segment ids on) under the compiler's
default scoped VMEM limit and, where that runs out of VMEM, under :data:`RAISED_KIB`; it
times the tile from a device profile (five executions) under the first limit that compiled.
Every case's verdict and time is written to ``$OUT/sweep.json`` as it is measured (an
interrupted run keeps what it did). ``ONLY=text`` keeps the cases whose name holds it.
The rows are the kernel model's data (``aoizora calibrate --splash-kernel``), split once by
a seed into a fit half and a held-out half (validation/README.md, section 19).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from aoizora.measure.kernels import KernelCase, KernelResult, run_kernels

# (heads, tokens): Wan 2.1 1.3B at 832x480x81 (32,760) and 832x480x97 (39,000) on one chip,
# TI2V-5B at 1280x704x61 (14,080, 24 heads), a 14B 720p context shard of 8 (9,450, 40 heads).
SHAPES = ((12, 32760), (12, 39000), (24, 14080), (40, 9450))
# (block_q, block_kv, block_kv_compute): the kv block to 16,384, the q block to 4,096,
# compute blocks 256-2048, blocks that are not powers of two.
TILES = (
    (512, 512, 512), (512, 1024, 512), (512, 2048, 512), (512, 2048, 1024),
    (512, 3072, 512), (512, 4096, 512), (512, 4096, 1024), (512, 4096, 2048),
    (512, 6144, 512), (512, 8192, 512), (512, 8192, 1024), (512, 16384, 512),
    (256, 4096, 256), (768, 4096, 512), (1024, 2048, 512), (1024, 4096, 512),
    (1024, 8192, 512), (1536, 3072, 512), (2048, 2048, 512), (2048, 4096, 512),
    (2048, 2048, 1024), (4096, 1024, 512),
)  # fmt: skip
RAISED_KIB = 98304  # 96 MiB of the core's 128 MiB of VMEM


def case(heads: int, length: int, tile: tuple[int, int, int], limit_kib: int) -> KernelCase:
    params = {"heads": heads, "q_length": length, "kv_length": length, "block_q": tile[0],
              "block_kv": tile[1], "block_kv_compute": tile[2],
              "vmem_limit_kib": limit_kib}  # fmt: skip
    tag = "_".join(f"{k}{v}" for k, v in params.items())
    return KernelCase("tile", f"tile_{tag}", tuple(params.items()))


def one(heads: int, length: int, tile: tuple[int, int, int]) -> list[KernelResult]:
    done = run_kernels([case(heads, length, tile, 0)], executions=5)
    if "VmemOom" in done[0].error:
        done += run_kernels([case(heads, length, tile, RAISED_KIB)], executions=5)
    return list(done)


def main() -> None:
    out = Path(os.environ["OUT"])
    only = os.environ.get("ONLY", "")
    import jax

    provenance: dict[str, Any] = {
        "device_kind": jax.devices()[0].device_kind, "jax": jax.__version__,
        "date": time.strftime("%Y-%m-%d"),
        "command": "OUT=DIR python3 validation/v5e/splash_sweep/measure.py",
    }  # fmt: skip
    try:
        import libtpu

        provenance["libtpu"] = getattr(libtpu, "__version__", "")
    except ImportError:
        pass
    rows: list[dict[str, Any]] = []
    for heads, length in SHAPES:
        for tile in TILES:
            if only and only not in case(heads, length, tile, 0).name:
                continue
            t0 = time.perf_counter()
            for r in one(heads, length, tile):
                rows.append(r.to_json_dict())
                ms = r.median_s * 1e3 if r.samples_s else float("nan")
                print(f"{r.case.name}: {ms:.3f} ms {r.error[:90]}", flush=True)
            print(f"  ({time.perf_counter() - t0:.1f} s)", file=sys.stderr, flush=True)
            doc = {"format": "aoizora-kernels/1", "provenance": provenance, "kernels": rows}
            (out / "sweep.json").write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
