"""XLA attention's softmax alone with its value product, timed per op on a chip.

Run on one TPU v5e chip (jax 0.10.2, libtpu 0.0.42.1, 7 December 2026) from a checkout with
``OUT=DIR python3 validation/v5e/softmax/measure.py``: for each row length ``n`` and score
dtype it compiles ``einsum(softmax(s.astype(f32) / 8).astype(bf16), v)`` over scores ``s``
of shape ``(2, 8, n, n)`` (bf16 or f32, in HBM, the query dim before the key dim as the
DiTs' score matmuls leave it) and values ``v`` of ``(2, n, 8, 128)``, and writes the HLO
that ran and the per-op device times of three executions (``aoizora.measure.capture``,
``aoizora.hlo.profile``) under ``$OUT/r``. The question it answers: whether a whole-row
reduce-window alone in its kernel (XLA's row max) runs slower than its bytes because of its
row's length or because it reads f32 scores (validation/README.md, section 18).
``ONLY=text`` keeps the cases whose name holds it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

from aoizora.measure.capture import save_profiled_call

LENGTHS = (1024, 2048, 2560, 3072, 4096)
DTYPES = ("bf16", "f32")


def attend(s: jax.Array, v: jax.Array) -> jax.Array:
    probs = jax.nn.softmax(s.astype(jnp.float32) / 8.0, -1).astype(jnp.bfloat16)
    return jnp.einsum("bhqk,bkhd->bqhd", probs, v)


def one(out: Path, n: int, dtype: str) -> str:
    name = f"softmax_n{n}_{dtype}"

    def fn(s: jax.Array, v: jax.Array) -> Any:
        return attend(s, v)

    fn.__name__ = name  # the module is jit_<name>: the profile finds it by that
    kind = jnp.bfloat16 if dtype == "bf16" else jnp.float32
    s = jax.random.normal(jax.random.key(0), (2, 8, n, n), jnp.float32).astype(kind)
    v = jax.random.normal(jax.random.key(1), (2, n, 8, 128), jnp.float32).astype(jnp.bfloat16)
    compiled = jax.jit(fn).lower(s, v).compile()
    prof = save_profiled_call(
        lambda: compiled(s, v),
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
    for n in LENGTHS:
        for dtype in DTYPES:
            if only and only not in f"softmax_n{n}_{dtype}":
                continue
            t0 = time.time()
            try:
                said = one(out, n, dtype)
            except Exception as exc:  # this case only
                said = f"FAILED {type(exc).__name__}: {str(exc)[:300]}"
            print(f"softmax_n{n}_{dtype} {time.time() - t0:.1f}s {said}", flush=True)


if __name__ == "__main__":
    main()
