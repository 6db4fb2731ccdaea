"""Kernel microbenchmarks on one device: what the compute model's parameters are fitted to.

``aoizora measure --kernels`` runs :func:`kernel_cases` -- the kernels a Wan step and
its VAE decoder are made of, over the shapes they take -- on one device and times each
from a device profile (:mod:`aoizora.hlo.profile`): the ``XLA Modules`` event of
each execution, so neither the host's dispatch nor the profiler's own overhead is in
the time (a wall clock around a 64 MiB element-wise pass on TPU v5e read 0.13 s, the
device 51 us). :mod:`aoizora.studies.compute_fit` fits the ``[compute]`` table of a
topology file to the result.

The cases (:class:`KernelCase`, ``kind``):

* ``matmul``: bf16 ``(m x k) @ (k x n)`` with f32 accumulation, the step's projection
  and FFN shapes, square ones and small or ragged ones;
* ``stream``: an element-wise ``x * 2 + 1`` over bf16 arrays from 1 MiB to 1 GiB
  (read and written once: HBM bandwidth and the fixed cost of a kernel);
* ``transpose`` and ``reduce``: a 2D transpose and a row sum over the same sizes;
* ``attention``: jax's Pallas splash kernel as the step calls it
  (:func:`aoizora.workloads.splash.splash_attention`, segment ids on), over heads,
  lengths, cross-attention's short keys and block sizes;
* ``conv``: the VAE decoder's 3x3x3 convolutions (channels and frame sizes of Wan's
  decoder);
* ``tile``: the splash kernel at Wan steps' local self-attention shapes over tiles
  ``(block_q, block_kv, block_kv_compute)`` -- the tile sweep the kernel settings are
  planned from; a tile that does not compile (scoped VMEM) is kept with its error.

Each case records its FLOPs and bytes as the model counts them, the samples, and the
per-op split of one execution (the attention kernel's own op, for instance).
"""

from __future__ import annotations

import functools
import math
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

from aoizora.errors import MeasureError
from aoizora.hlo.profile import DeviceProfile, read_profile
from aoizora.measure.capture import capture_profile
from aoizora.workloads.splash import splash_attention

__all__ = ["KERNEL_KINDS", "KernelCase", "KernelResult", "kernel_cases", "run_kernels"]

KERNEL_KINDS = ("matmul", "stream", "transpose", "reduce", "attention", "conv", "tile")
_MIB = 1 << 20


@dataclass(frozen=True)
class KernelCase:
    """One microbenchmark: a kind, its parameters, and how to build its program."""

    kind: str
    name: str
    params: tuple[tuple[str, int], ...]

    @property
    def args(self) -> dict[str, int]:
        return dict(self.params)


@dataclass(frozen=True)
class KernelResult:
    """A timed case: device seconds per execution and the per-op split of one."""

    case: KernelCase
    samples_s: tuple[float, ...]
    ops_s: tuple[tuple[str, float], ...] = field(default=())
    error: str = ""

    @property
    def median_s(self) -> float:
        s = sorted(self.samples_s)
        return s[len(s) // 2] if s else math.nan

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "kind": self.case.kind,
            "name": self.case.name,
            "params": dict(self.case.params),
            "samples_s": list(self.samples_s),
            "median_s": self.median_s if self.samples_s else None,
            "ops_s": dict(self.ops_s),
            "error": self.error,
        }


def _case(kind: str, **params: int) -> KernelCase:
    tag = "_".join(f"{k}{v}" for k, v in params.items())
    return KernelCase(kind, f"{kind}_{tag}", tuple(params.items()))


