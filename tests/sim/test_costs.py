"""The shared cost formulas (sim/costs.py) against the simulator they stand in for."""

from __future__ import annotations

import math
import time

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from sim.collectives import collective_flows
from sim.costs import (
    ConvDim,
    all_to_all_link_load,
    attention_flops,
    best_box,
    collective_time_s,
    conv_flops,
    conv_matmul,
    matmul_flops,
    roofline_s,
    window_positions,
)
from sim.engine import simulate
from sim.errors import CollectiveError
from sim.routing import route
from sim.topology import load_chip, load_slice, make_slice

KINDS = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "collective-permute")


def _cycle(p: int, q: int) -> list[tuple[int, int]]:
    """A Hamiltonian cycle of neighbour links through a p x q grid (p even or q even)."""
    if p == 1:
        return [(0, j) for j in range(q)]
    coords = [(0, j) for j in range(q)]
    for i in range(1, p):
        js = range(q - 1, 0, -1) if i % 2 else range(1, q)
        coords += [(i, j) for j in js]
    coords += [(i, 0) for i in range(p - 1, 0, -1)]
    return coords


def _simulated(kind: str, slice_name: str, nbytes: float) -> tuple[float, float]:
    """(simulated, closed-form) time of one collective over the whole slice, best layout."""
    s = load_slice(slice_name)
    box = best_box(s.num_chips, s)
    members = _cycle(*s.shape)
    if kind == "collective-permute":
        n = len(members)
        pairs = [(members[i], members[(i + 1) % n]) for i in range(n)]
        plan = collective_flows(kind, (), pairs=pairs, buffer_bytes=nbytes, id_prefix="c")
    else:
        plan = collective_flows(kind, [members], buffer_bytes=nbytes, id_prefix="c")
    formula = collective_time_s(
        kind,
        group_size=s.num_chips,
        bytes_per_device=nbytes,
        link_bandwidth_bytes_per_s=s.link_bandwidth_bytes_per_s,
        hop_latency_s=s.hop_latency_s,
        ring=box.ring,
        box=(box.shape, box.wraparound),
    )
    return simulate(s, plan.nodes).makespan_s, formula


@pytest.mark.parametrize("slice_name", ["v5e:1x2", "v5e:2x2", "v5e:2x4", "v5e:4x4"])
@pytest.mark.parametrize("kind", KINDS)
def test_closed_forms_equal_the_simulator(kind: str, slice_name: str) -> None:
    """On a ring (or two chips) the formulas are the simulator's time, to rounding."""
    simulated, formula = _simulated(kind, slice_name, 8e6)
    assert formula == pytest.approx(simulated, rel=1e-9)


def test_line_formula_is_the_no_wraparound_ideal() -> None:
    """On a line the bidirectional ring's closing hop runs back over the line; the
    formula is the scaling-book ideal below it, exact for 2 chips."""
    kw = {"link_bandwidth_bytes_per_s": 45e9, "hop_latency_s": 1e-6, "ring": False}
    for n in (2, 4, 8):
        s = make_slice([n], link_bandwidth_bytes_per_s=45e9, hop_latency_s=1e-6)
        plan = collective_flows("all-gather", [s.coords], buffer_bytes=8e6, id_prefix="g")
        simulated = simulate(s, plan.nodes).makespan_s
        formula = collective_time_s("all-gather", group_size=n, bytes_per_device=8e6, **kw)
        assert formula == pytest.approx((n - 1) * (8e6 / n / 45e9 + 1e-6))
        assert formula <= simulated * (1 + 1e-9)
        if n == 2:
            assert formula == pytest.approx(simulated)


