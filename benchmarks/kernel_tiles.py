"""The splash tiles the kernel's model picks on every generation, beside maxdiffusion's.

    python benchmarks/kernel_tiles.py

For one device's self-attention call of a few published Wan deployments (both CFG passes;
lengths as Stage 1 reads them, padded to 512) it prints, per generation, the tile
:func:`aoizora.stage1.tiles.best_tile` picks, the scoped VMEM limit it needs, its predicted
gain over the 512 tiles, and the gain the model gives maxdiffusion's published tiles
(docs/stage1.md, "The model's tiles beside maxdiffusion's"). No compile; a second.
"""

from __future__ import annotations

from aoizora.stage1.tiles import best_tile, tile_gain_s, tile_limit_kib
from sim.chips import load_chip
from sim.compute import Attention, compute_model_of
from sim.splash_tiles import BASE_TILE

# (name, (lead, q length, kv length, head dim, value dim, calls a step), maxdiffusion's tiles)
WORKLOADS = (
    ("Wan 14B 720p, context 8 (q 9,450 / kv 75,600, 40 heads x CFG 2)",
     (80, 9728, 75776, 128, 128, 40.0),
     ((2048, 4096, 1024), (3072, 2048, 1024), (8192, 1024, 1024))),
    ("Wan 2.1 1.3B 832x480x81, one device (12 heads x CFG 2)",
     (24, 32768, 32768, 128, 128, 30.0), ((2048, 4096, 1024),)),
)  # fmt: skip


def main() -> None:
    for generation in ("v5e", "v5p", "v6e", "tpu7x"):
        model = compute_model_of(load_chip(generation).per_device())
        for name, call, published in WORKLOADS:
            calls = (call,)
            lead, sq, skv, d, dv, n = call
            base_s = n * model.attention_s(Attention(lead, sq, skv, d, dv, 512, 512, "splash", 512))
            tile, gain_s = best_tile(calls, model)
            limit = tile_limit_kib(calls, model, tile)
            theirs = ", ".join(
                f"{t}: {100 * -tile_gain_s(calls, model, t) / base_s:.1f} %" for t in published
            )
            print(
                f"{generation:6s} {name}: picks {tile or BASE_TILE} "
                f"(scoped VMEM {f'{limit // 1024} MiB' if limit else 'default'}), "
                f"{100 * -gain_s / base_s:.1f} % over the 512s; maxdiffusion's {theirs}"
            )


if __name__ == "__main__":
    main()
