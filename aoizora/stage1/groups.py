"""Which mesh axes a collective's replica groups span (``shard_map`` collectives are
written with device ids, not axis names).

>>> groups = MeshGroups((("data", 2), ("model", 4)), device_ids=())
>>> groups.varying_axes([[0, 1, 2, 3], [4, 5, 6, 7]])  # ids run row-major: model varies
[('model', 4)]
>>> groups.varying_axes([[0, 4], [1, 5], [2, 6], [3, 7]])
[('data', 2)]
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from aoizora.stage1.program import Stage1Error

__all__ = ["MeshGroups"]


class MeshGroups:
    """A mesh's device -> coordinates table, for naming the axes of replica groups.

    ``device_ids`` is the mesh's explicit device order (``()`` for jax's default
    iota order, where device ``d`` sits at row-major position ``d``).
    """

    def __init__(self, mesh_axes: Sequence[tuple[str, int]], *, device_ids: Sequence[int]) -> None:
        self.mesh_axes = tuple(mesh_axes)
        sizes = [s for _, s in self.mesh_axes]
        n = math.prod(sizes)
        pos = np.arange(n, dtype=np.int64)  # the default iota order: id = position
        if device_ids:  # an explicit device order: device ids[p] sits at mesh position p
            if sorted(device_ids) != list(range(n)):
                raise Stage1Error(
                    f"the mesh's device ids {list(device_ids)[:8]}... are not a permutation of "
                    f"0..{n - 1} for mesh {dict(self.mesh_axes)}"
                )
            pos[np.asarray(device_ids, dtype=np.int64)] = np.arange(n, dtype=np.int64)
        self.table = np.stack(np.unravel_index(pos, sizes), axis=1)
        self._cache: dict[tuple[tuple[int, ...], ...], list[tuple[str, int]]] = {}

    def varying_axes(self, groups: Sequence[Sequence[int]]) -> list[tuple[str, int]]:
        """Mesh axes (in mesh order) along which a group's members differ, with the extent.

        One pass over the table (a group of a 256-chip mesh lists 256 devices,
        and ring attention issues hundreds of them), memoised per group list.
        """
        key = tuple(tuple(g) for g in groups)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        table = self.table
        extent: dict[str, int] = {}
        for g in key:
            if not g:
                continue
            members = np.asarray(g, dtype=np.int64)
            if members.min() < 0 or members.max() >= len(table):
                raise Stage1Error(
                    f"a collective's replica group names device {int(members.max())} (or "
                    f"{int(members.min())}), outside the {len(table)}-device mesh "
                    f"{dict(self.mesh_axes)}; groups must list devices of the program's mesh"
                )
            coords = table[members]
            for i, (name, _) in enumerate(self.mesh_axes):
                k = len(np.unique(coords[:, i]))
                if k > 1:
                    extent[name] = max(extent.get(name, 1), k)
        out = [(name, extent[name]) for name, _ in self.mesh_axes if name in extent]
        self._cache[key] = out
        return out
