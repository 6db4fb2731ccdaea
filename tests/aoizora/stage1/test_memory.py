"""Stage 1's liveness scan (aoizora.stage1.memory.peak_temp_bytes) on hand-built programs.

Each program's peak is worked out by hand in its comment: which buffers exist at the
busiest op. Value ``v`` is ``100 * v`` bytes unless a test says otherwise.
"""

from __future__ import annotations

from aoizora.stage1.memory import peak_temp_bytes
from aoizora.stage1.program import Block, Function, Op


def _fn(name: str, args: tuple[int, ...], *ops: Op) -> Function:
    return Function(name, Block(args, ops), (None,) * len(args), ())


def _peak(block: Block, functions: dict[str, Function], sizes: dict[int, int]) -> int:
    return peak_temp_bytes(
        block, functions=functions, bytes_of=lambda v: sizes.get(v, 100 * v), transient_bytes={}
    )


def test_a_call_result_is_the_buffer_its_body_returns() -> None:
    # f(x) = exp(sort(x)): inside f, the sort (20) and the exponential (21) are live
    # together at the exponential, 4,100 B; the call's result (1, 2,100 B) is the
    # exponential's buffer, not a second one.
    f = _fn(
        "f",
        (10,),
        Op("stablehlo.sort", (10,), (20,)),
        Op("stablehlo.exponential", (20,), (21,)),
        Op("func.return", (21,), ()),
    )
    main = Block((0,), (Op("func.call", (0,), (1,), callee="f"), Op("func.return", (1,), ())))
    assert _peak(main, {"f": f}, {1: 2100, 21: 2100}) == 2000 + 2100


def test_a_call_that_only_views_its_operand_takes_no_buffer() -> None:
    # jax.lax.dynamic_index_in_dim in a scan: a dynamic_slice and a reshape of the
    # stacked weights (0). The dot (3) is the only buffer: XLA reads the layer in place.
    view = _fn(
        "dynamic_index_in_dim",
        (10, 11),
        Op("stablehlo.dynamic_slice", (10, 11), (12,)),
        Op("stablehlo.reshape", (12,), (13,)),
        Op("func.return", (13,), ()),
    )
    main = Block(
        (0, 1, 2),
        (
            Op("func.call", (0, 1), (5,), callee="dynamic_index_in_dim"),
            Op("stablehlo.dot_general", (2, 5), (3,)),
            Op("func.return", (3,), ()),
        ),
    )
    assert _peak(main, {"dynamic_index_in_dim": view}, {}) == 300
    # the same call with a body that computes is a buffer of its own
    add = _fn("g", (10, 11), Op("stablehlo.sort", (10, 11), (12,)), Op("func.return", (12,), ()))
    assert _peak(main, {"dynamic_index_in_dim": add}, {12: 500}) == 500 + 300


def test_what_a_body_returns_is_written_even_if_it_is_a_slice() -> None:
    # A VAE chunk returns its causal caches as slices of its activations: a slice fused
    # into its consumer takes no buffer, but one handed back to the caller does.
    f = _fn(
        "f",
        (10,),
        Op("stablehlo.slice", (10,), (11,)),
        Op("func.return", (11,), ()),
    )
    main = Block((0,), (Op("func.call", (0,), (1,), callee="f"), Op("func.return", (1,), ())))
    assert _peak(main, {"f": f}, {11: 700, 1: 700}) == 700


def test_a_loop_result_is_held_beside_its_body() -> None:
    # The init (2) is read after the loop, so the loop's state (3) is a buffer of its own
    # (copy insertion), held while the body runs beside the body's own peak (12 and 13).
    body = Block(
        (10, 11),
        (
            Op("stablehlo.sort", (10,), (12,)),
            Op("stablehlo.sort", (12,), (13,)),
            Op("stablehlo.return", (13, 11), ()),
        ),
    )
    cond = Block((10, 11), ())
    main = Block(
        (0, 1),
        (
            Op("stablehlo.sort", (0,), (2,)),
            Op("stablehlo.while", (2, 1), (3, 4), regions=(cond, body)),
            Op("stablehlo.add", (2, 3), (5,)),
            Op("func.return", (5,), ()),
        ),
    )
    sizes = {2: 50, 3: 50, 4: 0, 5: 50, 12: 40, 13: 40}
    # at the loop: the init (50) + the state (50) + the body's peak (80)
    assert _peak(main, {}, sizes) == 50 + 50 + 80
    # when the init dies at the loop the state lives in its buffer: one 50, not two
    dies = Block((0, 1), (*main.ops[:2], Op("func.return", (3,), ())))
    assert _peak(dies, {}, sizes) == 50 + 80
