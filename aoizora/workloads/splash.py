"""Pallas splash attention on one chip, every head unmasked (Wan's self-attention is full).

:func:`splash_attention` pads the sequences to the kernel's blocks, masks the
padding with segment ids and runs jax's splash kernel
(``jax.experimental.pallas.ops.tpu.splash_attention``) under ``vmap`` over the
batch. Two things make it cheap to trace many times, as Stage 1 does:

* **The mask info in closed form** (:func:`full_mask_info`; docs/facts.md, Splash attention).
  jax's ``process_mask`` walks every (q block, kv block) pair of the mask in
  Python, about 0.4 s for a 720p local sequence, and keeps 12 results. For a
  full mask the answer is known: every block is full and step (i, j) loads kv
  block j. The kernels of each local shape are kept on the host (numpy), shared
  by the kernels with and without residuals.
* **Kernels without bodies** (``body=False``): the kernel's operands and results
  around an opaque call (:mod:`aoizora.workloads.opaque`), traced once per local
  shape. For lowering only: Stage 1 reads these programs; they cannot be
  compiled.

Both give the program jax's own ``make_splash_mha`` gives: byte for byte with
bodies, and but for the kernels' attributes without
(``tests/aoizora/workload/test_splash.py``).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask_info as mi

from aoizora.errors import WorkloadError
from aoizora.workloads.opaque import KernelFree, trace_without_kernel_bodies
from sim.splash_tiles import BASE_TILE, LANES, tile_problem

__all__ = ["DEFAULT_BLOCKS", "block_size", "call_blocks", "check_blocks", "full_mask_info",
           "splash_attention"]  # fmt: skip

# Splash tile sizes: maxdiffusion's base_wan_14b.yml uses 512 for every block on v5e
# (block_q, block_kv, block_kv_compute): the tiles a plan starts from and its baselines run.
DEFAULT_BLOCKS: tuple[int, int, int] = BASE_TILE
_MAX_BLOCK = DEFAULT_BLOCKS[0]
_MIN_BLOCK = LANES  # the kernel's lane width; shorter sequences are padded up to it


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def block_size(length: int) -> int:
    """The splash block for a sequence of ``length``: 512, or the length rounded up to
    the 128-wide lanes when shorter.

    >>> block_size(75600), block_size(300), block_size(1)
    (512, 384, 128)
    """
    return min(_MAX_BLOCK, _round_up(length, _MIN_BLOCK))


def check_blocks(blocks: tuple[int, ...]) -> tuple[int, int, int]:
    """``(block_q, block_kv, block_kv_compute)`` checked (:func:`sim.splash_tiles.tile_problem`).

    >>> check_blocks((512, 2048, 512))
    (512, 2048, 512)
    >>> check_blocks((512, 1024, 768))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    aoizora.errors.WorkloadError: splash blocks (512, 1024, 768): block_kv_compute 768 ...
    """
    problem = tile_problem(tuple(blocks))
    if problem:
        raise WorkloadError(f"splash blocks {tuple(blocks)}: {problem}")
    bq, bkv, bkvc = blocks
    return bq, bkv, bkvc


def call_blocks(
    blocks: tuple[int, int, int], q_length: int, kv_length: int
) -> tuple[int, int, int]:
    """The blocks one call of lengths ``q_length`` x ``kv_length`` runs with under a
    program's ``blocks``: each no longer than its sequence rounded up -- to 128 lanes up
    to 512 (as :func:`block_size` does), to a multiple of 512 beyond -- and the compute
    block the kv block's when it no longer divides it. Stage 1 reads a sequence padded
    to 512 and prices a tile with this rule (``aoizora.stage1.tiles``): rounding to 512
    first gives it the blocks the program runs.

    >>> call_blocks((512, 2048, 512), 9360, 512), call_blocks((1024, 1024, 512), 300, 300)
    ((512, 512, 512), (384, 384, 384))
    >>> call_blocks((512, 2048, 512), 1728, 1728)
    (512, 2048, 512)
    """
    bq = min(blocks[0], _fit_length(q_length))
    bkv = min(blocks[1], _fit_length(kv_length))
    bkvc = min(blocks[2], bkv)
    return bq, bkv, bkvc if bkv % bkvc == 0 else bkv


def _fit_length(length: int) -> int:
    return _round_up(length, _MIN_BLOCK if length <= _MAX_BLOCK else _MAX_BLOCK)


def full_mask_info(q_length: int, kv_length: int, block_q: int, block_kv: int) -> mi.MaskInfo:
    """Splash's forward mask info for a full mask shared by every head, one head shard
    and one q shard -- what jax's ``process_mask`` returns for it, in closed form.

    Every (q block, kv block) is full (``block_mask`` 2), grid step (i, j) loads kv
    block j (``data_next``), no block is partial (no ``mask_next``, no partial
    blocks). The arrays are downcast to the smallest integer type that holds them,
    as jax does (``_downcast_to_small_type``, ``downcast_smem_data=True``).

    >>> info = full_mask_info(1024, 1536, 512, 512)
    >>> info.data_next.tolist(), info.block_mask.dtype
    ([[[0, 1, 2], [0, 1, 2]]], dtype('int8'))
    """
    q_blocks, kv_blocks = q_length // block_q, kv_length // block_kv
    shape = (1, q_blocks, kv_blocks)
    data_next = np.broadcast_to(np.arange(kv_blocks, dtype=np.int32), shape)
    return mi.MaskInfo(
        data_next=_downcast(data_next),
        mask_next=None,
        block_mask=_downcast(np.full(shape, 2, dtype=np.int32)),
        partial_mask_blocks=None,
        q_sequence=None,
    )


def _downcast(array: np.ndarray) -> np.ndarray:
    """int8, int16 or int32: the first that holds the array's largest value."""
    top = int(array.max()) if array.size else 0
    for dtype in (np.int8, np.int16):
        if top <= np.iinfo(dtype).max:
            return array.astype(dtype)
    return np.ascontiguousarray(array)


