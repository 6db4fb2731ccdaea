"""The batched permute bound equals the one-placement bound it vectorises."""

from __future__ import annotations

import random

import numpy as np
import pytest

from aoizora.errors import PlacementError
from aoizora.hlo.nodes import Collective
from aoizora.rank.bound import LinkCapacities, collective_lower_bound
from aoizora.rank.permutes import permute_lower_bounds
from sim.topology import load_slice, make_slice, parse_slice_spec


def _permute(pairs: list[tuple[int, int]], size_bytes: int) -> Collective:
    return Collective(
        id=0, kind="collective-permute", name="cp", computation="main", line=1, region=0,
        channel_id=1, group_form="pairs", groups=(), pairs=tuple(pairs),
        operand_bytes=size_bytes, result_bytes=size_bytes, is_async=True, via="",
        count=1, depends_on=(),
    )  # fmt: skip


@pytest.mark.parametrize(
    "spec", ["v5e:4x4", "v5e:2x4+wrap", "v6e:8x8+wrap", "v5p:2x2x4", "v4:4x4x4+wrap", "v6e:1x4"]
)
def test_equals_the_flow_bound_under_random_placements(spec: str) -> None:
    """Random pairs (self-pairs, long ones, shared links) under random placements: the
    batch equals :func:`collective_lower_bound` per placement, for 1 and 3 copies."""
    s = parse_slice_spec(spec)
    net = LinkCapacities(s)
    rng = random.Random(spec)
    n = s.num_chips
    chips = [c for c in np.ndindex(*s.shape)]
    pairs = [(rng.randrange(n), rng.randrange(n)) for _ in range(3 * n)]
    pairs += [(i, (i + n // 2) % n) for i in range(n)]  # half-way round: the tie rule
    size = 3_000_000
    c = _permute(pairs, size)
    placements = [rng.sample(chips, n) for _ in range(9)]
    src = np.array([[p[a] for a, _ in pairs] for p in placements])
    dst = np.array([[p[b] for _, b in pairs] for p in placements])
    got = permute_lower_bounds(src, dst, size_bytes=size, net=net, copies=(1, 3))
    for k, placement in enumerate(placements):
        coords = [tuple(int(x) for x in xy) for xy in placement]
        for j, copies in enumerate((1, 3)):
            want = collective_lower_bound(c, coords, net, copies=copies)
            assert got[k, j] == pytest.approx(want, rel=1e-12, abs=0.0)


def test_parallel_links_and_an_empty_route() -> None:
    """A wrapped dimension of length 2 has two cables a way (twice the capacity) and a
    pair on one chip crosses none: still the flow bound."""
    s = make_slice([2, 3], wraparound=[True, False], link_bandwidth_bytes_per_s=1e9,
                   hop_latency_s=1e-6)  # fmt: skip
    net = LinkCapacities(s)
    pairs = [(0, 1), (1, 0), (2, 2), (0, 3), (0, 5), (4, 1)]
    placement = [tuple(int(x) for x in c) for c in np.ndindex(2, 3)]
    src = np.array([[placement[a] for a, _ in pairs]])
    dst = np.array([[placement[b] for _, b in pairs]])
    got = permute_lower_bounds(src, dst, size_bytes=2e6, net=net, copies=(1, 2))
    for j, copies in enumerate((1, 2)):
        want = collective_lower_bound(_permute(pairs, 2_000_000), placement, net, copies=copies)
        assert got[0, j] == pytest.approx(want, rel=1e-12)
    # One pair of 2 MB on the doubled x link: 1 hop + 2e6 / 2e9.
    alone = permute_lower_bounds(src[:, 3:4], dst[:, 3:4], size_bytes=2e6, net=net)
    assert alone[0, 0] == pytest.approx(1e-6 + 1e-3 + s.chip.collective_overhead_s)


def test_rejects_mismatched_shapes() -> None:
    net = LinkCapacities(load_slice("v5e:2x2"))
    with pytest.raises(PlacementError, match="placements, pairs, dims"):
        permute_lower_bounds(np.zeros((1, 2, 2)), np.zeros((1, 3, 2)), size_bytes=1, net=net)
