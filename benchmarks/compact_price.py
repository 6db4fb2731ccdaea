"""Rings and all-to-alls as columns (``aoizora/rank/compact.py``) against their flows.

For each case: a region of collectives released together (as ``tests/aoizora/test_compact.py``
builds them), its flows and the elements the compact form keeps (columns), the engine's
makespan on the expanded flows (lumped's replay where it applies, as the search ran before)
and the compact answer, with both wall times and the ratio; for the shuffled cases (no
symmetry: the exact partition is every flow) the approximation's error at a few cell budgets.

    python benchmarks/compact_price.py            # 2D and 3D cases up to 128 devices, ~2 min
    python benchmarks/compact_price.py --pod      # plus the column count of 1,024-2,048 devices

Speeds depend on the machine's load: say it (``uptime``) when quoting them.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aoizora.rank import compact  # noqa: E402
from aoizora.rank.lumped import lumped_times  # noqa: E402
from sim.columns import collective_columns  # noqa: E402
from tests.aoizora.test_compact import _devices, _flows, _region  # noqa: E402


def _case(name: str, seed: int | None, specs: list[tuple[str, int, float]]) -> None:
    s, devs = _devices(name, seed)
    n = len(devs)
    items = _region(s, devs, [(k, n if g == 0 else n // g, b) for k, g, b in specs])
    nodes = _flows(items)
    columns = sum(it.num_columns for it in items if isinstance(it, compact.FlowColumns))
    t = time.perf_counter()
    _, finish = lumped_times(s, nodes)
    t_flows = time.perf_counter() - t
    t = time.perf_counter()
    try:
        _, got = compact.compact_times(s, items, min_reduction=1.0)
        how = "exact"
    except compact.CompactUnavailable:
        got, how = compact.approximate_times(s, items)[1], "approx"
    t_cols = time.perf_counter() - t
    err = (got[-1] - finish[-1]) / finish[-1]
    print(f"{name:12} {'ordered' if seed is None else f'seed {seed}':8} flows {len(nodes):>8,} "
          f"columns {columns:>6,}  flows {finish[-1] * 1e3:9.4f} ms in {t_flows:6.2f} s  "
          f"columns ({how}) {got[-1] * 1e3:9.4f} ms in {t_cols:6.2f} s  "
          f"speed x{t_flows / max(t_cols, 1e-9):6.1f}  rel {err:+.2e}", flush=True)  # fmt: skip
    if seed is not None:
        errs = []
        for cells in (1_000, 3_000, 10_000):
            _, approx = compact.approximate_times(s, items, max_cells=cells)
            errs.append(f"{cells:,} cells {(approx[-1] - finish[-1]) / finish[-1]:+.2%}")
        print(f"{'':21} approximation: " + ", ".join(errs), flush=True)


def _pod(name: str) -> None:
    s, devs = _devices(name, None)
    for kind in ("all-reduce", "all-to-all"):
        plan = collective_columns(kind, [devs], buffer_bytes=1e9, id_prefix="p", slice_=s)
        assert plan is not None
        c = plan.columns
        ratio = c.num_flows / c.num_columns
        print(f"{name:12} {kind:10} one group of {len(devs):,}: {c.num_flows:>12,} flows, "
              f"{c.num_columns:>10,} columns (x{ratio:,.0f} fewer)")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pod", action="store_true", help="also count the columns of pod slices")
    args = ap.parse_args()
    mixed = [("all-reduce", 0, 8e7), ("all-to-all", 4, 3e7), ("all-gather", 2, 2e7),
             ("reduce-scatter", 4, 2e7)]  # fmt: skip
    rings = [("all-reduce", 0, 8e6 * (k + 1)) for k in range(4)]
    for name in ("v5e:4x4", "tpu7x:2x2x4", "v5p:4x4x4", "tpu7x:4x4x4"):
        _case(name, None, rings)
    for name in ("tpu7x:2x2x4", "v5p:4x4x4"):
        for seed in (0, 1, 2):
            _case(name, seed, mixed)
    if args.pod:
        for name in ("tpu7x:8x8x8", "tpu7x:8x8x16"):
            _pod(name)


if __name__ == "__main__":
    main()
