"""Sequence-parallel attention for the DiT workloads: four ways to split attention over chips.

Every kind runs a per-chip attention kernel inside :func:`jax.shard_map`, so the
compiled HLO shows an opaque kernel at a manual-sharding boundary -- exactly what
Stage 1 must predict. The per-chip kernel is Pallas splash attention
(``jax.experimental.pallas.ops.tpu.splash_attention``) for TPU compiles and a
plain XLA softmax attention for CPU compiles (or when FLOPs must be visible to
``cost_analysis``, which does not cost Pallas custom calls).

Kinds (q, k, v are ``(batch, heads, seq, head_dim)``):

* ``"gather_kv"`` -- maxdiffusion's ``flash`` attention with uniform sharding
  (``attention_flax._tpu_flash_attention``): q stays sharded on the sequence,
  K and V enter ``shard_map`` with the sequence replicated, so the partitioner
  all-gathers them over the sequence axes every layer.
* ``"ulysses"`` -- DeepSpeed-Ulysses: an ``all_to_all`` turns sequence shards
  into head shards, full-sequence attention per head group, ``all_to_all`` back.
  Needs heads divisible by the sequence degree times the head degree.
* ``"ring"`` -- ring attention: K/V chunks travel around the sequence axes by
  ``ppermute``; partial results are merged with their log-sum-exp (the online
  softmax of Milakov & Gimelshein 2018 / Liu et al. 2023, "Ring Attention").
* ``"usp_uU"`` -- Ulysses x ring, the hybrid of the USP / Long-Context-Attention
  line of work (Fang & Zhao 2024) that maxdiffusion runs as ``ulysses_ring``
  (``attention_flax._ulysses_ring_attention``; its Ironwood Wan 2.2 configs use
  ``ulysses_shards=2``): the n-way sequence split is U-way Ulysses times R = n/U-way
  ring. The chunk index of the sequence splits as ``r * U + u`` (ring major, as
  maxdiffusion splits its context axis): an ``all_to_all`` among the U chunks of
  each ring position turns them into head shards, then K/V blocks of U chunks
  travel around the R ring positions. Needs 1 < U < n and heads divisible by U
  times the head degree. :func:`attention_kinds` lists every U for a head count.

Padding: positions ``>= kv_valid_len`` of K/V are masked (the workload pads the
token sequence to a multiple of its sharding degree), and the splash kernel's
block padding is masked with segment ids.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

from aoizora.errors import WorkloadError
from aoizora.workloads.splash import splash_attention

__all__ = [
    "ATTENTION_KINDS",
    "AttentionKind",
    "Kernel",
    "attention_family",
    "attention_kinds",
    "sharded_attention",
    "local_attention",
    "spec_axes",
    "usp_degree",
    "usp_kind",
]

AttentionKind = Literal["gather_kv", "ulysses", "ring"]
# "opaque_splash": splash without its Mosaic body, for programs that are read, not
# compiled (Stage 1; aoizora.workloads.splash).
Kernel = Literal["splash", "opaque_splash", "xla"]
# The kinds without a parameter; Ulysses x ring kinds are usp_kind(U) (attention_kinds).
ATTENTION_KINDS: tuple[str, ...] = ("gather_kv", "ulysses", "ring")
_USP_PREFIX = "usp_u"


def usp_kind(ulysses: int) -> str:
    """The name of Ulysses x ring attention with a ``ulysses``-way all-to-all.

    >>> usp_kind(2), usp_degree("usp_u2"), usp_degree("ring")
    ('usp_u2', 2, None)
    """
    if ulysses < 2:
        raise WorkloadError(f"usp needs a Ulysses degree >= 2, got {ulysses}; e.g. usp_kind(2)")
    return f"{_USP_PREFIX}{ulysses}"


def usp_degree(kind: str) -> int | None:
    """The Ulysses degree U of a ``usp_uU`` kind, None for the other kinds."""
    digits = kind[len(_USP_PREFIX) :] if kind.startswith(_USP_PREFIX) else ""
    return int(digits) if digits.isdigit() and int(digits) >= 2 else None


def attention_family(kind: str) -> str:
    """``"usp"`` for every Ulysses x ring split, else the kind itself.

    >>> attention_family("usp_u4"), attention_family("ring")
    ('usp', 'ring')
    """
    return "usp" if usp_degree(kind) is not None else kind


def attention_kinds(num_heads: int) -> tuple[str, ...]:
    """Every attention kind for a model with ``num_heads`` heads.

    The three plain kinds, then ``usp_uU`` for every U > 1 dividing the heads (a
    Ulysses degree must divide them); which U fit a candidate's sequence degree is
    the candidate check's question.

    >>> attention_kinds(12)
    ('gather_kv', 'ulysses', 'ring', 'usp_u2', 'usp_u3', 'usp_u4', 'usp_u6', 'usp_u12')
    """
    return ATTENTION_KINDS + tuple(
        usp_kind(u) for u in range(2, num_heads + 1) if num_heads % u == 0
    )


# Finite "minus infinity": keeps fully masked rows NaN-free (splash uses the same idea,
# DEFAULT_MASK_VALUE = -0.7 * float32 max).
_MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)


def spec_axes(entry: str | tuple[str, ...] | None) -> tuple[str, ...]:
    """Mesh axis names of one PartitionSpec entry.

    >>> spec_axes(None), spec_axes("context"), spec_axes(("data", "fsdp"))
    ((), ('context',), ('data', 'fsdp'))
    """
    if entry is None:
        return ()
    if isinstance(entry, str):
        return (entry,)
    return tuple(entry)


def local_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    kv_valid: jax.Array | None,
    *,
    kernel: Kernel,
    with_lse: bool,
    tiles: tuple[int, int, int] | None = None,
) -> tuple[jax.Array, jax.Array | None]:
    """Softmax attention on one chip: ``(b, h, sq, d) x (b, h, skv, d) -> (b, h, sq, d)``.

    ``kv_valid`` is a boolean ``(skv,)`` mask of real key positions (``None``: all
    real). Returns the output (f32 when ``with_lse``, else q's dtype) and, with
    ``with_lse``, the log-sum-exp ``(b, h, sq)`` in f32 for merging partial results.
    ``tiles``: the splash kernel's (q, kv, kv compute) blocks (None: 512 each,
    :data:`aoizora.workloads.splash.DEFAULT_BLOCKS`); XLA attention has none.
    """
    scale = 1.0 / math.sqrt(q.shape[-1])
    if kernel == "xla":
        return _xla_attention(q, k, v, kv_valid, scale=scale, with_lse=with_lse)
    if kernel in ("splash", "opaque_splash"):
        return splash_attention(
            q, k, v, kv_valid, scale=scale, with_lse=with_lse, body=kernel == "splash",
            tiles=tiles,
        )  # fmt: skip
    raise WorkloadError(
        f"attention kernel {kernel!r} is unknown; use 'splash', 'opaque_splash' or 'xla'"
    )


def _xla_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    kv_valid: jax.Array | None,
    *,
    scale: float,
    with_lse: bool,
) -> tuple[jax.Array, jax.Array | None]:
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k, preferred_element_type=jnp.float32) * scale
    if kv_valid is not None:
        s = jnp.where(kv_valid[None, None, None, :], s, _MASK_VALUE)
    m = jnp.max(s, axis=-1, keepdims=True)
    p = jnp.exp(s - m)
    denom = jnp.sum(p, axis=-1, keepdims=True)
    out = jnp.einsum("bhqk,bhkd->bhqd", p.astype(v.dtype), v, preferred_element_type=jnp.float32)
    out = out / denom
    if with_lse:
        return out, (m + jnp.log(denom))[..., 0]
    return out.astype(q.dtype), None


def _merge(
    out_a: jax.Array, lse_a: jax.Array, out_b: jax.Array, lse_b: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Combine two normalised partial attentions over disjoint key sets (online softmax)."""
    lse = jnp.logaddexp(lse_a, lse_b)
    out = out_a * jnp.exp(lse_a - lse)[..., None] + out_b * jnp.exp(lse_b - lse)[..., None]
    return out, lse


