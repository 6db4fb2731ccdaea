"""Drawing the zoo: program configurations at random sizes, from a seed, and one split.

:func:`catalog` draws ``count`` programs over the families of :mod:`aoizora.zoo.families`
(``FAMILY_WEIGHTS``), each configuration from its own generator seeded by ``(seed, index)``:
the same seed gives the same zoo, and program ``p017`` is the same whatever ``count`` is.
Sizes are drawn so that a program fits one TPU v5e chip (16 GiB) with room to spare and
runs for about 0.1-500 ms there.

:func:`split` cuts a list of program ids once, by a seed, into a fit half and a held-out
half: every rule of the compute model is fitted or chosen on the first only.

    >>> [p.id for p in catalog(3)]
    ['p000', 'p001', 'p002']
    >>> catalog(5)[4] == catalog(9)[4]
    True
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_SEED", "FAMILY_WEIGHTS", "SPLIT_SEED", "Program", "catalog", "program",
           "split"]  # fmt: skip

DEFAULT_SEED = 56
SPLIT_SEED = 5656
# The DiTs are what the model missed on (issue 56): they get the largest share.
FAMILY_WEIGHTS: tuple[tuple[str, int], ...] = (
    ("dit", 9), ("decoder", 5), ("mlp", 4), ("conv", 5), ("hybrid", 3),
)  # fmt: skip
_SCORE_BYTES_MAX = 2.5e9  # one layer's scores (f32 + bf16 copies) of an XLA attention


@dataclass(frozen=True)
class Program:
    """One drawn program: its id (``p017``), family and configuration (sorted pairs)."""

    id: str
    family: str
    params: tuple[tuple[str, Any], ...]

    def config(self) -> dict[str, Any]:
        """The configuration as a dict, with the program's ``name``."""
        return {"name": f"zoo-{self.id}-{self.family}", **dict(self.params)}


