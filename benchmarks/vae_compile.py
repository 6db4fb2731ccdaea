"""Where a VAE decoder compile's time goes: XLA's HLO passes, or libtpu's code generation.

A cold ``aoizora plan --model M`` compiles the Wan VAE decoder's candidates for the
whole clip, and those compiles take far longer than the step's (the demo's three: 500-1000 s
at load 7-8, against 87 s for the step's largest). This prints, for one decoder compile
on a single v5e chip (no collectives, so no sharding is involved):

- the compile's wall seconds, and how much of it passed after the last HLO pass's dump
  (``xla_dump_hlo_pass_re``: one file per pass, their modification times) -- the
  backend's code generation;
- the same for smaller and larger clips, the decoder in bfloat16, and one frame only
  (no ``lax.scan``: the decoder once instead of twice);
- the compile seconds of single ops at the decoder's sizes: a causal 3x3x3 conv, a
  3x3 conv, the same 3x3x3 conv folded into a 3x3 conv over 3x the channels, and the
  mid block's attention.

    python benchmarks/vae_compile.py            # about 10 minutes on 2 cores
    python benchmarks/vae_compile.py --quick    # the op table and one decoder compile
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from aoizora.candidates.space import enumerate_candidates
from aoizora.compile import jit_step, make_mesh
from aoizora.tpu import slice_backend, topology_devices
from aoizora.workloads.clip import Clip
from aoizora.workloads.vae import vae_workload
from sim.topology import load_slice

_SLICE = "v5e:1x1"
_PASS = re.compile(r"\.\d{4}\.")


def _timed_compile(lowered: Any, *, dump: bool) -> tuple[float, float]:
    """(compile seconds, seconds after the last HLO pass dump; nan without ``dump``)."""
    with tempfile.TemporaryDirectory(prefix="aoizora-vae-") as tmp:
        options = {"xla_dump_to": tmp, "xla_dump_hlo_pass_re": ".*"} if dump else {}
        t0 = time.time()
        lowered.compile(compiler_options=options)
        t1 = time.time()
        # Pass dumps carry the pass's 4-digit index (module.cl_N.0120.<pipeline>.<pass>.txt).
        passes = [p.stat().st_mtime for p in Path(tmp).glob("*.txt") if _PASS.search(p.name)]
        codegen = t1 - max(passes) if passes else float("nan")
    return t1 - t0, codegen


def _decoder(clip: Clip, **kw: Any) -> tuple[float, float]:
    workload = vae_workload("wan2.1-vae", clip, **kw)
    slice_ = load_slice(_SLICE)
    cand = next(iter(enumerate_candidates(workload, 1)))
    mesh = make_mesh(cand, topology_devices(slice_), None)
    step = jit_step(workload, cand, mesh, slice_backend(slice_))
    return _timed_compile(step.trace(*workload.abstract_args).lower(), dump=True)


def _op(fn: Callable[..., Any], *shapes: tuple[int, ...]) -> float:
    devices = topology_devices(load_slice(_SLICE))
    where = NamedSharding(Mesh(devices[:1], ("x",)), PartitionSpec())
    args = [jax.ShapeDtypeStruct(s, jnp.float32, sharding=where) for s in shapes]
    return _timed_compile(jax.jit(fn).trace(*args).lower(), dump=False)[0]


def _conv3(x: jax.Array, k: jax.Array) -> jax.Array:
    dims = ("NDHWC", "DHWIO", "NDHWC")
    return jax.lax.conv_general_dilated(
        x, k, (1, 1, 1), ((0, 0), (1, 1), (1, 1)), dimension_numbers=dims
    )


def _conv2(x: jax.Array, k: jax.Array) -> jax.Array:
    dims = ("NHWC", "HWIO", "NHWC")
    return jax.lax.conv_general_dilated(x, k, (1, 1), ((1, 1), (1, 1)), dimension_numbers=dims)


def _folded(x: jax.Array, k: jax.Array) -> jax.Array:
    """The causal 3x3x3 conv of one output frame as a 3x3 conv over the 3 frames' channels."""
    b, t, h, w, c = x.shape
    xf = jnp.transpose(x, (0, 2, 3, 1, 4)).reshape(b, h, w, t * c)
    return _conv2(xf, jnp.transpose(k, (1, 2, 0, 3, 4)).reshape(3, 3, t * c, -1))


def _attention(x: jax.Array) -> jax.Array:
    b, h, w, c = x.shape
    q = x.reshape(b, h * w, c)
    scores = jnp.einsum("nqc,nkc->nqk", q, q)
    return jnp.einsum("nqk,nkc->nqc", jax.nn.softmax(scores, axis=-1), q)


def _ops(sizes: list[tuple[int, int, int]]) -> None:
    print("| op (f32, one v5e chip) | height x width x channels | compile s |")
    print("|---|---|---|")
    for h, w, c in sizes:
        rows = [
            ("causal 3x3x3 conv, 3 frames in", _op(_conv3, (1, 3, h, w, c), (3, 3, 3, c, c))),
            ("3x3 conv, 1 frame", _op(_conv2, (1, h, w, c), (3, 3, c, c))),
            ("3x3x3 folded: 3x3 conv over 3C", _op(_folded, (1, 3, h, w, c), (3, 3, 3, c, c))),
            ("attention over the frame's pixels", _op(_attention, (1, h, w, c))),
        ]
        for name, s in rows:
            print(f"| {name} | {h} x {w} x {c} | {s:.1f} |", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="the op table and one decoder only")
    args = p.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.2f} (2 cores); libtpu AOT for {_SLICE}")
    _ops(
        [(32, 64, 96), (128, 256, 96)]
        if args.quick
        else [(32, 64, 96), (128, 256, 96), (240, 208, 96)]
    )
    cases: list[tuple[str, Clip, dict[str, Any]]] = [("f32", Clip(256, 128, 9), {})]
    if not args.quick:
        cases += [
            ("f32, 1 frame (no scan)", Clip(256, 128, 1), {}),
            ("f32, 1 frame", Clip(64, 32, 1), {}),
            ("bf16", Clip(256, 128, 9), {"dtype": jnp.bfloat16}),
        ]
    print("\n| decoder (wan2.1-vae, one v5e chip) | clip | compile s | after the last HLO pass s |")
    print("|---|---|---|---|")
    for name, clip, kw in cases:
        total, codegen = _decoder(clip, **kw)
        print(f"| {name} | {clip.label} | {total:.1f} | {codegen:.1f} |", flush=True)
    print(f"load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