_Partial = tuple[jax.Array, jax.Array]  # a normalised partial attention and its log-sum-exp
_Chunk = tuple[jax.Array, ...]


def _sender(
    seq_name: str | tuple[str, ...], perm: list[tuple[int, int]]
) -> Callable[[_Chunk], _Chunk]:
    """Send every array of a chunk one step along the ring ``perm``."""

    def send(chunk: _Chunk) -> _Chunk:
        return tuple(jax.lax.ppermute(x, seq_name, perm) for x in chunk)

    return send


def _ring_loop(
    first: tuple[jax.Array, ...],
    steps: int,
    send: Callable[[tuple[jax.Array, ...]], tuple[jax.Array, ...]],
    attend: Callable[[tuple[jax.Array, ...], jax.Array | int], _Partial],
) -> _Partial:
    """Attend to ``steps`` K/V chunks travelling a ring, the next one in flight meanwhile.

    Step ``i`` sends the chunk it attends to on to the next device while attending
    to it, so one transfer overlaps each chunk's attention (Ring Attention, Liu et
    al. 2023, sec. 3); in a loop, as ring kernels run it, XLA cannot hoist every
    transfer ahead of the attention (an unrolled chain of permutes it schedules
    back to back). ``steps - 1`` sends in all.
    """
    out, lse = attend(first, 0)
    if steps == 1:
        return out, lse

    def body(i: jax.Array, carry: tuple[tuple[jax.Array, ...], jax.Array, jax.Array]) -> Any:
        chunk, acc, acc_lse = carry
        following = send(chunk)  # independent of this step's attention: they overlap
        o_s, l_s = attend(chunk, i)
        acc, acc_lse = _merge(acc, acc_lse, o_s, l_s)
        return following, acc, acc_lse

    chunk, out, lse = jax.lax.fori_loop(1, steps - 1, body, (send(first), out, lse))
    o_s, l_s = attend(chunk, steps - 1)
    return _merge(out, lse, o_s, l_s)


