"""Splash attention as the workloads run it, against jax's own splash code.

* the closed-form mask info equals what jax's ``process_mask`` computes;
* kernels built from it lower to the program jax's ``make_splash_mha`` gives,
  byte for byte;
* kernels without bodies lower to that same program but for the kernels'
  attributes, and their calls keep jax's kernel names, operands and results.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask_info as mi

from aoizora.candidates.space import Candidate, enumerate_candidates
from aoizora.compile import lower, lower_to_read
from aoizora.workloads import splash
from aoizora.workloads.base import Workload
from aoizora.workloads.opaque import trace_without_kernel_bodies
from aoizora.workloads.splash import _downcast, _kernels_on_host, full_mask_info
from aoizora.workloads.wan import parse_resolution, wan_workload
from sim.topology import load_slice

# (q length, kv length, q block, kv block): one block, int8 and int16 data_next
# (more than 127 kv blocks), unequal blocks, a single kv block.
SHAPES = [(128, 128, 128, 128), (1024, 1536, 512, 512), (512, 128 * 130, 256, 128),
          (384, 640, 384, 128), (2048, 512, 512, 512)]  # fmt: skip


@pytest.mark.parametrize(("q_length", "kv_length", "bq", "bkv"), SHAPES)
@pytest.mark.parametrize("heads", [1, 5])
def test_full_mask_info_is_what_jax_computes(
    q_length: int, kv_length: int, bq: int, bkv: int, heads: int
) -> None:
    mask = sm.MultiHeadMask(tuple(sm.FullMask((q_length, kv_length)) for _ in range(heads)))
    want, mask_function = mi.process_mask(
        mask, (bq, bkv), downcast_smem_data=True, head_shards=1, q_seq_shards=1
    )
    got = full_mask_info(q_length, kv_length, bq, bkv)
    assert mask_function is None
    for field in mi.MaskInfo._fields:
        a, b = getattr(got, field), getattr(want, field)
        if b is None or isinstance(b, bool):
            assert a is b or a == b, field
        else:
            assert a.dtype == b.dtype and a.shape == b.shape, field
            assert np.array_equal(a, b), field


@pytest.mark.parametrize("top", [0, 2, 127, 128, 32767, 32768, 2**31 - 1])
def test_downcast_picks_jax_own_type(top: int) -> None:
    array = np.array([[0, top]], dtype=np.int32)
    want = mi._downcast_to_small_type(array)
    got = _downcast(array)
    assert got.dtype == want.dtype and np.array_equal(got, want)


@pytest.fixture(scope="module")
def wan_tiny() -> Workload:
    return wan_workload("wan-tiny", parse_resolution("256x256", frames=5))


def _each_kind(wl: Workload, devices: int) -> list[Candidate]:
    """The first candidate of every attention kind on ``devices`` devices."""
    legal = list(enumerate_candidates(wl, devices).legal)
    firsts = {c.attention: c for c in reversed(legal)}
    assert {"gather_kv", "ring", "ulysses"} <= set(firsts)
    assert any(k.startswith("usp") for k in firsts)
    return [c for c in legal if firsts[c.attention] is c]


def _jax_own_kernel(
    heads: int, sq: int, skv: int, bq: int, bkv: int, bkvc: int, *, with_lse: bool
) -> object:
    """A new kernel from jax's own ``make_splash_mha`` each call (no cache of ours)."""
    mask = sm.MultiHeadMask(tuple(sm.FullMask((sq, skv)) for _ in range(heads)))
    sizes = sk.BlockSizes(block_q=bq, block_kv=bkv, block_kv_compute=bkvc)
    return sk.make_splash_mha(
        mask, head_shards=1, q_seq_shards=1, block_sizes=sizes, save_residuals=with_lse
    )


def test_kept_kernels_lower_like_jax_own_kernel(
    wan_tiny: Workload, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ring attention calls two kernels of one shape in a trace: jax makes one
    # constant of their mask info, and so must the kernels kept per shape.
    wl, sl = wan_tiny, load_slice("v5e:2x2")
    cands = _each_kind(wl, sl.num_devices)
    before = _kernels_on_host.cache_info()
    kept = [lower(wl, c, sl).as_text() for c in cands]
    kept += [lower(wl, c, sl).as_text() for c in cands]  # served by the cache
    assert _kernels_on_host.cache_info().hits > before.hits
    monkeypatch.setattr(splash, "_kernel", _jax_own_kernel)
    assert [lower(wl, c, sl).as_text() for c in cands] * 2 == kept


# A Pallas kernel's call: its operands, its attribute dictionary, its type.
_CALL = re.compile(r"(stablehlo\.custom_call @tpu_custom_call\([^)]*\)) (\{[^\n]*?\}) (: \([^\n]*)")


def _calls(text: str) -> list[tuple[str, str]]:
    """Each kernel call's kernel name and type, in program order."""
    out = []
    for m in _CALL.finditer(text):
        name = re.search(r'kernel_name = "([^"]+)"', m.group(2))
        assert name is not None, m.group(2)[:200]
        out.append((name.group(1), m.group(3)))
    return out


@pytest.mark.parametrize("spec", ["v5e:2x2", "tpu7x:2x2x1"])
def test_kernels_without_bodies_lower_to_the_same_program_but_their_attributes(
    wan_tiny: Workload, spec: str
) -> None:
    wl, sl = wan_tiny, load_slice(spec)
    for cand in _each_kind(wl, sl.num_devices):
        real = lower(wl, cand, sl).as_text()
        read = lower_to_read(wl, cand, sl).as_text()
        assert _calls(read) == _calls(real) and _calls(real), cand.id
        assert "backend_config" in real and "backend_config" not in read, cand.id
        assert len(read) < len(real)
        # Everything else, byte for byte: constants, arguments, shardings, ops.
        assert _CALL.sub(r"\1 \3", read) == _CALL.sub(r"\1 \3", real), cand.id


def test_a_kernel_free_program_checks_its_arguments_and_keeps_nested_calls() -> None:
    def f(x: jax.Array) -> jax.Array:
        return jax.jit(lambda y: jnp.cos(y) + 1)(x) * 2

    spec = jax.ShapeDtypeStruct((3,), jnp.float32)
    program = trace_without_kernel_bodies(f, spec)
    x = jnp.arange(3, dtype=jnp.float32)
    assert np.allclose(np.asarray(program(x)), np.asarray(f(x)))
    # Nothing to replace: the same program as jax traces (the jit stays a call).
    assert str(program.program) == str(jax.make_jaxpr(f)(spec))
    with pytest.raises(TypeError, match="differ from the traced ones"):
        program(x, x)