# Called for every attention of every candidate; Stage 1 of Wan 2.1 14B 720p on
# v5e:4x4 meets 23 local shapes in 47 calls.
@functools.lru_cache(maxsize=256)
def _kernels_on_host(q_length: int, kv_length: int, bq: int, bkv: int, bkvc: int) -> Any:
    """The kernels without and with residuals, their mask info on the host (numpy)
    and shared: within one trace jax makes one constant of an array however many
    kernels use it, as it does for ``make_splash_mha``'s mask info. One mask serves
    every head (the mask info has one head shard): the head count is no part of the key."""
    info = full_mask_info(q_length, kv_length, bq, bkv)
    sizes = sk.BlockSizes(block_q=bq, block_kv=bkv, block_kv_compute=bkvc)
    # make_splash_mha's arguments to the kernel (jax _make_splash_attention).
    return tuple(
        sk.SplashAttentionKernel(
            info,
            None,
            None,
            block_sizes=sizes,
            is_mqa=False,
            save_residuals=residuals,
            mask_value=sk.DEFAULT_MASK_VALUE,
            attn_logits_soft_cap=None,
            residual_checkpoint_name=None,
            mask_function=None,
            interpret=False,
        )
        for residuals in (False, True)
    )


def _kernel(
    heads: int, q_length: int, kv_length: int, bq: int, bkv: int, bkvc: int, *, with_lse: bool
) -> Any:
    """The kernel for a local shape, its mask info made arrays of the current trace.

    Call it inside the trace, as ``make_splash_mha`` would be: ``jnp.array`` makes
    the mask info constants of this program (a kernel kept from an earlier trace
    would hold arrays jax passes as extra arguments instead).
    """
    del heads  # make_splash_mha's mask has one per head; their mask info is one
    return jax.tree.map(jnp.array, _kernels_on_host(q_length, kv_length, bq, bkv, bkvc)[with_lse])


def _run(kernel: Any, q: jax.Array, k: jax.Array, v: jax.Array, ids: Any) -> Any:
    return jax.vmap(kernel, in_axes=(0, 0, 0, None))(q, k, v, ids)


def _sds(x: Any) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(tuple(x.shape), x.dtype)