@dataclass(frozen=True)
class _Call:
    """One sharded attention call: the mesh, the q sharding and the kernel."""

    mesh: jax.sharding.Mesh
    q_spec: PartitionSpec
    kernel: Kernel
    kv_valid_len: int
    needs_mask: bool
    seq_name: str | tuple[str, ...]
    n_seq: int
    tiles: tuple[int, int, int] | None = None

    def per_chip(
        self, body: Callable[..., jax.Array], *in_specs: PartitionSpec
    ) -> Callable[..., jax.Array]:
        # Every kind is a manual-sharding region whose output is sharded like q.
        return jax.shard_map(
            body, mesh=self.mesh, in_specs=in_specs, out_specs=self.q_spec, check_vma=False
        )

    def full(self, ql: jax.Array, kl: jax.Array, vl: jax.Array) -> jax.Array:
        """Attention over every key position 0..S-1, local: mask those past kv_valid_len."""
        valid = jnp.arange(kl.shape[2]) < self.kv_valid_len if self.needs_mask else None
        out, _ = local_attention(
            ql, kl, vl, valid, kernel=self.kernel, with_lse=False, tiles=self.tiles
        )
        return out


def _ulysses(call: _Call, q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    def body(ql: jax.Array, kl: jax.Array, vl: jax.Array) -> jax.Array:
        # Sequence shards -> head shards: split heads (dim 1), gather seq (dim 2).
        # all_to_all concatenates in the PartitionSpec's order of a tuple of axes
        # (checked: it agrees with all_gather and axis_index), so after it the key
        # positions are simply 0..S-1.
        def to_heads(x: jax.Array) -> jax.Array:
            return jax.lax.all_to_all(x, call.seq_name, 1, 2, tiled=True)

        out = call.full(to_heads(ql), to_heads(kl), to_heads(vl))
        return jax.lax.all_to_all(out, call.seq_name, 2, 1, tiled=True)

    return call.per_chip(body, call.q_spec, call.q_spec, call.q_spec)(q, k, v)


def _ring(call: _Call, q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    n_seq, seq_name, needs_mask = call.n_seq, call.seq_name, call.needs_mask

    def body(ql: jax.Array, kl: jax.Array, vl: jax.Array, pos: jax.Array) -> jax.Array:
        # `pos` holds the global key positions of the local K/V chunk and travels with it:
        # ppermute over a tuple of mesh axes numbers devices in mesh order, not in the
        # PartitionSpec's order (checked: a +1 shift over ('context', 'fsdp') on a
        # (fsdp=2, context=4) mesh gives [7 6 0 1 2 3 4 5]), so "chunk idx - step" is wrong.
        perm = [(j, (j + 1) % n_seq) for j in range(n_seq)]

        def attend(chunk: tuple[jax.Array, ...], step: jax.Array | int) -> _Partial:
            valid = chunk[2] < call.kv_valid_len if needs_mask else None
            o_s, l_s = local_attention(
                ql, chunk[0], chunk[1], valid, kernel=call.kernel, with_lse=True, tiles=call.tiles
            )
            assert l_s is not None
            return o_s, l_s

        chunk = (kl, vl, pos) if needs_mask else (kl, vl)
        out, _ = _ring_loop(chunk, n_seq, _sender(seq_name, perm), attend)
        return out.astype(ql.dtype)

    positions = jnp.arange(k.shape[2], dtype=jnp.int32)
    s_spec = PartitionSpec(call.q_spec[2])
    return call.per_chip(body, call.q_spec, call.q_spec, call.q_spec, s_spec)(q, k, v, positions)


def _usp(call: _Call, q: jax.Array, k: jax.Array, v: jax.Array, ulysses: int) -> jax.Array:
    """Ulysses over the U minor chunks of every ring position, ring over the R positions."""
    n, u_deg, seq_name = call.n_seq, ulysses, call.seq_name
    r_deg = n // u_deg
    # Chunk indices i = r * U + u, in the PartitionSpec's order (axis_index and the
    # groups of all_to_all count that way); ppermute numbers a tuple of axes in mesh
    # order instead (see _ring), so the ring's pairs are converted.
    groups = [[r * u_deg + u for u in range(u_deg)] for r in range(r_deg)]
    mesh_index = _mesh_order_index(call)
    perm = [
        (mesh_index[i], mesh_index[((i // u_deg + 1) % r_deg) * u_deg + i % u_deg])
        for i in range(n)
    ]

    def body(ql: jax.Array, kl: jax.Array, vl: jax.Array) -> jax.Array:
        def to_heads(x: jax.Array) -> jax.Array:
            return jax.lax.all_to_all(x, seq_name, 1, 2, tiled=True, axis_index_groups=groups)

        ql, kl, vl = to_heads(ql), to_heads(kl), to_heads(vl)
        # The U chunks of ring position r are contiguous: keys r*U*c .. (r+1)*U*c - 1.
        r = jax.lax.axis_index(seq_name) // u_deg
        block = kl.shape[2]

        def attend(chunk: tuple[jax.Array, ...], step: jax.Array | int) -> _Partial:
            valid = None
            if call.needs_mask:
                start = ((r - step) % r_deg) * block
                valid = start + jnp.arange(block) < call.kv_valid_len
            o_s, l_s = local_attention(
                ql, chunk[0], chunk[1], valid, kernel=call.kernel, with_lse=True, tiles=call.tiles
            )
            assert l_s is not None
            return o_s, l_s

        out, _ = _ring_loop((kl, vl), r_deg, _sender(seq_name, perm), attend)
        out = out.astype(ql.dtype)
        return jax.lax.all_to_all(out, seq_name, 2, 1, tiled=True, axis_index_groups=groups)

    return call.per_chip(body, call.q_spec, call.q_spec, call.q_spec)(q, k, v)


def _mesh_order_index(call: _Call) -> list[int]:
    """For each PartitionSpec-order index of the sequence axes, its mesh-order index."""
    axes = spec_axes(call.q_spec[2])
    sizes = {a: int(call.mesh.shape[a]) for a in axes}
    mesh_order = sorted(axes, key=list(call.mesh.axis_names).index)
    out = []
    for i in range(call.n_seq):
        digits: dict[str, int] = {}
        rest = i
        for a in reversed(axes):
            digits[a], rest = rest % sizes[a], rest // sizes[a]
        index = 0
        for a in mesh_order:
            index = index * sizes[a] + digits[a]
        out.append(index)
    return out


def sharded_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    mesh: jax.sharding.Mesh,
    q_spec: PartitionSpec,
    kind: str,
    kernel: Kernel,
    kv_valid_len: int,
    tiles: tuple[int, int, int] | None = None,
) -> jax.Array:
    """Attention of ``(B, H, S, D)`` global arrays split over ``mesh`` as ``q_spec`` says.

    ``q_spec`` shards (batch, heads, seq, head_dim); its seq entry names the
    sequence-parallel mesh axes the ``kind`` communicates over. K/V positions
    ``>= kv_valid_len`` are masked. The result is sharded like ``q``. ``tiles``: the
    splash kernel's blocks (:func:`local_attention`).
    """
    if len(q_spec) != 4 or q_spec[3] is not None:
        raise WorkloadError(
            f"attention q_spec {q_spec} must shard (batch, heads, seq, head_dim) and leave "
            f"head_dim whole, e.g. PartitionSpec('data', 'tensor', 'context', None)"
        )
    ulysses = usp_degree(kind)
    if kind not in ATTENTION_KINDS and ulysses is None:
        raise WorkloadError(
            f"attention kind {kind!r} is unknown; use one of {ATTENTION_KINDS} or "
            f"usp_uU (Ulysses degree U >= 2), e.g. 'usp_u2'"
        )
    b_e, h_e, s_e, _ = tuple(q_spec)
    seq_axes = spec_axes(s_e)
    call = _Call(
        mesh=mesh,
        q_spec=q_spec,
        kernel=kernel,
        kv_valid_len=kv_valid_len,
        needs_mask=kv_valid_len < k.shape[2],
        seq_name=seq_axes[0] if len(seq_axes) == 1 else seq_axes,
        n_seq=math.prod(int(mesh.shape[a]) for a in seq_axes),
        tiles=tiles,
    )
    if kind == "gather_kv" or call.n_seq == 1:
        kv_spec = PartitionSpec(b_e, h_e, None, None)
        return call.per_chip(call.full, q_spec, kv_spec, kv_spec)(q, k, v)
    if kind == "ulysses":
        return _ulysses(call, q, k, v)
    if ulysses is not None:
        if call.n_seq % ulysses or not 1 < ulysses < call.n_seq:
            raise WorkloadError(
                f"{kind}: Ulysses degree {ulysses} must divide the sequence degree "
                f"{call.n_seq} and be below it (a ring of at least 2); e.g. usp_u2 on 4"
            )
        return _usp(call, q, k, v, ulysses)
    return _ring(call, q, k, v)
