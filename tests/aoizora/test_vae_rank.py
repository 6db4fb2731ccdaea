"""The VAE decoder of a clip is ranked by Stage 1: no compile unless asked, then one.

Every XLA compile in this process goes through ``jax.stages.Lowered.compile`` and every
candidate reaches the planner's compile step, cached or not; the tests count both, so
"nothing compiled" is observed, not inferred from the plan's own report. Each test's
cache starts with the suite's compile seed (``compile_seed.py``: libtpu's results for
these tiny decoders; ``fresh_plan_cache`` in conftest.py), so a compile the planner is
handed is read, not redone.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import pytest

import aoizora.planner
from aoizora.candidates.space import Candidate
from aoizora.compile import CompileResult
from aoizora.errors import DoesNotFit
from aoizora.request.clip_plan import vae_for
from aoizora.request.vae_rank import rank_vae
from aoizora.workloads.base import Workload
from aoizora.workloads.wan import parse_resolution, wan_workload
from sim.topology import Slice, load_slice

SLICE = "v5e:2x2"


def _compiled_files(folder: Path) -> set[Path]:
    return set((folder / "compiled").rglob("*.json.gz"))


def _session_modules(folder: Path, plan_cache_dir: Path, *, buffers: bool = False) -> str:
    """``folder`` as a plan cache whose Stage-1 modules (``shardy/``, what Stage 1 reads
    after lowering) are the session's: Stage 1 still scores every candidate here, from
    the stored program where another run lowered it. What a fresh lowering compiles is
    observed by the first test, whose caches are all its own. ``buffers`` shares XLA's
    buffer assignments too, for a test that asserts nothing of how they are read."""
    folder.mkdir(parents=True, exist_ok=True)
    for kind in ("shardy", "buffers") if buffers else ("shardy",):
        (plan_cache_dir / kind).mkdir(parents=True, exist_ok=True)
        (folder / kind).symlink_to(plan_cache_dir / kind, target_is_directory=True)
    return str(folder)


def _tiny_vae() -> Workload:
    return vae_for(wan_workload("wan-tiny", parse_resolution("64x64", frames=9)))


class _Counted:
    """Every XLA compile in this process, and every candidate handed to the planner's
    compile step (cached or not)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.xla = 0
        self.handed: list[str] = []
        real_compile = jax.stages.Lowered.compile
        real_candidate = aoizora.planner.compile_candidate
        real_cached = aoizora.planner.cached_compile

        def xla(lowered: Any, *args: Any, **kwargs: Any) -> Any:
            self.xla += 1
            return real_compile(lowered, *args, **kwargs)

        def candidate(wl: Workload, cand: Candidate, s: Slice, **kw: Any) -> CompileResult:
            self.handed.append(cand.id)
            return real_candidate(wl, cand, s, **kw)

        def cached(wl: Workload, cand: Candidate, s: Slice, **kw: Any) -> CompileResult | None:
            self.handed.append(cand.id)
            return real_cached(wl, cand, s, **kw)

        monkeypatch.setattr(jax.stages.Lowered, "compile", xla)
        monkeypatch.setattr(aoizora.planner, "compile_candidate", candidate)
        monkeypatch.setattr(aoizora.planner, "cached_compile", cached)


