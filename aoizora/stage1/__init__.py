"""Stage 1: pre-compilation pruning of logical shardings.

From a ``jax.stages.Lowered`` (no XLA compile): Shardy propagation, a prediction
DAG with explicit and implicit communication, per-axis bytes, FLOPs, a memory
estimate, the placement-oblivious bound Q1, and the top-K by Q1. See
``docs/stage1.md``.
"""

from __future__ import annotations

from aoizora.stage1.dag import build_dag
from aoizora.stage1.prediction import Node, PredictionDag
from aoizora.stage1.q1 import (
    ChipLike,
    Stage1Estimate,
    Stage1Ranking,
    axis_phases,
    collective_time_s,
    estimate,
    estimate_module,
    rank_stage1,
)
from aoizora.stage1.reshard import reshard_collectives
from aoizora.stage1.shardy import ShardyModule, Stage1Error, read_lowered

__all__ = [
    "ChipLike",
    "Node",
    "PredictionDag",
    "ShardyModule",
    "Stage1Error",
    "Stage1Estimate",
    "Stage1Ranking",
    "axis_phases",
    "build_dag",
    "collective_time_s",
    "estimate",
    "estimate_module",
    "rank_stage1",
    "read_lowered",
    "reshard_collectives",
]