# (m, k, n): Wan 2.1 1.3B (width 1536, FFN 8960), Wan 2.2 TI2V-5B (3072, 14336) and
# 14B (5120, 13824) projections over 480p-720p token counts, the text's 512 tokens,
# the patch embedding's k = 64 and the heads' 128, square references, small and ragged.
_MATMULS = (
    (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
    (18720, 1536, 1536), (18720, 1536, 8960), (18720, 8960, 1536),
    (4840, 3072, 3072), (4840, 3072, 14336), (4840, 14336, 3072),
    (9360, 5120, 5120), (9360, 5120, 13824), (1024, 1536, 1536), (1024, 4096, 3072),
    (512, 4096, 1536), (65520, 64, 1536), (18720, 1536, 128), (18720, 128, 1536),
    (4840, 3072, 192), (100, 1536, 1536), (300, 1000, 1000), (3000, 1000, 1000),
    (256, 256, 256), (512, 512, 512), (1000, 3000, 129),
)  # fmt: skip
_STREAM_MIB = (1, 4, 16, 64, 256, 1024)
_SHAPE_MIB = (4, 16, 64, 256)
# (heads, q length, kv length, q block, kv block): self-attention over lengths and
# blocks, cross-attention (512 text tokens), Wan's 12 and 24 heads.
_ATTENTION = (
    (12, 1024, 1024, 512, 512), (12, 4096, 4096, 512, 512), (12, 9728, 9728, 512, 512),
    (12, 32768, 32768, 512, 512), (24, 4864, 4864, 512, 512), (24, 21504, 21504, 512, 512),
    (12, 4096, 4096, 128, 128), (12, 4096, 4096, 256, 256), (12, 4096, 4096, 1024, 1024),
    (12, 9728, 9728, 256, 256), (12, 9728, 9728, 1024, 512), (12, 8192, 8192, 1024, 1024),
    (12, 9728, 512, 512, 512), (12, 4096, 512, 512, 512), (24, 4864, 512, 512, 512),
    (12, 9728, 512, 1024, 512), (12, 9728, 512, 256, 512), (12, 384, 384, 384, 384),
    (12, 2048, 384, 512, 384), (40, 2048, 2048, 512, 512),
)  # fmt: skip
# (heads, length): Wan 2.1 1.3B self-attention on one chip at 832x480x81, 1280x720x21 and
# 832x480x21 (32,760, 21,600 and 9,360 tokens, 12 heads), TI2V-5B at 832x480x81 and
# 1280x704x41 (24 heads; 8,190 and 9,680 tokens).
_TILE_SHAPES = ((12, 32760), (12, 21600), (12, 9360), (24, 8190), (24, 9680))
# (block_q, block_kv, block_kv_compute): maxdiffusion's 512s, uniform 256-2048, a compute
# block under the kv block, kv above q, and q 2048 (which failed to compile on v5e).
_TILES = (
    (512, 512, 512), (256, 256, 256), (1024, 1024, 1024), (2048, 2048, 2048),
    (1024, 1024, 512), (512, 1024, 512), (512, 1024, 1024), (1024, 2048, 512),
    (1024, 2048, 1024), (512, 2048, 512), (1024, 512, 512), (2048, 1024, 512),
    (256, 1024, 256), (1024, 1024, 256), (512, 512, 256), (1024, 4096, 512),
)  # fmt: skip
# (frames, height, width, channels in, channels out): the decoder's 3x3x3 convolutions
# at its four scales for a 480p clip chunk (causal: 2 cached frames + the chunk).
_CONVS = (
    (3, 60, 104, 384, 384), (6, 120, 208, 384, 384), (6, 240, 416, 192, 192),
    (6, 480, 832, 96, 96), (3, 60, 104, 16, 384),
)  # fmt: skip


def kernel_cases(kinds: Sequence[str] = KERNEL_KINDS) -> tuple[KernelCase, ...]:
    """The suite (module docstring), ``kinds`` only, in a fixed order."""
    unknown = [k for k in kinds if k not in KERNEL_KINDS]
    if unknown:
        raise MeasureError(
            f"--kernels {','.join(kinds)}: unknown kinds {unknown}; known: "
            f"{', '.join(KERNEL_KINDS)} (e.g. --kernels matmul,attention)"
        )
    out: list[KernelCase] = []
    for kind in kinds:
        if kind == "matmul":
            out += [_case("matmul", m=m, k=k, n=n) for m, k, n in _MATMULS]
        elif kind == "stream":
            out += [_case("stream", size_bytes=s * _MIB) for s in _STREAM_MIB]
        elif kind in ("transpose", "reduce"):
            out += [_case(kind, size_bytes=s * _MIB) for s in _SHAPE_MIB]
        elif kind == "attention":
            out += [
                _case("attention", heads=h, q_length=q, kv_length=kv, block_q=bq, block_kv=bk)
                for h, q, kv, bq, bk in _ATTENTION
            ]
        elif kind == "tile":
            out += [
                _case("tile", heads=h, q_length=n, kv_length=n, block_q=bq, block_kv=bk,
                      block_kv_compute=bc)
                for h, n in _TILE_SHAPES
                for bq, bk, bc in _TILES
            ]  # fmt: skip
        else:
            out += [
                _case("conv", frames=t, height=hh, width=w, in_channels=ci, out_channels=co)
                for t, hh, w, ci, co in _CONVS
            ]
    return tuple(out)


def _bf16(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    return (jax.random.normal(key, shape, jnp.float32) * 0.02).astype(jnp.bfloat16)


def _rows(size_bytes: int) -> tuple[int, int]:
    cols = 1024
    return max(1, size_bytes // (2 * cols)), cols


def _program(case: KernelCase) -> tuple[Callable[..., Any], tuple[tuple[int, ...], ...]]:
    """The jittable function of a case and its bf16 argument shapes."""
    a = case.args
    if case.kind == "matmul":
        return _matmul, ((a["m"], a["k"]), (a["k"], a["n"]))
    if case.kind == "stream":
        return _stream, ((a["size_bytes"] // 2,),)
    if case.kind == "transpose":
        return _transpose, (_rows(a["size_bytes"]),)
    if case.kind == "reduce":
        return _reduce, (_rows(a["size_bytes"]),)
    if case.kind in ("attention", "tile"):
        q = (1, a["heads"], a["q_length"], 128)
        kv = (1, a["heads"], a["kv_length"], 128)
        blocks = (a["block_q"], a["block_kv"], a.get("block_kv_compute", a["block_kv"]))
        return functools.partial(_attention, blocks=blocks), (q, kv, kv)
    x = (1, a["frames"] + 2, a["height"], a["width"], a["in_channels"])
    return _conv, (x, (3, 3, 3, a["in_channels"], a["out_channels"]))


def _matmul(x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.dot(x, y, preferred_element_type=jnp.float32).astype(jnp.bfloat16)


def _stream(x: jax.Array) -> jax.Array:
    return x * 2 + 1


def _transpose(x: jax.Array) -> jax.Array:
    return x.T


def _reduce(x: jax.Array) -> jax.Array:
    return jnp.sum(x.astype(jnp.float32), axis=1)


def _attention(q: jax.Array, k: jax.Array, v: jax.Array, *, blocks: tuple[int, int, int]) -> Any:
    valid = jnp.ones((k.shape[2],), jnp.bool_)  # segment ids on, as the step runs it
    out, _ = splash_attention(q, k, v, valid, scale=0.088, with_lse=False, block_sizes=blocks)
    return out


def _conv(x: jax.Array, w: jax.Array) -> jax.Array:
    return jax.lax.conv_general_dilated(
        x, w, (1, 1, 1), ((0, 0), (1, 1), (1, 1)), dimension_numbers=("NDHWC", "DHWIO", "NDHWC")
    )


def _one(case: KernelCase, executions: int, trace_dir: Path) -> KernelResult:
    body, shapes = _program(case)
    name = case.name.replace("-", "_")

    def fn(*args: jax.Array) -> Any:
        return body(*args)

    fn.__name__ = name  # the module is jit_<name>: the profile finds it by that
    jitted = jax.jit(fn)
    keys = jax.random.split(jax.random.key(0), len(shapes))
    args = [_bf16(k, s) for k, s in zip(keys, shapes, strict=True)]
    # A splash tile over the compiler's default scoped VMEM runs under a raised limit
    # (``vmem_limit_kib``, XLA's --xla_tpu_scoped_vmem_limit_kib), as a plan sets it.
    limit = case.args.get("vmem_limit_kib", 0)
    options: dict[str, str | bool] | None = (
        {"xla_tpu_scoped_vmem_limit_kib": str(limit)} if limit else None
    )
    compiled = jitted.lower(*args).compile(compiler_options=options)
    trace = capture_profile(
        lambda: compiled(*args), executions=executions, out=trace_dir / f"{name}.xplane.pb"
    )
    profile = read_profile(trace, module=f"jit_{name}", executions=executions)
    return _result(case, profile)


def _result(case: KernelCase, profile: DeviceProfile) -> KernelResult:
    ops = sorted(((o.name, o.per_step_s) for o in profile.ops), key=lambda t: -t[1])
    return KernelResult(case, profile.executions_s, tuple(ops[:8]))


def run_kernels(
    cases: Sequence[KernelCase],
    *,
    executions: int = 5,
    say: Callable[[str], None] | None = None,
    keep_traces: Path | None = None,
    on_result: Callable[[tuple[KernelResult, ...]], None] | None = None,
) -> tuple[KernelResult, ...]:
    """Time every case on the default device (one process, one case at a time); a case
    that fails is kept with its error and the others are still timed. ``on_result`` gets
    the results so far after each case (to save them: an interrupted run keeps them)."""
    say = say or (lambda _: None)
    out: list[KernelResult] = []
    with tempfile.TemporaryDirectory(prefix="aoizora-kernels-") as tmp:
        where = keep_traces or Path(tmp)
        for i, case in enumerate(cases, start=1):
            t0 = time.perf_counter()
            try:
                result = _one(case, executions, where)
            except Exception as exc:  # this case only
                text = " ".join(str(exc).split())[:300]
                result = KernelResult(case, (), error=f"{type(exc).__name__}: {text}")
                say(f"[kernel {i}/{len(cases)}] {case.name}: FAILED: {result.error}")
            else:
                say(
                    f"[kernel {i}/{len(cases)}] {case.name}: {result.median_s * 1e6:.1f} us "
                    f"({time.perf_counter() - t0:.1f} s)"
                )
            out.append(result)
            if on_result is not None:
                on_result(tuple(out))
    return tuple(out)
