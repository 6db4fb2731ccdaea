"""The values Stage 1 reads a propagated program into (frozen dataclasses).

:mod:`aoizora.stage1.shardy` runs Shardy's passes and converts the module into
these: a :class:`ShardyModule` of :class:`Function` bodies made of :class:`Op`
values over numbered values, each with its :class:`TensorType` and
:class:`Sharding` (mesh axes per dimension, :class:`AxisRef`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from aoizora.errors import AoizoraError

__all__ = [
    "AxisRef",
    "Block",
    "Convolution",
    "Function",
    "Op",
    "Sharding",
    "ShardyModule",
    "Stage1Error",
    "TensorType",
]


class Stage1Error(AoizoraError):
    """The lowered program could not be read or estimated by Stage 1."""


@dataclass(frozen=True, order=True)
class AxisRef:
    """One mesh axis (or sub-axis ``name:(pre_size)size``) that shards a dimension.

    >>> AxisRef("fsdp", 4).label, AxisRef("fsdp", 2, pre_size=2, is_sub_axis=True).label
    ('fsdp', 'fsdp:(2)2')
    """

    name: str
    size: int
    pre_size: int = 1
    is_sub_axis: bool = False

    @property
    def label(self) -> str:
        return f"{self.name}:({self.pre_size}){self.size}" if self.is_sub_axis else self.name


@dataclass(frozen=True)
class Sharding:
    """A tensor's sharding: for each dimension, the axes that split it (major first).

    >>> s = Sharding(((AxisRef("data", 2),), ()))
    >>> s.num_shards, s.axis_names
    (2, ('data',))
    """

    dims: tuple[tuple[AxisRef, ...], ...]

    @property
    def num_shards(self) -> int:
        return math.prod(a.size for d in self.dims for a in d)

    @property
    def axis_names(self) -> tuple[str, ...]:
        return tuple(a.name for d in self.dims for a in d)

    def without(self, axis_names: Iterable[str]) -> Sharding:
        """The same sharding with the given axes dropped (e.g. manual axes)."""
        drop = set(axis_names)
        return Sharding(tuple(tuple(a for a in d if a.name not in drop) for d in self.dims))

    @staticmethod
    def replicated(rank: int) -> Sharding:
        return Sharding(tuple(() for _ in range(rank)))

    def label(self) -> str:
        return "[" + ", ".join("{" + ",".join(a.label for a in d) + "}" for d in self.dims) + "]"


_LANES = 128  # a TPU vector register's lanes: the minor dimension's tile (T(8,128))
# XLA's layout assignment moves a narrow dimension out of the lanes rather than pad it
# 40-fold (compiled VAE decodes store RGB [.., 3] frames with another dimension minor),
# so only a dimension that fills most of its lanes is taken to be padded: 96 -> 128.
_MOST_PADDING = 1.5


@dataclass(frozen=True)
class TensorType:
    """Shape and element width of a value (tokens and tuples have rank 0, 0 bytes).

    >>> TensorType((16, 256), 2).size_bytes
    8192
    """

    shape: tuple[int, ...]
    element_bytes: int

    @property
    def num_elements(self) -> int:
        return math.prod(self.shape)

    @property
    def size_bytes(self) -> int:
        return self.num_elements * self.element_bytes

    def stored_bytes(self, local_shape: tuple[int, ...]) -> int:
        """Bytes a shard of ``local_shape`` occupies in XLA TPU's default tiled layout:
        its most minor dimension padded to the 128 lanes of its tile
        (openxla.org/xla/tiled_layout; compiled TPU HLO prints ``T(8,128)``, bf16 too as
        ``T(8,128)(2,1)``), so 96 channels take 128 lanes -- when that pads it by at most
        half (:data:`_MOST_PADDING`; a narrower one XLA lays out otherwise). Rank 0 and 1:
        unpadded.

        >>> TensorType((6, 60, 104, 96), 2).stored_bytes((6, 60, 104, 96))  # 4/3 of 7.2 MB
        9584640
        >>> TensorType((21, 480, 832, 3), 4).stored_bytes((21, 480, 832, 3))  # RGB: as it is
        100638720
        """
        elems = math.prod(local_shape)
        lanes = local_shape[-1] if len(local_shape) >= 2 else 0
        padded = -(-lanes // _LANES) * _LANES
        if lanes and padded <= _MOST_PADDING * lanes:
            elems = elems // lanes * padded
        return elems * self.element_bytes

    def shard_bytes(self, sharding: Sharding | None) -> int:
        """Bytes of one device's shard (ceil per dimension, as the partitioner pads).

        >>> TensorType((10, 4), 4).shard_bytes(Sharding(((AxisRef("x", 4),), ())))
        48
        """
        if sharding is None or len(sharding.dims) != len(self.shape):
            return self.size_bytes
        elems = 1
        for size, axes in zip(self.shape, sharding.dims, strict=True):
            elems *= -(-size // math.prod(a.size for a in axes)) if axes else size
        return elems * self.element_bytes


@dataclass(frozen=True)
class Convolution:
    """A ``stablehlo.convolution``'s dimension numbers and window, per spatial dimension.

    ``spatial`` pairs (input dimension, kernel dimension, output dimension) for
    every spatial dimension; ``strides``, ``padding_low``, ``lhs_dilation`` and
    ``rhs_dilation`` follow the same order.
    """

    input_batch: int
    kernel_input_feature: int
    kernel_output_feature: int
    spatial: tuple[tuple[int, int, int], ...]
    strides: tuple[int, ...]
    padding_low: tuple[int, ...]
    lhs_dilation: tuple[int, ...]
    rhs_dilation: tuple[int, ...]


@dataclass(frozen=True)
class Block:
    """A region's single block: argument value ids and its ops in program order."""

    args: tuple[int, ...]
    ops: tuple[Op, ...]


