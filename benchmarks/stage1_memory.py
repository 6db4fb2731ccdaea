"""Stage 1's per-chip memory and XLA's buffer assignment against the compiled programs' own
memory analysis.

For each program (a Wan step or a VAE decode on a slice, its first legal sharding, or
every third one on a multi-chip slice) it prints Stage 1's ``memory_bytes_per_chip``, XLA's
buffer assignment read before code generation (:mod:`aoizora.buffer_assignment`, and the
seconds it took), the compiled program's ``memory_analysis()`` total (arguments + outputs +
temporaries + code - aliased; libtpu AOT, no TPU) and the ratios to it, then the largest
Stage 1 ratio:
``aoizora.stage1.memory.MEMORY_MARGIN`` must stay above it, or Stage 1 refuses programs
that fit, and ``MEMORY_UNDERESTIMATE`` below the smallest, or a VAE planned without a compile
may not fit (docs/stage1.md, "Memory per chip"); the exit code says whether both hold.

    python benchmarks/stage1_memory.py                       # the v5e:1x1 and wan-tiny set
    python benchmarks/stage1_memory.py --big                 # and Wan 2.1 14B 720p on 8x8
    python benchmarks/stage1_memory.py step:wan2.1-1.3b:832x480x21:v5e:1x1 ...

Compiles are cached (``--cache-dir``, default ``.cache/stage1_memory``): a VAE decode
takes 2-3 minutes on a 2-core machine the first time.
"""

from __future__ import annotations

import argparse
import sys
import time

from aoizora.buffer_assignment import assigned_memory
from aoizora.cache import plan_caches
from aoizora.candidates.space import Candidate, enumerate_candidates
from aoizora.compile import compile_candidate, lower_to_read
from aoizora.request.clip_plan import vae_for
from aoizora.stage1.memory import MEMORY_MARGIN, MEMORY_UNDERESTIMATE
from aoizora.stage1.sweep import score_candidates
from aoizora.workloads.base import Workload
from aoizora.workloads.clip import Clip
from aoizora.workloads.wan import wan_workload
from sim.topology import Slice, parse_slice_spec

DEFAULT = (
    "vae:wan2.1-1.3b:832x480x21:v5e:1x1",
    "step:wan2.1-1.3b:832x480x21:v5e:1x1",
    "step:wan2.2-ti2v-5b:1280x704x61:v5e:1x1",
    "vae:wan2.2-ti2v-5b:640x352x41:v5e:1x1",
    "vae:wan2.2-ti2v-5b:832x480x61:v5e:1x1",
    "step:wan-tiny:256x256x9:v5e:2x4",
)
BIG = ("step:wan2.1-14b:1280x720x81:v5e:8x8",)


def _programs(spec: str) -> list[tuple[Workload, Candidate, Slice]]:
    kind, model, clip_text, slice_text = spec.split(":", 3)
    if kind not in ("step", "vae"):
        raise SystemExit(f"{spec!r}: the kind must be step or vae, e.g. {DEFAULT[0]!r}")
    width, height, frames = (int(x) for x in clip_text.split("x"))
    slice_ = parse_slice_spec(slice_text)
    step = wan_workload(model, Clip(width, height, frames))
    workload = vae_for(step) if kind == "vae" else step
    legal = enumerate_candidates(workload, slice_.num_devices).legal
    picks = legal[:1] if slice_.num_devices == 1 else legal[:: max(1, len(legal) // 3)][:3]
    return [(workload, c, slice_) for c in picks]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("programs", nargs="*", help="kind:model:WxHxF:slice, e.g. " + DEFAULT[0])
    p.add_argument("--big", action="store_true", help="add Wan 2.1 14B 720p on v5e:8x8")
    p.add_argument("--cache-dir", default=".cache/stage1_memory")
    args = p.parse_args()
    specs = list(args.programs) or [*DEFAULT, *(BIG if args.big else ())]
    cache = plan_caches(args.cache_dir).compiled
    print(f"{'program':48s} {'candidate':52s} {'stage 1':>9s} {'assigned':>9s} {'took':>6s} "
          f"{'compiled':>9s} {'ratio':>6s} {'assigned':>8s}")  # fmt: skip
    worst, least = 0.0, float("inf")
    for spec in specs:
        for workload, cand, slice_ in _programs(spec):
            sweep = score_candidates(
                workload, [cand], slice_, lower=lower_to_read, skip_over_hbm=False
            )
            result = compile_candidate(workload, cand, slice_, cache=cache)
            if not sweep.estimates or result.memory is None:
                print(f"{spec:48s} {cand.id:52s} (no estimate or no analysis)")
                continue
            t0 = time.perf_counter()
            got = assigned_memory(workload, cand, slice_).total_bytes
            took = time.perf_counter() - t0
            s1 = sweep.estimates[0].memory_bytes_per_chip
            xla = result.memory.total_bytes
            worst, least = max(worst, s1 / xla), min(least, s1 / xla)
            name = f"{workload.name} ({slice_.name})"
            print(f"{name:48s} {cand.id:52s} {s1 / 1e9:8.3f}G {got / 1e9:8.4f}G {took:5.1f}s "
                  f"{xla / 1e9:8.4f}G {s1 / xla:6.3f} {got / xla:8.4f}")  # fmt: skip
            sys.stdout.flush()
    print(f"largest Stage 1 / compiled: {worst:.3f} (MEMORY_MARGIN {MEMORY_MARGIN})")
    print(f"smallest Stage 1 / compiled: {least:.3f} (MEMORY_UNDERESTIMATE {MEMORY_UNDERESTIMATE})")
    return 0 if least >= MEMORY_UNDERESTIMATE and worst <= MEMORY_MARGIN else 1


if __name__ == "__main__":
    raise SystemExit(main())
