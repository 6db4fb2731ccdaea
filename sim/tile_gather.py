"""A relayout that gathers 8-row tiles out of 2-row ones: its own HBM rates, measured.

A TPU keeps a bf16 array in tiles of 8 (or 16) rows by 128 lanes, and an array whose
second-minor dimension is 2 in tiles of 2 rows (``T(2,128)``). A Wan decoder's nearest
2x up-sampling compiles (libtpu, TPU v5e) to a broadcast into ``bf16[b,h,2,w,c]`` in 2-row
tiles and a reshape to ``bf16[b,2h,w,c]`` in 8-row tiles: every output tile is gathered
from four source tiles. It does not stream at the rate of an element-wise pass: measured
alone at 22 shapes (validation/README.md, section 17) it ran at one of four rates, set by
where its source lives (HBM, or VMEM when XLA keeps it there) and whether the source's
minor dimension is a multiple of 512 elements (four lane tiles, ``aligned``).

``[compute.tile_gather]`` of a topology file: the HBM bytes such a reshape reads and
writes a second, unaligned then aligned, by where its source lives::

    [compute.tile_gather]
    from_hbm = [2.95e11, 5.52e11]
    from_vmem = [2.22e11, 3.52e11]
    source = "..."

A generation without the table prices such a reshape as any HBM stream.

>>> t = TileGather((3.0e11, 5.5e11), (2.2e11, 3.5e11), "measured")
>>> t.seconds(((False, True, 1.1e8), (True, False, 4.4e7)))  # 1.1e8/5.5e11 + 4.4e7/2.2e11
0.0004
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.errors import TopologyError

__all__ = ["Gather", "TileGather", "parse_tile_gather"]

_KEYS = ("from_hbm", "from_vmem", "source")
# A gather as :class:`sim.compute.Work` lists it: (its source in VMEM, its minor dimension
# a multiple of 512 elements, the HBM bytes it reads and writes)
Gather = tuple[bool, bool, float]


@dataclass(frozen=True)
class TileGather:
    """The measured rates (HBM bytes a second), unaligned then aligned, of a gather whose
    source is in HBM and of one whose source is in VMEM."""

    from_hbm: tuple[float, float]
    from_vmem: tuple[float, float]
    source: str

    def seconds(self, gathers: tuple[Gather, ...]) -> float:
        """The time of ``gathers``' HBM bytes."""
        return sum(
            nbytes / (self.from_vmem if in_vmem else self.from_hbm)[aligned]
            for in_vmem, aligned, nbytes in gathers
        )


def _rates(value: Any, key: str, path: Path) -> tuple[float, float]:
    ok = (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
        and all(0 < v < math.inf for v in value)
    )
    if not ok:
        raise TopologyError(
            f"{path}: [compute.tile_gather] {key} = {value!r} must be two rates > 0 in bytes "
            "a second (a source's minor dimension not a multiple of 512, then one that is), "
            "e.g. [3.0e11, 5.5e11]"
        )
    return float(value[0]), float(value[1])


def parse_tile_gather(table: Any, path: Path, sources: list[tuple[str, str]]) -> TileGather | None:
    """``[compute.tile_gather]`` (module docstring), or None when absent."""
    if table is None:
        return None
    if not isinstance(table, dict) or set(table) != set(_KEYS):
        got = sorted(table) if isinstance(table, dict) else type(table).__name__
        raise TopologyError(
            f"{path}: [compute.tile_gather] must hold exactly {', '.join(_KEYS)} (got {got}), "
            'e.g. from_hbm = [3.0e11, 5.5e11], from_vmem = [2.2e11, 3.5e11], source = "..."'
        )
    sources.append(("compute.tile_gather", str(table["source"])))
    return TileGather(
        _rates(table["from_hbm"], "from_hbm", path),
        _rates(table["from_vmem"], "from_vmem", path),
        str(table["source"]),
    )
