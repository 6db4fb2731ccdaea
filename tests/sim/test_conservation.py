"""Invariants that a broken engine or a broken collective cannot satisfy.

- **Bytes are conserved, by integration.** From the rate log alone (every
  allocation in force and when it started), each flow's integral of rate over
  time equals its size, and each link's sum of those integrals over the flows
  crossing it (oracle routing) equals the bytes the result reports for it.
  A wrong rate, a finish at the wrong time or a lost update breaks this.
- **Every collective delivers each chunk to each destination exactly once**:
  the bytes of chunk ``c`` that reach member ``m`` add up to the shard size,
  a flow only sends what its sender already holds (causality through
  ``after``), and a reduce-scatter's partial sums count every contributor
  exactly once.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.collectives import ALGORITHMS, KINDS, CollectivePlan, collective_flows
from sim.engine import Compute, Flow, simulate
from sim.records import SimResult
from sim.topology import Slice, make_slice
from tests.sim.oracle import oracle_capacity, oracle_path
from tests.sim.test_incremental import random_dags

BW = 1e9


def integrated_bytes(result: SimResult) -> dict[str, float]:
    """Per flow id: the integral of its logged rate over time."""
    moved: dict[str, float] = defaultdict(float)
    log = result.rate_log
    for snap, nxt in zip(log, log[1:], strict=False):
        for flow_id, rate in snap.rates:
            moved[flow_id] += rate * (nxt.time_s - snap.time_s)
    assert not log or log[-1].rates == ()  # after the last change nothing drains
    return moved


@settings(max_examples=80, deadline=None)
@given(random_dags())
def test_rate_log_integrates_to_every_flows_bytes(case: tuple[Slice, list[Flow | Compute]]) -> None:
    s, nodes = case
    result = simulate(s, nodes, record_rates=True, core="compiled")
    moved = integrated_bytes(result)
    flows = [n for n in nodes if isinstance(n, Flow)]
    for f in flows:
        rec = result.flow(f.id)
        drains = rec.hops > 0 and f.size_bytes > 0
        assert moved.get(f.id, 0.0) == pytest.approx(f.size_bytes if drains else 0.0, rel=1e-9)
    # Per link: the integrals of the flows the oracle routes over it.
    per_pair: dict[tuple[tuple[int, ...], tuple[int, ...]], float] = defaultdict(float)
    for f in flows:
        for pair in oracle_path(s.shape, s.wraparound, f.src, f.dst):
            per_pair[pair] += moved.get(f.id, 0.0)
    reported: dict[tuple[tuple[int, ...], tuple[int, ...]], float] = defaultdict(float)
    for lk in result.links:
        reported[(lk.src, lk.dst)] += lk.bytes_carried
    assert set(reported) == set(oracle_capacity(s))
    for pair, carried in reported.items():
        assert carried == pytest.approx(per_pair.get(pair, 0.0), rel=1e-9, abs=1e-6), pair


def _ancestors(plan: CollectivePlan) -> dict[str, set[str]]:
    by_id = {n.id: n for n in plan.nodes}
    seen: dict[str, set[str]] = {}
    for node in plan.nodes:  # plans list every node after the nodes it waits for
        got: set[str] = set()
        for dep in node.after:
            if dep in by_id:
                got |= {dep} | seen[dep]
        seen[node.id] = got
    return seen


def _region(algorithm: str, part: int) -> int:
    # The halves of a bidirectional ring are different halves of a chunk; the
    # two directions of a line carry the same chunk to different members.
    return part if algorithm == "bidir_ring" else 0


def check_exactly_once(plan: CollectivePlan, buffer_bytes: float) -> None:
    """The delivery semantics of ``plan`` (see the module doc)."""
    assert plan.roles is not None
    ancestors = _ancestors(plan)
    flows = {f.id: f for f in plan.flows}
    got: dict[tuple[int, int, tuple[int, ...]], float] = defaultdict(float)  # (group, chunk, m)
    partial: dict[str, frozenset[tuple[int, ...]]] = {}  # RS flow -> contributors it carries
    reduced: dict[tuple[int, int, int], list[frozenset[tuple[int, ...]]]] = defaultdict(list)
    for fid, f in flows.items():
        role = plan.roles[fid]
        if role.phase in ("all-to-all", "collective-permute"):
            got[(role.group, role.chunk, f.dst)] += f.size_bytes
            continue
        group = plan.groups[role.group]
        n, owner = len(group.members), group.members[role.chunk]
        region = _region(group.algorithm, role.part)
        earlier = [
            flows[a]
            for a in ancestors[fid]
            if a in flows
            and flows[a].dst == f.src
            and plan.roles[a].chunk == role.chunk
            and plan.roles[a].phase == role.phase
            and _region(group.algorithm, plan.roles[a].part) == region
        ]
        if role.phase == "reduce-scatter":
            mine = {f.src}
            for a in earlier:
                assert not (mine & partial[a.id]), "a contribution counted twice"
                mine |= partial[a.id]
            partial[fid] = frozenset(mine)
            if f.dst == owner:
                reduced[(role.group, role.chunk, region)].append(partial[fid])
        else:
            # A copy can only be forwarded once it arrived (or by its owner);
            # in an all-reduce the owner's copy is the fully reduced chunk.
            assert f.src == owner or earlier, f"{fid} sends chunk {role.chunk} it does not hold"
            got[(role.group, role.chunk, f.dst)] += f.size_bytes
            assert f.dst != owner
        del n
    if plan.kind in ("reduce-scatter", "all-reduce"):
        for g, group in enumerate(plan.groups):
            if len(group.members) < 2:
                continue
            regions = (0, 1) if group.algorithm == "bidir_ring" else (0,)
            for c, owner in enumerate(group.members):
                for region in regions:
                    sets = reduced[(g, c, region)]
                    union = frozenset().union(*sets)
                    assert sum(len(x) for x in sets) == len(union), "overlapping partial sums"
                    assert union | {owner} == set(group.members) and owner not in union
    if plan.kind in ("all-gather", "all-reduce"):
        for g, group in enumerate(plan.groups):
            n = len(group.members)
            for c in range(n):
                for m in group.members:
                    want = 0.0 if m == group.members[c] or n < 2 else buffer_bytes / n
                    assert got[(g, c, m)] == pytest.approx(want, rel=1e-12), (g, c, m)
    if plan.kind == "all-to-all":
        for g, group in enumerate(plan.groups):
            n = len(group.members)
            for i, src in enumerate(group.members):
                for j, dst in enumerate(group.members):
                    if i != j:
                        flow = flows[f"c/g{g}/{i}->{j}"]
                        assert (flow.src, flow.dst) == (src, dst)
                        assert got[(g, j, dst)] == pytest.approx((n - 1) * buffer_bytes / n)


@st.composite
def collective_cases(draw: st.DrawFn) -> tuple[Slice, str, str, list[list[tuple[int, ...]]]]:
    dims = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=dims, max_size=dims)))
    wrap = draw(st.lists(st.booleans(), min_size=dims, max_size=dims))
    s = make_slice(shape, wraparound=wrap, link_bandwidth_bytes_per_s=BW, hop_latency_s=1e-6)
    kind = draw(st.sampled_from([k for k in KINDS if k != "collective-permute"]))
    algorithm = draw(st.sampled_from(ALGORITHMS[kind]))
    chips = draw(st.permutations(s.coords))
    used = chips[: draw(st.integers(1, len(chips)))]
    groups: list[list[tuple[int, ...]]] = []
    while used:
        k = draw(st.integers(1, len(used)))
        groups.append(list(used[:k]))
        used = used[k:]
    return s, kind, algorithm, groups


@settings(max_examples=150, deadline=None)
@given(collective_cases(), st.sampled_from([1e3, 6e6, 7.0]))
def test_every_collective_delivers_each_chunk_exactly_once(
    case: tuple[Slice, str, str, list[list[tuple[int, ...]]]], buffer_bytes: float
) -> None:
    s, kind, algorithm, groups = case
    plan = collective_flows(
        kind, groups, buffer_bytes=buffer_bytes, algorithm=algorithm, id_prefix="c", slice_=s
    )
    for group, walked in zip(groups, plan.groups, strict=True):
        assert sorted(walked.members) == sorted(group)  # same members, maybe re-ordered
    check_exactly_once(plan, buffer_bytes)
    result = simulate(s, plan.nodes)
    assert result.finish_s(plan.done_id) == result.makespan_s
