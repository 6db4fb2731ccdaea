"""The compact form of a collective (columns x steps) is the same traffic as its flows."""

from __future__ import annotations

import random

import pytest

from sim.collectives import collective_flows
from sim.columns import check_against_flows, collective_columns
from sim.topology import load_slice


def _devices(name: str, seed: int) -> tuple[object, list[tuple[int, ...]]]:
    s = load_slice(name)
    devs = [c for c in s.coords for _ in range(s.chip.devices_per_chip)]
    random.Random(seed).shuffle(devs)
    return s, devs


@pytest.mark.parametrize("name", ["v5e:2x4", "v5e:4x4", "tpu7x:2x2x2", "v5p:2x2x4"])
@pytest.mark.parametrize("kind", ["all-gather", "reduce-scatter", "all-reduce", "all-to-all"])
def test_columns_expand_to_the_flows_node_for_node(name: str, kind: str) -> None:
    s, devs = _devices(name, seed=len(name) + len(kind))
    for size in (2, 4, len(devs)):
        groups = [devs[i : i + size] for i in range(0, len(devs), size)]
        assert check_against_flows(kind, groups, buffer_bytes=3e6, slice_=s)  # type: ignore[arg-type]


def test_a_pod_scale_ring_keeps_its_columns_not_its_flows() -> None:
    # 1,024 devices of tpu7x:8x8x8, one group: 4.19 million flows, 2,048 columns.
    s = load_slice("tpu7x:8x8x8")
    devs = [c for c in s.coords for _ in range(2)]
    plan = collective_columns("all-reduce", [devs], buffer_bytes=1e9, id_prefix="ar", slice_=s)
    assert plan is not None
    assert plan.columns.num_columns == 2 * len(devs)
    assert plan.columns.num_flows == 2 * (len(devs) - 1) * 2 * len(devs)
    # The columns do not grow with the steps: an all-gather of the same group has as many.
    ag = collective_columns("all-gather", [devs], buffer_bytes=1e9, id_prefix="ag", slice_=s)
    assert ag is not None and ag.columns.num_columns == plan.columns.num_columns
    assert ag.columns.steps * 2 == plan.columns.steps


def test_lines_permutes_and_mixed_groups_have_no_compact_form() -> None:
    s = load_slice("v5e:2x4")
    row = [(0, i) for i in range(4)]
    assert collective_columns("all-gather", [row], buffer_bytes=1.0, id_prefix="x", slice_=s,
                              algorithm="bidir_line") is None  # fmt: skip
    assert collective_columns("collective-permute", [row], buffer_bytes=1.0, id_prefix="x",
                              slice_=s) is None  # fmt: skip
    uneven = [[(0, 0), (0, 1)], [(1, 0), (1, 1), (1, 2)]]
    assert collective_columns("all-gather", uneven, buffer_bytes=1.0, id_prefix="x",
                              slice_=s) is None  # fmt: skip
    # ... and the flows are still there for them.
    assert collective_flows("all-gather", uneven, buffer_bytes=1.0, id_prefix="x", slice_=s).flows