@pytest.mark.slow
def test_no_vae_candidate_is_compiled_unless_asked_and_then_only_the_choice(
    fresh_plan_cache: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    vae, s = _tiny_vae(), load_slice(SLICE)
    counted = _Counted(monkeypatch)
    folder = fresh_plan_cache("cache")
    cache_dir, seeded = str(folder), _compiled_files(folder)
    ranked = rank_vae(vae, s, cache_dir=cache_dir)
    assert counted.xla == 0 and counted.handed == [] and ranked.compiled_ids == ()
    assert _compiled_files(folder) == seeded
    # The choice is Stage 1's best memory-feasible legal sharding, its figure Q1 and the
    # host's launch of the call (v5e: measured), as every figure of the plan.
    launch = s.chip.compute.program_launch_s
    assert launch > 0
    q1 = {e.candidate_id: e.q1_s for e in ranked.ranking.estimates}
    assert ranked.source == "stage1" and ranked.decode_s == ranked.winner.q1_s + launch
    assert ranked.winner.candidate.id == min(q1, key=lambda c: (q1[c], c))
    assert ranked.placement_id == "default order"
    # maxdiffusion's two deployments are scored by the same Stage 1, and reported.
    assert [b.name for b in ranked.baselines] == ["maxdiffusion spatial", "replicated"]
    assert all(b.q1_s is not None and b.q1_s > 0 for b in ranked.baselines)
    plan = ranked.plan()
    assert plan.predicted.source == "stage1" and plan.candidate_id == ranked.winner.candidate.id
    assert dict(plan.predicted.baselines_s) == {
        b.name: b.q1_s + launch for b in ranked.baselines if b.q1_s is not None
    }
    # Asked to compile: one XLA compile, of the chosen sharding alone; its figure is
    # the simulated decode at its best placement.
    again = rank_vae(vae, s, cache_dir=cache_dir, compile=True, workers=1)
    assert again.winner.candidate.id == ranked.winner.candidate.id
    assert counted.xla <= 1 and set(counted.handed) == {ranked.winner.candidate.id}
    assert again.compiled_ids == (ranked.winner.candidate.id,) and again.warnings == ()
    assert again.source == "simulated" and again.decode_s != again.winner.q1_s
    simulated = again.plan()
    assert simulated.predicted.source == "simulated" and simulated.predicted.baselines_s == ()


@pytest.mark.slow
def test_a_vae_is_held_to_xlas_buffer_assignment_without_a_compile(
    tmp_path: Path,
    fresh_plan_cache: Callable[[str], Path],
    plan_cache_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Stage 1 has put a VAE's memory as low as 0.589 of the compiled figure: the plan's
    memory is XLA's buffer assignment of the choice (read before code generation, no
    compile in this process), a choice over the budget by it gives way to Stage 1's next
    best that fits, and when none of them fits the clip planner is told what does."""
    import dataclasses

    import aoizora.request.vae_rank as vae_rank
    from aoizora.buffer_assignment import cached_assigned_memory
    from aoizora.cache import plan_caches

    vae, s = _tiny_vae(), load_slice(SLICE)
    counted = _Counted(monkeypatch)
    said: list[str] = []
    own = _session_modules(tmp_path / "cache", plan_cache_dir)  # buffers/: computed here
    ranked = rank_vae(vae, s, cache_dir=own, progress=said.append)
    assert ranked.memory is not None and ranked.memory.source == "buffer_assignment"
    assert counted.xla == 0 and ranked.compiled_ids == ()
    first = [ranked.ranking.estimates[i].candidate_id for i in range(3)]
    cache = plan_caches(own).buffers
    need = {
        c: cached_assigned_memory(vae, _by_id(vae, s, c), s, cache=cache).total_bytes for c in first
    }
    assert ranked.memory.hbm_bytes_per_chip == need[first[0]]
    assert ranked.winner.candidate.id == first[0]
    # A budget under the best's assignment and over another's: that other is the choice.
    over, fits = first[0], min(first[1:], key=lambda c: (need[c], first.index(c)))
    if need[fits] < need[over]:
        budget = (need[fits] + need[over]) / 2
        chip = dataclasses.replace(s.chip, hbm_bytes=budget, usable_hbm_bytes=budget)
        moved = rank_vae(vae, s.with_chip(chip), cache_dir=own)
        assert moved.winner.candidate.id != over and moved.memory is not None
        assert moved.memory.hbm_bytes_per_chip <= budget and moved.compiled_ids == ()
    # Under every one: does not fit, by the assignment, with a bigger slice named.
    budget = min(need.values()) - 1
    chip = dataclasses.replace(s.chip, hbm_bytes=budget, usable_hbm_bytes=budget)
    with pytest.raises(DoesNotFit, match=r"by XLA's buffer assignment") as raised:
        rank_vae(vae, s.with_chip(chip), cache_dir=own)
    assert raised.value.fits.startswith("it fits on v5e:") and counted.xla == 0
    # Where the assignment cannot be read, Stage 1's figure stands and a choice near the
    # budget by it is compiled to decide (one compile, the choice's).
    from aoizora.errors import CompileError
    from aoizora.stage1.memory import MEMORY_UNDERESTIMATE

    def unread(*_: object, **__: object) -> None:
        raise CompileError("no assignment here")

    monkeypatch.setattr(vae_rank, "cached_assigned_memory", unread)
    s1 = _session_modules(fresh_plan_cache("s1"), plan_cache_dir)
    stage1 = rank_vae(vae, s, cache_dir=s1)
    assert stage1.memory is not None and stage1.memory.source == "stage1"
    est = stage1.memory.hbm_bytes_per_chip
    budget = est / ((MEMORY_UNDERESTIMATE + 1) / 2)  # Stage 1: 85 % of it
    chip = dataclasses.replace(s.chip, hbm_bytes=budget, usable_hbm_bytes=budget)
    # vae-tiny's generated code alone is ~20 MB, more than this budget: the compiler's
    # verdict stands over Stage 1's
    with pytest.raises(DoesNotFit, match=r"does not fit on v5e:2x2: .*"):
        rank_vae(vae, s.with_chip(chip), cache_dir=s1, workers=1)
    assert counted.xla <= 1 and len(set(counted.handed)) == 1


def _by_id(vae: Workload, s: Slice, cid: str) -> Candidate:
    from aoizora.candidates.space import enumerate_candidates

    return enumerate_candidates(vae, s.num_devices).by_id(cid)


@pytest.mark.slow
def test_a_vae_at_another_chunk_is_compiled_for_its_figure(
    fresh_plan_cache: Callable[[str], Path], plan_cache_dir: Path
) -> None:
    """Stage 1's decode was measured true at chunk 1 (five decodes within 4 %) and 19.5 %
    under the chip at chunk 2 (validation/README.md, section 8): a plan at another chunk
    compiles its choice (one compile) and gives the simulated decode, and says why."""
    said: list[str] = []
    vae = vae_for(wan_workload("wan-tiny", parse_resolution("64x64", frames=9)), chunk=2)
    cache_dir = _session_modules(fresh_plan_cache("cache"), plan_cache_dir, buffers=True)
    ranked = rank_vae(vae, load_slice(SLICE), cache_dir=cache_dir, progress=said.append)
    assert ranked.source == "simulated" and ranked.compiled_ids == (ranked.winner.candidate.id,)
    assert any("vae_decode_chunk 2" in line and "compiling" in line for line in said), said
    one = rank_vae(_tiny_vae(), load_slice(SLICE), cache_dir=cache_dir)
    assert one.source == "stage1" and one.compiled_ids == ()  # chunk 1: Stage 1's figure


@pytest.mark.parametrize(
    ("pod", "sub"), [("v5p:4x4x8", "v5p:4x4x4"), ("tpu7x:4x4x4", "tpu7x:2x4x4")]
)
def test_a_vae_with_no_legal_sharding_on_a_3d_pod_says_why_and_which_sub_slice(
    pod: str, sub: str
) -> None:
    """vae-tiny@64x64x9's latent is 8x8: 128 devices (tpu7x: 2 a chip) split it no way.
    The error is the reason, never Stage 1's empty list of failures, and names the
    biggest sub-slice of the pod whose devices the decoder does split."""
    from aoizora.candidates.space import enumerate_candidates
    from aoizora.request.vae_rank import decode_sub_slice

    vae, s = _tiny_vae(), load_slice(pod)
    assert s.num_devices == 128 and not enumerate_candidates(vae, s.num_devices).legal
    with pytest.raises(DoesNotFit) as got:
        rank_vae(vae, s)
    message = str(got.value)
    assert "()" not in message and "\n" not in message
    assert f"no legal sharding over the 128 devices of {pod}" in message
    assert "is not divisible by its sharding degree" in message  # a real reason, by example
    assert got.value.fits == decode_sub_slice(vae, s) and f"such as {sub} (64 devices)" in (
        got.value.fits
    )
    # what it names plans: the sub-slice's devices have a legal sharding, the pod's half not
    assert enumerate_candidates(vae, load_slice(sub).num_devices).legal
    assert not enumerate_candidates(vae, 2 * load_slice(sub).num_devices).legal