def _heads(rng: random.Random, head_dim: int, embeds: Sequence[int]) -> int:
    return max(1, rng.choice(embeds) // head_dim)


def _dit(rng: random.Random) -> dict[str, Any]:
    attention = rng.choices(("xla", "dpa", "splash"), (5, 2, 3))[0]
    head_dim = rng.choice((64, 128, 128, 256))
    heads = _heads(rng, head_dim, (768, 1024, 1536, 2048))
    top = 16384 if attention == "splash" else 8192
    length = rng.randrange(1024, top + 1, 256)
    batch = rng.choice((1, 2, 4)) if attention == "splash" else 1
    softmax = rng.choice(("f32", "bf16"))
    while attention != "splash" and batch * heads * length**2 * 6 > _SCORE_BYTES_MAX:
        length -= 256
    if attention != "splash" and batch == 1 and length <= 2048:
        batch = rng.choice((1, 2, 4))
    blocks = rng.choice(((512, 512, 512), (512, 1024, 512), (1024, 1024, 512), (512, 2048, 512)))
    return {"batch": batch, "length": length, "heads": heads, "head_dim": head_dim,
            "mlp": 4 * heads * head_dim, "layers": rng.choice((2, 3, 4)),
            "adaln": rng.random() < 0.6, "attention": attention, "softmax": softmax,
            "scan": rng.random() < 0.5, "norm": rng.choice(("f32", "bf16")),
            "blocks": blocks}  # fmt: skip


def _decoder(rng: random.Random) -> dict[str, Any]:
    head_dim = rng.choice((64, 128))
    heads = _heads(rng, head_dim, (1024, 1536, 2048))
    kv_heads = rng.choice([g for g in (heads, heads // 4, heads // 8, 1) if g and heads % g == 0])
    length = rng.randrange(512, 4097, 256)
    batch = rng.choice((1, 2, 4))
    while batch * heads * length**2 * 6 > _SCORE_BYTES_MAX:
        batch = max(1, batch // 2) if batch > 1 else batch
        length -= 0 if batch > 1 else 256
    mlp = 256 * round(8 * heads * head_dim / 3 / 256)
    return {"batch": batch, "length": length, "heads": heads, "kv_heads": kv_heads,
            "head_dim": head_dim, "mlp": mlp, "layers": rng.choice((2, 3, 4)),
            "scan": rng.random() < 0.5}  # fmt: skip


def _mlp(rng: random.Random) -> dict[str, Any]:
    width = rng.choice((512, 768, 1024, 2048, 3072, 4096))
    return {"tokens": rng.choice((1024, 2048, 4096, 8192, 16384, 32768)), "width": width,
            "hidden": width * rng.choice((2, 4)), "layers": rng.choice((2, 4, 6, 8)),
            "activation": rng.choice(tuple(("gelu", "relu", "silu"))),
            "norm": rng.random() < 0.5, "residual": rng.random() < 0.5,
            "scan": rng.random() < 0.3}  # fmt: skip


def _conv(rng: random.Random) -> dict[str, Any]:
    dims = rng.choice((1, 2, 2, 3))
    levels = rng.choice((1, 2))
    if dims == 1:
        spatial: tuple[int, ...] = (rng.choice((2048, 4096, 8192, 16384)),)
        channels, batch = rng.choice((128, 256, 512)), rng.choice((2, 4, 8))
    elif dims == 2:
        side = rng.choice((64, 96, 128, 192, 256))
        spatial, channels, batch = (side, side), rng.choice((64, 128, 256)), rng.choice((1, 2, 4))
    else:
        side = rng.choice((32, 48, 64, 96))
        spatial = (rng.choice((4, 8, 12, 16)), side, side)
        channels, batch = rng.choice((64, 96, 128)), 1
    return {"dims": dims, "levels": levels, "spatial": spatial, "channels": channels,
            "batch": batch, "kernel": 3, "groups": 32,
            "in_channels": rng.choice((3, 16, 32))}  # fmt: skip


def _hybrid(rng: random.Random) -> dict[str, Any]:
    head_dim = rng.choice((64, 128))
    patch = rng.choice((2, 4))
    size = rng.choice((64, 96, 128, 160))
    return {"batch": rng.choice((1, 2, 4)), "size": size, "patch": patch,
            "channels": rng.choice((64, 128)), "heads": _heads(rng, head_dim, (768, 1024)),
            "head_dim": head_dim, "layers": rng.choice((2, 3)), "softmax": rng.choice(
                ("f32", "bf16")), "scan": rng.random() < 0.5}  # fmt: skip


_DRAWS = {"dit": _dit, "decoder": _decoder, "mlp": _mlp, "conv": _conv, "hybrid": _hybrid}


def program(index: int, *, seed: int = DEFAULT_SEED) -> Program:
    """The zoo's program number ``index`` for ``seed`` (its own generator: ``(seed, index)``)."""
    rng = random.Random(f"aoizora-zoo:{seed}:{index}")
    names = [f for f, _ in FAMILY_WEIGHTS]
    family = rng.choices(names, [w for _, w in FAMILY_WEIGHTS])[0]
    config = _DRAWS[family](rng)
    return Program(f"p{index:03d}", family, tuple(sorted(config.items())))


def catalog(count: int, *, seed: int = DEFAULT_SEED) -> list[Program]:
    """The first ``count`` programs of the zoo for ``seed``."""
    return [program(i, seed=seed) for i in range(count)]


def split(ids: Sequence[str], *, seed: int = SPLIT_SEED) -> tuple[list[str], list[str]]:
    """``ids`` cut once into (fit, held-out) halves by ``seed``, each sorted; the fit half
    gets the odd one out."""
    order = sorted(ids)
    random.Random(f"aoizora-zoo-split:{seed}").shuffle(order)
    cut = (len(order) + 1) // 2
    return sorted(order[:cut]), sorted(order[cut:])
