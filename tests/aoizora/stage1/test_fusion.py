"""Stage 1's XLA-like fusion: which ops share a kernel, and the bytes each kernel moves."""

from __future__ import annotations

from aoizora.stage1.fusion import Kernel, fuse_block, op_class
from aoizora.stage1.shardy import Block, Op

# Value v has 100 * (v + 1) bytes, so every term of a sum below is identifiable.
SIZE = {v: 100 * (v + 1) for v in range(32)}


def _fuse(ops: list[Op], args: tuple[int, ...] = (0, 1, 2)) -> list[Kernel]:
    return fuse_block(Block(args, (*ops, Op("func.return", (ops[-1].results[0],), ()))),
                      bytes_of=SIZE.__getitem__)  # fmt: skip


def test_an_elementwise_chain_is_one_kernel_into_its_reduction() -> None:
    kernels = _fuse(
        [
            Op("stablehlo.convert", (0,), (10,)),
            Op("stablehlo.multiply", (10, 1), (11,)),
            Op("stablehlo.exponential", (11,), (12,)),
            Op("stablehlo.reduce", (12, 2), (13,)),
        ]
    )
    assert [k.ops for k in kernels] == [(0, 1, 2, 3)]
    # Reads its three external inputs once, writes the reduction once.
    assert kernels[0].hbm_bytes == SIZE[0] + SIZE[1] + SIZE[2] + SIZE[13]


def test_a_value_with_two_consumers_is_written_once_and_read_by_each() -> None:
    kernels = _fuse(
        [
            Op("stablehlo.add", (0, 1), (10,)),
            Op("stablehlo.reduce", (10, 2), (11,)),  # consumer 1 (a root)
            Op("stablehlo.transpose", (10,), (12,)),  # consumer 2 (a root)
            Op("stablehlo.add", (11, 12), (13,)),
        ]
    )
    assert [k.ops for k in kernels] == [(0,), (1,), (2,), (3,)]
    add, red, tr, last = (k.hbm_bytes for k in kernels)
    assert add == SIZE[0] + SIZE[1] + SIZE[10]
    assert red == SIZE[10] + SIZE[2] + SIZE[11]
    assert tr == SIZE[10] + SIZE[12]
    assert last == SIZE[11] + SIZE[12] + SIZE[13]


def test_a_value_an_opaque_op_reads_is_written_and_read_back() -> None:
    kernels = _fuse(
        [
            Op("stablehlo.add", (0, 1), (10,)),
            Op("sdy.all_gather", (10,), (11,)),  # needs its operand in HBM
            Op("stablehlo.transpose", (10,), (12,)),
            Op("stablehlo.add", (11, 12), (13,)),
        ]
    )
    assert [k.ops for k in kernels] == [(0,), (2,), (3,)]
    assert kernels[0].hbm_bytes == SIZE[0] + SIZE[1] + SIZE[10]
    assert kernels[1].hbm_bytes == SIZE[10] + SIZE[12]


def test_a_reduction_of_a_matmul_joins_its_kernel() -> None:
    kernels = _fuse(
        [
            Op("stablehlo.dot_general", (0, 1), (10,)),
            Op("stablehlo.convert", (10,), (11,)),
            Op("stablehlo.reduce", (11, 2), (12,)),  # row maxima of the logits
            Op("stablehlo.subtract", (11, 12), (13,)),
            Op("stablehlo.dot_general", (13, 1), (14,)),
        ]
    )
    # dot + reduce: one kernel that writes the (narrow) logits and their maxima; the
    # convert is recomputed where it is used, and the subtract is the second dot's
    # prologue, reading the logits and the maxima.
    assert [k.ops for k in kernels] == [(0, 2), (3, 4)]
    assert kernels[0].hbm_bytes == SIZE[0] + SIZE[1] + SIZE[2] + SIZE[10] + SIZE[12]
    assert kernels[1].hbm_bytes == SIZE[10] + SIZE[12] + SIZE[1] + SIZE[14]


def test_broadcasts_are_duplicated_into_consumers_not_written() -> None:
    kernels = _fuse(
        [
            Op("stablehlo.broadcast_in_dim", (1,), (10,)),
            Op("stablehlo.reduce", (0, 10), (11,)),
            Op("stablehlo.transpose", (10,), (12,)),
            Op("stablehlo.add", (11, 12), (13,)),
        ]
    )
    assert [k.ops for k in kernels] == [(1,), (2,), (3,)]
    # Each consumer reads the broadcast's (small) operand, not the broadcast.
    assert kernels[0].hbm_bytes == SIZE[0] + SIZE[1] + SIZE[11]
    assert kernels[1].hbm_bytes == SIZE[1] + SIZE[12]


def test_a_matmul_absorbs_elementwise_neighbours_but_never_a_second_matmul() -> None:
    # Consumers absorb producers first (XLA's post-order walk): the add between the
    # two matmuls becomes the second one's prologue.
    kernels = _fuse(
        [
            Op("stablehlo.convert", (0,), (10,)),
            Op("stablehlo.dot_general", (10, 1), (11,)),
            Op("stablehlo.add", (11, 2), (12,)),
            Op("stablehlo.dot_general", (12, 1), (13,)),
        ]
    )
    assert [k.ops for k in kernels] == [(0, 1), (2, 3)]
    assert kernels[0].hbm_bytes == SIZE[0] + SIZE[1] + SIZE[11]
    assert kernels[1].hbm_bytes == SIZE[11] + SIZE[2] + SIZE[1] + SIZE[13]
    # Alone, a matmul's element-wise consumer is its epilogue (output fusion).
    bias = _fuse([Op("stablehlo.dot_general", (0, 1), (10,)), Op("stablehlo.add", (10, 2), (11,))])
    assert [k.ops for k in bias] == [(0, 1)]
    assert bias[0].hbm_bytes == SIZE[0] + SIZE[1] + SIZE[2] + SIZE[11]


def test_transposes_fuse_into_a_matmul_and_are_copies_elsewhere() -> None:
    into_dot = _fuse(
        [Op("stablehlo.transpose", (0,), (10,)), Op("stablehlo.dot_general", (10, 1), (11,))]
    )
    assert [k.ops for k in into_dot] == [(0, 1)]
    alone = _fuse([Op("stablehlo.transpose", (0,), (10,)), Op("stablehlo.negate", (10,), (11,))])
    assert [k.ops for k in alone] == [(0,), (1,)]
    assert alone[0].hbm_bytes == SIZE[0] + SIZE[10]


def test_slices_read_what_they_return_and_updates_write_in_place() -> None:
    sliced = _fuse(
        [Op("stablehlo.dynamic_slice", (0, 1), (10,)), Op("stablehlo.negate", (10,), (11,))]
    )
    # SIZE[10] > SIZE[0]: a slice never reads more than its operand.
    assert sliced[0].hbm_bytes == min(SIZE[0], SIZE[10]) + SIZE[1] + SIZE[11]
    updated = _fuse([Op("stablehlo.dynamic_update_slice", (0, 1, 2), (10,))])
    assert updated[0].hbm_bytes == SIZE[1] + SIZE[2] + SIZE[1]  # update in, update out


def test_opaque_ops_are_never_fused() -> None:
    kernels = _fuse(
        [
            Op("stablehlo.add", (0, 1), (10,)),
            Op("sdy.all_gather", (10,), (11,)),
            Op("stablehlo.multiply", (11, 2), (12,)),
        ]
    )
    assert [k.ops for k in kernels] == [(0,), (2,)]
    assert [op_class(n) for n in ("stablehlo.custom_call", "stablehlo.while", "func.call")] == [
        "opaque"
    ] * 3