@dataclass(frozen=True)
class Op:
    """One operation with the attributes Stage 1 needs (others are not kept).

    Only the fields meaningful for ``name`` are set; the rest keep their defaults.
    """

    name: str
    operands: tuple[int, ...]
    results: tuple[int, ...]
    regions: tuple[Block, ...] = ()
    # Explicit collectives (stablehlo.all_gather, ...): device ids per group.
    replica_groups: tuple[tuple[int, ...], ...] = ()
    source_target_pairs: tuple[tuple[int, int], ...] = ()
    # sdy.manual_computation
    manual_axes: tuple[str, ...] = ()
    in_shardings: tuple[Sharding, ...] = ()
    out_shardings: tuple[Sharding, ...] = ()
    # sdy.reshard / sdy.sharding_constraint / sdy collectives: the wanted sharding.
    target_sharding: Sharding | None = None
    # sdy collectives: the mesh axes (or sub-axes) they gather, slice, move or reduce.
    collective_axes: tuple[AxisRef, ...] = ()
    # stablehlo.dot_general: the lhs contracting dimensions, and the rest of its
    # dimension numbers (XLA's windowed-einsum rule classifies every dimension).
    contracting_dims: tuple[int, ...] = ()
    rhs_contracting_dims: tuple[int, ...] = ()
    lhs_batch_dims: tuple[int, ...] = ()
    rhs_batch_dims: tuple[int, ...] = ()
    # func.call
    callee: str = ""
    # stablehlo.custom_call
    call_target: str = ""
    kernel_name: str = ""
    cost_estimate_flops: float | None = None
    cost_estimate_bytes: float | None = None
    # constants (scalar integers only) and stablehlo.compare
    int_value: int | None = None
    compare_direction: str = ""
    # stablehlo.convolution
    convolution: Convolution | None = None
    location: str = ""


@dataclass(frozen=True)
class Function:
    """A ``func.func``: its body and the shardings on its arguments and results."""

    name: str
    body: Block
    arg_shardings: tuple[Sharding | None, ...]
    result_shardings: tuple[Sharding | None, ...]


@dataclass(frozen=True)
class ShardyModule:
    """The whole propagated program.

    ``value_types[v]`` and ``value_shardings[v]`` describe value ``v``. Inside a
    ``shard_map`` body types are per-device along the manual axes and shardings
    mention only the remaining free axes. ``None`` means no sharding attached
    (replicated). ``device_ids`` is the mesh's explicit device order, ``()`` for
    the default iota order.
    """

    main: str
    functions: Mapping[str, Function]
    mesh_axes: tuple[tuple[str, int], ...]
    device_ids: tuple[int, ...]
    value_types: tuple[TensorType, ...]
    value_shardings: tuple[Sharding | None, ...]
    value_defs: tuple[int, ...] = field(default=(), repr=False)

    @property
    def mesh_axis_sizes(self) -> dict[str, int]:
        return dict(self.mesh_axes)
