"""The zoo's program families: one builder each, from a drawn configuration to a workload.

A builder takes the configuration's values (:class:`~aoizora.zoo.draw.Program`'s ``params``)
and returns what :func:`aoizora.user_workload` wraps: the function, its abstract arguments,
a logical name for every dimension and one rule set (``batch`` over ``dp``). Weights and
activations are bfloat16; layers are either unrolled or stacked under ``jax.lax.scan``, as
codebases write both.

======== ====================================================================
family   what it is
======== ====================================================================
dit      a DiT: adaLN modulation or not, XLA / dot_product_attention / splash
decoder  a causal decoder's prefill: RMSNorm, rotary, MHA/GQA/MQA, SwiGLU
mlp      a stack of dense layers, with or without norms and residuals
conv     a U-Net of convolutions in 1, 2 or 3 spatial dimensions
hybrid   a convolutional stem, transformer layers over its patches, a conv head
======== ====================================================================
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from aoizora.workloads.base import Workload, user_workload
from aoizora.workloads.rules import Rules
from aoizora.zoo.blocks import (
    ACTIVATIONS,
    attend,
    conv,
    group_norm,
    layer_norm,
    rms_norm,
    rope,
    upsample,
)

__all__ = ["BUILDERS", "build"]

Params = Mapping[str, Any]
_BF16 = jnp.bfloat16
_RULES = (Rules.of("dp", [("batch", "dp")]),)


def _sds(shape: tuple[int, ...]) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, _BF16)


def _stacked(
    shapes: Mapping[str, tuple[tuple[int, ...], tuple[str | None, ...]]], layers: int
) -> tuple[dict[str, jax.ShapeDtypeStruct], dict[str, tuple[str | None, ...]]]:
    """Per-layer weights stacked on a leading ``layers`` axis."""
    params = {k: _sds((layers, *shape)) for k, (shape, _) in shapes.items()}
    axes = {k: ("layers", *ax) for k, (_, ax) in shapes.items()}
    return params, axes


def _layers(layer: Callable[..., jax.Array], *, scan: bool) -> Callable[..., jax.Array]:
    """Run ``layer(x, p, *rest)`` over the stacked weights: a scan, or a Python loop."""

    def run(params: dict[str, jax.Array], x: jax.Array, *rest: jax.Array) -> jax.Array:
        if scan:
            out, _ = jax.lax.scan(lambda h, p: (layer(h, p, *rest), None), x, params)
            return out
        count = next(iter(params.values())).shape[0]
        for i in range(count):
            x = layer(x, {k: v[i] for k, v in params.items()}, *rest)
        return x

    return run


def _dit(c: Params) -> Workload:
    e, h, d = c["heads"] * c["head_dim"], c["heads"], c["head_dim"]
    shapes = {
        "wqkv": ((e, 3, h, d), ("embed", None, "heads", None)),
        "wo": ((h, d, e), ("heads", None, "embed")),
        "w_in": ((e, c["mlp"]), ("embed", "mlp")),
        "w_out": ((c["mlp"], e), ("mlp", "embed")),
        "w_mod": ((e, 6, e), ("embed", None, None)),
    }
    f32 = c["norm"] == "f32"

    def layer(x: jax.Array, p: dict[str, jax.Array], cond: jax.Array) -> jax.Array:
        if c["adaln"]:
            mod = jnp.einsum("be,ekf->bkf", jax.nn.silu(cond), p["w_mod"]).astype(jnp.float32)
        else:
            mod = jnp.zeros((x.shape[0], 6, e), jnp.float32)
        sh1, sc1, g1, sh2, sc2, g2 = (mod[:, i, None, :] for i in range(6))
        hid = (layer_norm(x, f32=f32) * (1 + sc1) + sh1).astype(x.dtype)
        qkv = jnp.einsum("ble,ethd->tblhd", hid, p["wqkv"])
        out = attend(qkv[0], qkv[1], qkv[2], kind=c["attention"], softmax=c["softmax"],
                     blocks=c["blocks"])  # fmt: skip
        attn = jnp.einsum("blhd,hde->ble", out, p["wo"])
        x = x + (g1 * attn.astype(jnp.float32) if c["adaln"] else attn).astype(x.dtype)
        hid = (layer_norm(x, f32=f32) * (1 + sc2) + sh2).astype(x.dtype)
        mlp = jax.nn.gelu(hid @ p["w_in"], approximate=True) @ p["w_out"]
        return x + (g2 * mlp.astype(jnp.float32) if c["adaln"] else mlp).astype(x.dtype)

    params, axes = _stacked(shapes, c["layers"])
    x, cond = _sds((c["batch"], c["length"], e)), _sds((c["batch"], e))
    act = ("batch", "length", "embed")
    return _workload(c, _layers(layer, scan=c["scan"]), (params, x, cond),
                     (axes, act, ("batch", "embed")), act)  # fmt: skip


def _decoder(c: Params) -> Workload:
    h, g, d = c["heads"], c["kv_heads"], c["head_dim"]
    e = h * d
    shapes = {
        "wq": ((e, h, d), ("embed", "heads", None)),
        "wkv": ((e, 2, g, d), ("embed", None, "kv_heads", None)),
        "wo": ((h, d, e), ("heads", None, "embed")),
        "w_gate": ((e, c["mlp"]), ("embed", "mlp")),
        "w_up": ((e, c["mlp"]), ("embed", "mlp")),
        "w_down": ((c["mlp"], e), ("mlp", "embed")),
        "n1": ((e,), (None,)),
        "n2": ((e,), (None,)),
    }

    def layer(x: jax.Array, p: dict[str, jax.Array]) -> jax.Array:
        hid = rms_norm(x, p["n1"])
        q = rope(jnp.einsum("ble,ehd->blhd", hid, p["wq"]))
        kv = jnp.einsum("ble,etgd->tblgd", hid, p["wkv"])
        out = attend(q, rope(kv[0]), kv[1], kind="xla", softmax="f32", causal=True)
        x = x + jnp.einsum("blhd,hde->ble", out, p["wo"])
        hid = rms_norm(x, p["n2"])
        return x + (jax.nn.silu(hid @ p["w_gate"]) * (hid @ p["w_up"])) @ p["w_down"]

    params, axes = _stacked(shapes, c["layers"])
    act = ("batch", "length", "embed")
    x = _sds((c["batch"], c["length"], e))
    return _workload(c, _layers(layer, scan=c["scan"]), (params, x), (axes, act), act)


def _mlp(c: Params) -> Workload:
    w = c["width"]
    shapes = {"w_in": ((w, c["hidden"]), ("embed", "mlp")),
              "w_out": ((c["hidden"], w), ("mlp", "embed"))}  # fmt: skip
    act_fn = ACTIVATIONS[c["activation"]]

    def layer(x: jax.Array, p: dict[str, jax.Array]) -> jax.Array:
        hid = layer_norm(x) if c["norm"] else x
        out = act_fn(hid @ p["w_in"]) @ p["w_out"]
        return x + out if c["residual"] else out

    params, axes = _stacked(shapes, c["layers"])
    act = ("batch", "embed")
    return _workload(c, _layers(layer, scan=c["scan"]), (params, _sds((c["tokens"], w))),
                     (axes, act), act)  # fmt: skip


def _conv(c: Params) -> Workload:
    dims, ch, k = c["dims"], c["channels"], c["kernel"]
    window = (k,) * dims
    widths = [ch * 2 ** min(i, c["levels"]) for i in range(c["levels"] + 1)]
    shapes: dict[str, tuple[tuple[int, ...], tuple[str | None, ...]]] = {
        "stem": ((*window, c["in_channels"], ch), (*(None,) * dims, None, "channels"))
    }
    for i in range(c["levels"]):
        shapes[f"down{i}"] = ((*window, widths[i], widths[i + 1]), (*(None,) * dims, None, None))
        shapes[f"up{i}"] = ((*window, widths[i + 1], widths[i]), (*(None,) * dims, None, None))
        shapes[f"mix{i}"] = ((*window, widths[i], widths[i]), (*(None,) * dims, None, None))
    params = {n: _sds(s) for n, (s, _) in shapes.items()}
    axes = {n: a for n, (_, a) in shapes.items()}

    def unet(p: dict[str, jax.Array], x: jax.Array) -> jax.Array:
        x = conv(x, p["stem"])
        skips = []
        for i in range(c["levels"]):
            skips.append(x)
            x = conv(jax.nn.silu(group_norm(x, c["groups"])), p[f"down{i}"], stride=2)
        for i in reversed(range(c["levels"])):
            x = conv(upsample(x), p[f"up{i}"]) + skips[i]
            x = conv(jax.nn.silu(group_norm(x, c["groups"])), p[f"mix{i}"])
        return x

    x = _sds((c["batch"], *c["spatial"], c["in_channels"]))
    act = ("batch", *(None,) * dims, None)
    return _workload(c, unet, (params, x), (axes, act), ("batch", *(None,) * dims, None))


def _hybrid(c: Params) -> Workload:
    p, ch = c["patch"], c["channels"]
    e, h, d = c["heads"] * c["head_dim"], c["heads"], c["head_dim"]
    size = c["size"]
    shapes = {
        "wqkv": ((e, 3, h, d), ("embed", None, "heads", None)),
        "wo": ((h, d, e), ("heads", None, "embed")),
        "w_in": ((e, 4 * e), ("embed", "mlp")),
        "w_out": ((4 * e, e), ("mlp", "embed")),
    }
    blocks, block_axes = _stacked(shapes, c["layers"])
    params = {"blocks": blocks, "stem": _sds((3, 3, ch, ch)), "head": _sds((3, 3, ch, ch)),
              "patch_in": _sds((p * p * ch, e)), "patch_out": _sds((e, p * p * ch))}  # fmt: skip
    axes = {"blocks": block_axes, "stem": (None, None, None, None),
            "head": (None, None, None, None), "patch_in": (None, "embed"),
            "patch_out": ("embed", None)}  # fmt: skip

    def layer(x: jax.Array, q: dict[str, jax.Array]) -> jax.Array:
        qkv = jnp.einsum("ble,ethd->tblhd", layer_norm(x), q["wqkv"])
        out = attend(qkv[0], qkv[1], qkv[2], kind="xla", softmax=c["softmax"])
        x = x + jnp.einsum("blhd,hde->ble", out, q["wo"])
        return x + jax.nn.gelu(layer_norm(x) @ q["w_in"], approximate=True) @ q["w_out"]

    run = _layers(layer, scan=c["scan"])

    def model(w: dict[str, Any], img: jax.Array) -> jax.Array:
        b, n = img.shape[0], size // p
        x = jax.nn.silu(group_norm(conv(img, w["stem"]), 32))
        t = x.reshape(b, n, p, n, p, ch).transpose(0, 1, 3, 2, 4, 5).reshape(b, n * n, -1)
        t = run(w["blocks"], t @ w["patch_in"]) @ w["patch_out"]
        x = t.reshape(b, n, n, p, p, ch).transpose(0, 1, 3, 2, 4, 5).reshape(b, size, size, ch)
        return conv(jax.nn.silu(group_norm(x, 32)), w["head"]) + img

    act = ("batch", None, None, None)
    return _workload(c, model, (params, _sds((c["batch"], size, size, ch))), (axes, act), act)


def _workload(c: Params, fn: Callable[..., Any], args: tuple[Any, ...], axes: tuple[Any, ...],
              out: Any) -> Workload:  # fmt: skip
    return user_workload(c["name"], fn, args, axes, out_logical_axes=out, rule_sets=_RULES)


BUILDERS: dict[str, Callable[[Params], Workload]] = {
    "dit": _dit,
    "decoder": _decoder,
    "mlp": _mlp,
    "conv": _conv,
    "hybrid": _hybrid,
}


def build(family: str, params: Params) -> Workload:
    """The workload of a ``family`` program with configuration ``params``."""
    return BUILDERS[family](params)
