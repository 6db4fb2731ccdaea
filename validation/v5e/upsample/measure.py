"""Nearest 2x up-sampling then a 3x3 conv (the Wan decoders' Resample), timed per op on a chip.

Run on one TPU v5e chip (jax 0.10.2, libtpu 0.0.42.1, 6 December 2026) from a checkout with
``OUT=DIR python3 validation/v5e/upsample/measure.py``: for each ``(b, h, w, c)`` it
compiles ``conv3x3(repeat(repeat(x, 2, axis=1), 2, axis=2))`` (``c`` to ``c // 2``
channels, as the decoder's ``spatial_conv``) and writes the HLO that ran and the per-op
device times of three executions (``aoizora.measure.capture``, ``aoizora.hlo.profile``)
under ``$OUT/r``. ``python benchmarks/upsample_reshapes.py`` reads them (validation/README.md,
section 17). ``ONLY=text`` keeps the cases whose name holds it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

from aoizora.measure.capture import save_profiled_call

CASES = (
    (4, 120, 208, 384), (4, 92, 160, 384), (4, 120, 160, 384), (4, 80, 120, 384),
    (4, 144, 256, 384), (4, 100, 160, 384), (4, 108, 160, 384), (4, 112, 160, 384),
    (4, 120, 208, 512), (4, 88, 160, 512), (4, 96, 176, 512), (4, 44, 80, 512),
    (4, 60, 104, 1024), (4, 68, 120, 1024), (4, 52, 88, 1024), (4, 72, 128, 1024),
    (1, 180, 320, 384), (1, 120, 208, 384), (2, 120, 208, 384), (4, 120, 104, 384),
    (4, 60, 208, 384), (8, 120, 208, 384),
)  # fmt: skip


def up_conv(x: jax.Array, w: jax.Array) -> jax.Array:
    y = jnp.repeat(jnp.repeat(x, 2, axis=1), 2, axis=2)
    return jax.lax.conv_general_dilated(
        y, w, (1, 1), ((1, 1), (1, 1)), dimension_numbers=("NHWC", "HWIO", "NHWC")
    )


def _bf16(seed: int, shape: tuple[int, ...], scale: float) -> jax.Array:
    return (jax.random.normal(jax.random.key(seed), shape, jnp.float32) * scale).astype(
        jnp.bfloat16
    )


def one(out: Path, b: int, h: int, w: int, c: int) -> str:
    name = f"up_b{b}_h{h}_w{w}_c{c}"

    def fn(x: jax.Array, k: jax.Array) -> Any:
        return up_conv(x, k)

    fn.__name__ = name  # the module is jit_<name>: the profile finds it by that
    x, k = _bf16(0, (b, h, w, c), 0.1), _bf16(1, (3, 3, c, c // 2), 0.02)
    compiled = jax.jit(fn).lower(x, k).compile()
    prof = save_profiled_call(
        lambda: compiled(x, k),
        hlo_text=compiled.as_text(),
        module=f"jit_{name}",
        out=out,
        name=name,
    )
    top = sorted(prof.ops, key=lambda o: -o.per_step_s)[:4]
    return " ".join(f"{o.name}:{o.per_step_s * 1e3:.3f}ms" for o in top)


def main() -> None:
    out = Path(os.environ["OUT"]) / "r"
    out.mkdir(parents=True, exist_ok=True)
    only = os.environ.get("ONLY")
    for b, h, w, c in CASES:
        if only and only not in f"up_b{b}_h{h}_w{w}_c{c}":
            continue
        t0 = time.time()
        try:
            said = one(out, b, h, w, c)
        except Exception as exc:  # this case only
            said = f"FAILED {type(exc).__name__}: {str(exc)[:300]}"
        print(f"up_b{b}_h{h}_w{w}_c{c} {time.time() - t0:.1f}s {said}", flush=True)


if __name__ == "__main__":
    main()
