"""``aoizora plan|whatif --model wan2.2-*``: the command line builds Wan 2.2's own workloads.

Planning the full models is a benchmark (README, "Wan 2.2, Ironwood and Ulysses x ring");
here the parser and :func:`workload_from_args` are checked against the public configs'
numbers (docs/facts.md, Wan 2.2): TI2V-5B's 720p is 1280x704 with 121 frames by default,
A14B's is Wan 2.1's 1280x720x81 and its step holds both experts.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jax
import pytest

from aoizora.cli import build_parser
from aoizora.commands.args import workload_from_args

ROOT = Path(__file__).resolve().parents[2]


def _workload(*argv: str):  # type: ignore[no-untyped-def]
    args = build_parser().parse_args(argv)
    return workload_from_args(args)


@pytest.mark.parametrize("command", ["plan", "whatif"])
def test_ti2v_5b_720p_is_1280x704_with_121_frames(command: str) -> None:
    where = ["--slice", "v5e:2x4"] if command == "plan" else ["--slices", "v5e:2x4,tpu7x:2x2x1"]
    given = _workload(command, "--model", "wan2.2-ti2v-5b", *where, "--resolution", "720p",
                      "--frames", "121")  # fmt: skip
    default = _workload(command, "--model", "wan2.2-ti2v-5b", *where, "--resolution", "720p")
    assert given.name == default.name == "wan2.2-ti2v-5b@1280x704x121"
    # 48-channel latents of a 4x16x16 VAE: (121-1)/4+1 = 31 frames of 44x80, patches 1x2x2.
    assert given.info["tokens"] == 31 * 22 * 40
    latents = jax.tree.leaves(given.abstract_args)[-3]
    assert tuple(latents.shape)[1:] == (48, 31, 44, 80)
    assert "experts" not in given.info


def test_a14b_720p_plans_both_experts() -> None:
    wl = _workload("plan", "--model", "wan2.2-a14b", "--slice", "v6e:2x4", "--resolution", "720p")
    assert wl.name == "wan2.2-a14b@1280x720x81"
    assert [(e["name"], e["steps"]) for e in wl.info["experts"]] == [
        ("high_noise", 26),
        ("low_noise", 14),
    ]
    # Both experts are arguments of the one step: twice the parameters of one 14B expert.
    one = _workload("plan", "--model", "wan2.1-14b", "--slice", "v6e:2x4", "--resolution", "720p")
    size = sum(x.size for x in jax.tree.leaves(wl.abstract_args[:2]))
    assert size == 2 * sum(x.size for x in jax.tree.leaves(one.abstract_args[0]))


def test_a_named_size_the_model_lacks_is_one_line_naming_its_own() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "aoizora", "plan", "--model", "wan2.2-ti2v-5b",
         "--slice", "v5e:2x4", "--resolution", "480p"],
        capture_output=True, text=True, env=dict(os.environ), cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("aoizora plan: error: resolution '480p' is not one of")
    assert "for wan2.2-ti2v-5b; e.g. '720p' or '1280x704'" in line
