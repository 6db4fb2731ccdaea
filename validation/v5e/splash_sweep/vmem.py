"""The scoped VMEM each splash tile needs, read from the TPU compiler itself (no TPU).

``python validation/v5e/splash_sweep/vmem.py OUT.json [GENERATION]`` compiles jax's splash
kernel as a step calls it (segment ids on, 12 heads of 32,760 tokens, head dim 128: the
operands live in HBM, as in every Wan step) ahead of time for ``GENERATION`` (default
``v5e:1x1``; libtpu's AOT topologies, the pinned libtpu) under scoped VMEM limits
(``--xla_tpu_scoped_vmem_limit_kib``) chosen by bisection, and writes for each tile of
:data:`TILES` the largest whole MiB it fails under (``CompileTimeScopedVmemOom``) and the
smallest it compiles under. ``aoizora calibrate ... --splash-kernel --vmem OUT.json`` fits
the kernel's VMEM terms to them (sim/splash_kernel.py). About a minute a tile on 2 cores.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from aoizora.tpu import topology_devices
from aoizora.workloads.splash import splash_attention
from sim.topology import parse_slice_spec

HEADS, LENGTH, HEAD_DIM = 12, 32760, 128
TILES = (
    (512, 512, 512), (512, 2048, 512), (512, 4096, 512), (512, 8192, 512), (512, 16384, 512),
    (1024, 2048, 512), (1024, 4096, 512), (2048, 2048, 512), (512, 4096, 1024),
    (512, 4096, 2048), (512, 8192, 1024), (1024, 1024, 1024), (2048, 1024, 512),
    (4096, 1024, 512), (1024, 8192, 512), (768, 4096, 512), (1536, 3072, 512),
    (2048, 2048, 1024), (256, 4096, 256), (512, 2048, 1024), (1024, 1024, 256),
    (2048, 4096, 512), (512, 6144, 512), (512, 3072, 512),
)  # fmt: skip


def compiles(lowered: object, limit_kib: int) -> bool:
    try:
        lowered.compile(compiler_options={"xla_tpu_scoped_vmem_limit_kib": str(limit_kib)})  # type: ignore[attr-defined]
    except Exception as exc:  # only the scoped-VMEM verdict is an answer
        if "ScopedVmemOom" not in str(exc) and "scoped vmem" not in str(exc):
            raise
        return False
    return True


def bracket(lowered: object, top_mib: int = 128) -> tuple[int, int]:
    """(largest MiB it fails under, smallest MiB it compiles under)."""
    lo, hi = 0, top_mib
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if compiles(lowered, mid * 1024) else (mid, hi)
    return lo, hi


def main() -> None:
    out, gen = Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "v5e:1x1"
    mesh = Mesh(topology_devices(parse_slice_spec(gen))[:1], ("x",))
    sds = jax.ShapeDtypeStruct((1, HEADS, LENGTH, HEAD_DIM), jnp.bfloat16,
                               sharding=NamedSharding(mesh, PartitionSpec()))  # fmt: skip
    rows = []
    for tile in TILES:
        t0 = time.perf_counter()

        def attend(q: jax.Array, k: jax.Array, v: jax.Array, tile: tuple = tile) -> jax.Array:
            valid = jnp.ones((k.shape[2],), jnp.bool_)
            out, _ = splash_attention(q, k, v, valid, scale=0.1, with_lse=False, block_sizes=tile)
            return out

        lo, hi = bracket(jax.jit(attend).trace(sds, sds, sds).lower())
        rows.append({"tile": list(tile), "heads": HEADS, "length": LENGTH, "head_dim": HEAD_DIM,
                     "fails_mib": lo, "compiles_mib": hi})  # fmt: skip
        print(tile, lo, hi, f"{time.perf_counter() - t0:.0f} s", flush=True)
        doc = {"generation": gen, "jax": jax.__version__,
               "command": f"python validation/v5e/splash_sweep/vmem.py OUT.json {gen}",
               "tiles": rows}  # fmt: skip
        out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