def test_best_box_prefers_a_ring_then_the_smallest_diameter() -> None:
    s = load_slice("v5e:4x4")
    assert best_box(16, s).shape == (4, 4) and best_box(16, s).ring
    assert best_box(8, s).shape in ((2, 4), (4, 2)) and best_box(8, s).ring
    assert best_box(4, s).shape == (2, 2)
    assert not best_box(2, s).ring  # two chips: one link both ways
    # A full wrapped axis is a ring by itself; a partial one is not.
    torus = make_slice([8], wraparound=True, link_bandwidth_bytes_per_s=1.0, hop_latency_s=0.0)
    assert best_box(8, torus).ring and best_box(8, torus).wraparound == (True,)
    assert not best_box(4, torus).ring
    with pytest.raises(CollectiveError, match="does not fit"):
        best_box(32, s)


def test_all_to_all_link_load_counts_routes() -> None:
    # A line of n: the middle link carries floor(n/2)*ceil(n/2) chunks one way.
    for n in (2, 3, 4, 7):
        assert all_to_all_link_load((n,), (False,))[0] == (n // 2) * ((n + 1) // 2)
    # A ring of 8 with shortest-way routing: 8 chunks on the busiest link.
    assert all_to_all_link_load((8,), (True,))[0] < all_to_all_link_load((8,), (False,))[0]


def _routed_pair_by_pair(shape: tuple[int, ...], wrap: tuple[bool, ...]) -> tuple[int, int]:
    """The busiest link and longest route of every pair routed by sim.routing.route."""
    box = make_slice(list(shape), wraparound=list(wrap), link_bandwidth_bytes_per_s=1.0,
                     hop_latency_s=0.0)  # fmt: skip
    load: dict[object, int] = {}
    longest = 0
    for a in box.coords:
        for b in box.coords:
            links = route(box, a, b)
            longest = max(longest, len(links))
            for link in links:
                load[link] = load.get(link, 0) + 1
    return max(load.values(), default=0), longest


@pytest.mark.parametrize(
    ("shape", "wrap"),
    [
        ((5,), (True,)),
        ((4, 4), (True, True)),
        ((2, 4), (False, True)),
        ((3, 4), (True, False)),
        ((2, 3, 4), (False, False, False)),
        ((4, 2, 3), (True, True, True)),
        ((4, 4, 4), (True, False, True)),
    ],
)
def test_all_to_all_link_load_is_every_pair_routed(
    shape: tuple[int, ...], wrap: tuple[bool, ...]
) -> None:
    """Counted per axis, the busiest link and the longest route are those of every pair
    routed hop by hop, on lines, rings and boxes with and without wrap-around."""
    assert all_to_all_link_load(shape, wrap) == _routed_pair_by_pair(shape, wrap)


def test_all_to_all_link_load_of_a_pod_is_instant() -> None:
    """A 1,024-chip line and an 8x8x16 torus: a million pairs and more, counted in well
    under a second (pair by pair they took minutes and tens of GB)."""
    start = time.perf_counter()
    assert all_to_all_link_load((1024,), (False,)) == (512 * 512, 1023)
    load, longest = all_to_all_link_load((8, 8, 16), (True, True, True))
    # a ring of 16 (ties the positive way): a link carries the pairs 1, 2, ... 8 hops
    # forward across it, 1 + 2 + ... + 8 of them; the 8 x 8 other coordinates each have one
    assert longest == 4 + 4 + 8 and load == sum(range(1, 9)) * 8 * 8
    assert time.perf_counter() - start < 1.0


def test_work_formulas() -> None:
    chip = load_chip("v5e")
    assert matmul_flops(8 * 4, 16) == 2 * 8 * 4 * 16
    assert conv_flops(batch=2, input_features=3, output_features=5, positions=(4, 6)) == (
        2 * 2 * 3 * 5 * 4 * 6
    )
    assert attention_flops(lead=2, q_length=4, kv_length=8, head_dim=16, value_dim=8) == (
        2 * (2 * 4 * 8 * 16) + 2 * (2 * 4 * 8 * 8)
    )
    # Compute-bound and memory-bound kernels.
    assert roofline_s(chip.bf16_flops_per_s, 0.0, chip=chip) == pytest.approx(1.0)
    assert roofline_s(0.0, chip.hbm_bandwidth_bytes_per_s, chip=chip) == pytest.approx(1.0)
    with pytest.raises(CollectiveError, match="unknown collective"):
        collective_time_s(
            "broadcast", group_size=2, bytes_per_device=1.0, ring=False,
            link_bandwidth_bytes_per_s=1.0, hop_latency_s=0.0,
        )  # fmt: skip


@given(
    st.lists(
        st.tuples(st.integers(1, 40), st.integers(1, 3), st.integers(0, 1)), min_size=1, max_size=3
    ),
    st.integers(1, 4),
    st.integers(1, 300),
    st.integers(1, 300),
)
def test_conv_matmul_keeps_the_flops_and_streams_sliding_positions(
    dims: list[tuple[int, int, int]], batch: int, cin: int, cout: int
) -> None:
    """A convolution on the MXU: the FLOPs of :func:`conv_flops`; the output positions of
    every sliding dimension, times the batch, are the matmul's rows; a window covering its
    whole input once joins the contraction."""
    conv = [ConvDim(n, n - k + 1 + 2 * p, k, padding_low=p) for n, k, p in dims if n >= k]
    assume(conv)
    mm = conv_matmul(batch=batch, input_features=cin, output_features=cout, dims=conv)
    positions = [window_positions(d.input_size, d.output_size, d.window_size,
                                  padding_low=d.padding_low) for d in conv]  # fmt: skip
    flops = conv_flops(batch=batch, input_features=cin, output_features=cout, positions=positions)
    assert mm.flops == pytest.approx(flops)
    rows = math.prod(d.output_size for d in conv if d.input_size > 1)
    covering = math.prod(d.input_size for d in conv if d.contracts)
    assert all(d.output_size == 1 and d.padding_low == 0 for d in conv if d.contracts)
    assert mm.m == batch * rows and (mm.k, mm.n) == (cin * covering, cout)


def test_a_window_over_the_whole_input_is_a_contraction() -> None:
    """``blhd,hde->ble`` compiled: a window over 16 heads of 64, one output. On a v5e chip
    it ran at 0.82 of the peak, which sixteen 64-deep taps (half of a 128-row MXU) cannot:
    one 1,024-deep contraction, the same FLOPs (validation/README.md, section 10)."""
    heads = (ConvDim(4, 4, 1), ConvDim(16, 1, 16))
    mm = conv_matmul(batch=2048, input_features=64, output_features=1024, dims=heads)
    assert (mm.m, mm.k, mm.n) == (8192, 1024, 1024)
    assert mm.flops == 2 * 4 * 2048 * 16 * 64 * 1024
    assert mm.padded_flops(128) == mm.flops  # a per-tap k of 64 would pad to twice this
    # a window that slides (two outputs) or meets padding stays taps
    assert not ConvDim(16, 2, 15).contracts and not ConvDim(16, 1, 17, padding_low=1).contracts


def test_a_dot_written_as_a_convolution_stays_a_batch_of_products() -> None:
    """XLA's dot-as-convolution forms (a size-1 input padded so each window meets it once,
    a dilated input) do not slide: one ``(batch x i) @ (i x o)`` per valid tap, as before."""
    padded = conv_matmul(batch=16, input_features=128, output_features=64,
                         dims=(ConvDim(1, 8, 8, padding_low=7),))  # fmt: skip
    dilated = conv_matmul(batch=16, input_features=128, output_features=64,
                          dims=(ConvDim(3, 17, 1, lhs_dilation=8),))  # fmt: skip
    assert (padded.batch, padded.m) == (8, 16) and (dilated.batch, dilated.m) == (3, 16)
    # A 3x3 'same' convolution over a 90 x 160 frame: 14,400 rows on the MXU, not 1.
    frame = (ConvDim(90, 90, 3, padding_low=1), ConvDim(160, 160, 3, padding_low=1))
    same = conv_matmul(batch=1, input_features=96, output_features=96, dims=frame)
    assert same.m == 14400 and same.batch == pytest.approx(268 * 478 / 14400)