@functools.lru_cache(maxsize=256)
def _kernel_free(
    blocks: tuple[int, int, int, int, int], with_lse: bool, args: tuple[Any, ...]
) -> KernelFree:
    """The kernel's program without its body, for padded lengths and blocks and the
    argument types.

    The mask info enters as arguments, so each caller's trace makes its constants
    as the kernel with a body does.
    """
    kernel = _kernels_on_host(*blocks)[with_lse]
    leaves, tree = jax.tree.flatten(kernel)

    def run(info: list[jax.Array], *qkv_ids: Any) -> Any:
        return _run(jax.tree.unflatten(tree, info), *qkv_ids)

    return trace_without_kernel_bodies(run, [_sds(x) for x in leaves], *args)


def _call_without_body(
    blocks: tuple[int, int, int, int, int], with_lse: bool, kernel: Any, *args: Any
) -> Any:
    """``kernel`` (from :func:`_kernel`) called on ``args``, without its body."""
    program = _kernel_free(blocks, with_lse, jax.tree.map(_sds, args))
    return program(jax.tree.leaves(kernel), *args)


def splash_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    kv_valid: jax.Array | None,
    *,
    scale: float,
    with_lse: bool,
    body: bool = True,
    block_sizes: tuple[int, ...] | None = None,
    tiles: tuple[int, int, int] | None = None,
) -> tuple[jax.Array, jax.Array | None]:
    """Softmax attention ``(b, h, sq, d) x (b, h, skv, d) -> (b, h, sq, d)`` by splash.

    ``kv_valid``: boolean ``(skv,)`` mask of real key positions (``None``: all
    real). Returns the output (f32 when ``with_lse``, else q's dtype) and, with
    ``with_lse``, the log-sum-exp ``(b, h, sq)``. ``body=False`` lowers the kernel
    without its body (see the module docstring): for reading only. ``block_sizes``:
    (q block, kv block[, kv compute block]) instead of :func:`block_size`'s (kernel
    microbenchmarks: used as given; the compute block defaults to the kv block, as
    maxdiffusion's). ``tiles``: a program's (q, kv, kv compute) blocks, each call's
    fitted to its lengths by :func:`call_blocks` (default :data:`DEFAULT_BLOCKS`).
    """
    _, heads, sq, _ = q.shape
    skv = k.shape[2]
    if block_sizes is None:
        given: tuple[int, ...] = call_blocks(tiles or DEFAULT_BLOCKS, sq, skv)
    else:
        given = tuple(block_sizes)
    bq, bkv = given[0], given[1]
    bkvc = given[2] if len(given) > 2 else bkv
    sq_p, skv_p = _round_up(sq, bq), _round_up(skv, bkv)
    q = q * jnp.asarray(scale, q.dtype)  # splash does not scale the logits itself
    needs_ids = kv_valid is not None or sq_p != sq or skv_p != skv
    if sq_p != sq:
        q = jnp.pad(q, ((0, 0), (0, 0), (0, sq_p - sq), (0, 0)))
    if skv_p != skv:
        k = jnp.pad(k, ((0, 0), (0, 0), (0, skv_p - skv), (0, 0)))
        v = jnp.pad(v, ((0, 0), (0, 0), (0, skv_p - skv), (0, 0)))
    ids = None
    if needs_ids:
        # Real tokens are segment 1, padding segment 0: a query attends only keys
        # of its own segment, so real queries never see padded keys.
        q_ids = (jnp.arange(sq_p) < sq).astype(jnp.int32)
        valid = jnp.ones((skv,), jnp.bool_) if kv_valid is None else kv_valid
        kv_ids = jnp.pad(valid.astype(jnp.int32), (0, skv_p - skv))
        ids = sk.SegmentIds(q=q_ids, kv=kv_ids)
    blocks = (sq_p, skv_p, bq, bkv, bkvc)
    kernel = _kernel(heads, *blocks, with_lse=with_lse)
    if body:
        result = _run(kernel, q, k, v, ids)
    else:
        result = _call_without_body(blocks, with_lse, kernel, q, k, v, ids)
    if with_lse:
        out, (lse,) = result
        return out[:, :, :sq].astype(jnp.float32), lse[:, :, :sq]
    return result[:, :, :sq], None
