"""Real compiles made inside the tests, cached per session (lru_cache).

Every fixture is a tiny function compiled either for a libtpu AOT topology
(v5e:2x2, v5e:2x4, v5e:4x4; no TPU needed) or for the CPU backend with the 8
forced host devices that tests/conftest.py sets up. Each returns the HLO text
and the facts the tests check it against, derived from the function itself
(shapes, mesh sizes, trip counts) — an independent count, not from the parser.

Which compile produces which replica-group form (jax 0.10.2, libtpu 0.0.52):
explicit lists come from shard_map collectives (TPU and CPU); iota lists from
SPMD-partitioned jit programs on v5e:4x4; the mesh-axes form from TPU async
collective fusions in the FSDP transformer on v5e:4x4. Mesh forms with
``device_ids`` or sub-axes, generic ``async-start``/``async-done`` and
send/recv were not produced by any compile here; they are tested on
hand-written text validated by jaxlib's parser (test_graph.py).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

__all__ = [
    "Fixture",
    "all_fixtures",
    "jaxlib_groups",
    "kinds_cpu",
    "kinds_tpu",
    "permute_2x2",
    "scan_cpu",
    "scan_tpu",
    "jit_4x4",
    "transformer_4x4",
]

# f32[32,64] per device: every collective of kinds_* moves multiples of this.
SHARD = (32, 64)
SHARD_BYTES = 32 * 64 * 4


@dataclass(frozen=True)
class Fixture:
    name: str
    text: str
    slice_name: str
    mesh_shape: tuple[int, ...]
    facts: dict[str, Any]


def _tpu_mesh(slice_name: str, shape: tuple[int, ...], axes: tuple[str, ...]) -> Mesh:
    from aoizora.tpu import topology_devices
    from sim.topology import load_slice

    devices = topology_devices(load_slice(slice_name))  # the same devices on a TPU VM
    return Mesh(np.array(devices).reshape(shape), axes)


def _cpu_mesh(shape: tuple[int, ...], axes: tuple[str, ...]) -> Mesh:
    devices = jax.devices("cpu")[: math.prod(shape)]
    return Mesh(np.array(devices).reshape(shape), axes)


def _compile_shard_map(
    mesh: Mesh, f: Callable[..., Any], in_specs: tuple[Any, ...], out_specs: Any, args: list[Any]
) -> str:
    g = jax.jit(
        jax.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)
    )
    abstract = [
        jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=NamedSharding(mesh, s))
        for a, s in zip(args, in_specs, strict=True)
    ]
    text: str = g.trace(*abstract).lower().compile().as_text()
    return text


def _five_kinds(x: jax.Array) -> jax.Array:
    """all-gather, psum, psum_scatter, all_to_all and ppermute over a (2, 4) mesh."""
    y = jax.lax.all_gather(x, "b", tiled=True)
    z = jax.lax.psum(x, "a")
    w = jax.lax.psum_scatter(x, "b", scatter_dimension=1, tiled=True)
    v = jax.lax.all_to_all(x, "b", 0, 0, tiled=True)
    u = jax.lax.ppermute(x, "b", [(i, (i + 1) % 4) for i in range(4)])
    return (y.sum() + z.sum() + w.sum() + v.sum() + u.sum()).reshape(1, 1)


_KINDS_FACTS = {
    # per device, from the function: x is f32[32,64] per device (global 64x256 on a 2x4 mesh)
    "all-gather": 4 * SHARD_BYTES,  # output of a 4-way gather
    "all-reduce": SHARD_BYTES,
    "reduce-scatter": SHARD_BYTES,  # input
    "all-to-all": SHARD_BYTES,
    "collective-permute": SHARD_BYTES,
    "b_groups": ((0, 1, 2, 3), (4, 5, 6, 7)),
    "a_groups": ((0, 4), (1, 5), (2, 6), (3, 7)),
    "pairs": tuple((g * 4 + i, g * 4 + (i + 1) % 4) for g in range(2) for i in range(4)),
}


@functools.cache
def kinds_tpu() -> Fixture:
    mesh = _tpu_mesh("v5e:2x4", (2, 4), ("a", "b"))
    x = jax.ShapeDtypeStruct((64, 256), jnp.float32)
    text = _compile_shard_map(mesh, _five_kinds, (P("a", "b"),), P("a", "b"), [x])
    return Fixture("kinds_tpu", text, "v5e:2x4", (2, 4), dict(_KINDS_FACTS))


@functools.cache
def kinds_cpu() -> Fixture:
    mesh = _cpu_mesh((2, 4), ("a", "b"))
    x = jax.ShapeDtypeStruct((64, 256), jnp.float32)
    text = _compile_shard_map(mesh, _five_kinds, (P("a", "b"),), P("a", "b"), [x])
    return Fixture("kinds_cpu", text, "v5e:2x4", (2, 4), dict(_KINDS_FACTS))


def _scan_body(x: jax.Array, ws: jax.Array) -> jax.Array:
    def body(c: jax.Array, w: jax.Array) -> tuple[jax.Array, None]:
        wf = jax.lax.all_gather(w, "b", tiled=True, axis=0)
        c = jnp.tanh(c @ wf)
        return jax.lax.psum(c, "a"), None

    c, _ = jax.lax.scan(body, x, ws)
    return c


SCAN_LAYERS = 5


def _scan(mesh: Mesh, name: str, slice_name: str) -> Fixture:
    x = jax.ShapeDtypeStruct((64, 256), jnp.float32)
    ws = jax.ShapeDtypeStruct((SCAN_LAYERS, 256, 256), jnp.float32)
    text = _compile_shard_map(
        mesh, _scan_body, (P(None, None), P(None, "b", None)), P(None, None), [x, ws]
    )
    return Fixture(
        name,
        text,
        slice_name,
        (2, 4),
        {"trip_count": SCAN_LAYERS, "carry_bytes": 64 * 256 * 4, "weight_elems": 256 * 256},
    )


@functools.cache
def scan_tpu() -> Fixture:
    return _scan(_tpu_mesh("v5e:2x4", (2, 4), ("a", "b")), "scan_tpu", "v5e:2x4")


@functools.cache
def scan_cpu() -> Fixture:
    return _scan(_cpu_mesh((2, 4), ("a", "b")), "scan_cpu", "v5e:2x4")


@functools.cache
def permute_2x2() -> Fixture:
    """ppermute around a ring of 4 and a psum over both axes, on v5e:2x2."""
    mesh = _tpu_mesh("v5e:2x2", (2, 2), ("a", "b"))

    def f(x: jax.Array) -> jax.Array:
        y = jax.lax.ppermute(x, ("a", "b"), [(0, 1), (1, 3), (3, 2), (2, 0)])
        return jax.lax.psum(y * 2.0, ("a", "b"))

    x = jax.ShapeDtypeStruct((256, 512), jnp.float32)
    text = _compile_shard_map(mesh, f, (P("a", "b"),), P(), [x])
    shard_bytes = 128 * 256 * 4
    return Fixture(
        "permute_2x2",
        text,
        "v5e:2x2",
        (2, 2),
        {"pairs": ((0, 1), (1, 3), (3, 2), (2, 0)), "bytes": shard_bytes},
    )


@functools.cache
def jit_4x4() -> Fixture:
    """An FSDP + tensor-parallel MLP under plain jit on v5e:4x4 (iota groups)."""
    mesh = _tpu_mesh("v5e:4x4", (4, 4), ("data", "model"))

    def h(x: jax.Array, w1: jax.Array, w2: jax.Array) -> jax.Array:
        return jnp.tanh(x @ w1) @ w2

    def ns(*spec: Any) -> NamedSharding:
        return NamedSharding(mesh, P(*spec))

    xs = jax.ShapeDtypeStruct((512, 1024), jnp.bfloat16, sharding=ns("data", None))
    w1 = jax.ShapeDtypeStruct((1024, 4096), jnp.bfloat16, sharding=ns("data", "model"))
    w2 = jax.ShapeDtypeStruct((4096, 1024), jnp.bfloat16, sharding=ns("model", None))
    text = jax.jit(h, out_shardings=ns("data", None)).trace(xs, w1, w2).lower().compile()
    return Fixture(
        "jit_4x4",
        text.as_text(),
        "v5e:4x4",
        (4, 4),
        {
            # w1 is gathered over "data" (4 ways): its per-device output is 1024 x 1024 bf16.
            "all-gather": 1024 * 1024 * 2,
            # the second matmul contracts over the sharded "model" dim: all-reduce of
            # the per-device output 128 x 1024 bf16 over "model".
            "all-reduce": 128 * 1024 * 2,
        },
    )


TF_LAYERS, TF_D, TF_F, TF_S = 8, 1024, 4096, 4096


@functools.cache
def transformer_4x4() -> Fixture:
    """A scanned attention + MLP stack, FSDP x sequence sharded, on v5e:4x4.

    TPU turns its weight all-gathers into async collective fusions (one of them
    printed in the mesh-axes form) and its softmax into an XLA custom call.
    """
    mesh = _tpu_mesh("v5e:4x4", (2, 8), ("fsdp", "seq"))

    def block(x: jax.Array, w: tuple[jax.Array, ...]) -> jax.Array:
        wq, wo, w1, w2 = w
        h = x @ wq
        h = jax.nn.softmax(h @ x.T / 32.0, axis=-1) @ h
        x = x + h @ wo
        return x + jax.nn.gelu(x @ w1) @ w2

    def model(x: jax.Array, ws: tuple[jax.Array, ...]) -> jax.Array:
        def body(x: jax.Array, w: tuple[jax.Array, ...]) -> tuple[jax.Array, None]:
            return block(x, w), None

        x, _ = jax.lax.scan(body, x, ws)
        return x

    def ns(*spec: Any) -> NamedSharding:
        return NamedSharding(mesh, P(*spec))

    L, D, F, S = TF_LAYERS, TF_D, TF_F, TF_S
    xs = jax.ShapeDtypeStruct((S, D), jnp.bfloat16, sharding=ns("seq", None))
    ws = (
        jax.ShapeDtypeStruct((L, D, D), jnp.bfloat16, sharding=ns(None, "fsdp", "seq")),
        jax.ShapeDtypeStruct((L, D, D), jnp.bfloat16, sharding=ns(None, "seq", "fsdp")),
        jax.ShapeDtypeStruct((L, D, F), jnp.bfloat16, sharding=ns(None, "fsdp", "seq")),
        jax.ShapeDtypeStruct((L, F, D), jnp.bfloat16, sharding=ns(None, "seq", "fsdp")),
    )
    compiled = jax.jit(model, out_shardings=ns("seq", None)).trace(xs, ws).lower().compile()
    return Fixture("transformer_4x4", compiled.as_text(), "v5e:4x4", (2, 8), {"layers": L})


def all_fixtures() -> tuple[Fixture, ...]:
    return (
        kinds_tpu(),
        kinds_cpu(),
        scan_tpu(),
        scan_cpu(),
        permute_2x2(),
        jit_4x4(),
        transformer_4x4(),
    )


_ORACLE_OP_RE = re.compile(
    r"\s(all-gather|all-reduce|reduce-scatter|all-to-all|collective-permute|"
    r"all-gather-start|all-reduce-start|collective-permute-start|ragged-all-to-all)\("
)
_CHANNEL_RE = re.compile(r"channel_id=(\d+)")
_GROUPS_RE = re.compile(r"(replica_groups|source_target_pairs)=(\{(?:\{[\d,]*\},?)*\}|\{\})")


def jaxlib_groups(text: str) -> set[tuple[str, int | None, tuple[tuple[int, ...], ...]]]:
    """Every collective instruction as (opcode, channel_id, groups) by jaxlib's own expansion.

    ``hlo_module_from_text(...).to_string(HloPrintOptions.fingerprint())`` prints
    every replica group list fully expanded; fused computations are printed
    inline, so the result is a set.
    """
    from jax._src.lib import xla_client as xc

    module = xc.hlo.hlo_module_from_text(text)
    printed = module.to_string(xc.hlo.HloPrintOptions.fingerprint())
    out: set[tuple[str, int | None, tuple[tuple[int, ...], ...]]] = set()
    for line in printed.splitlines():
        m = _ORACLE_OP_RE.search(line)
        if m is None:
            continue
        ch = _CHANNEL_RE.search(line)
        g = _GROUPS_RE.search(line)
        groups: tuple[tuple[int, ...], ...] = ()
        if g is not None:
            groups = tuple(
                tuple(int(v) for v in grp.split(",") if v)
                for grp in re.findall(r"\{([\d,]*)\}", g.group(2)[1:-1])
            )
        opcode = m.group(1).removesuffix("-start")
        out.add((opcode, int(ch.group(1)) if ch else None, groups))
    return out
