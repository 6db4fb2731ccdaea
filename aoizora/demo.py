"""``make demo``: plan Wan2.1-1.3B, 480p, 81 frames on a v5e:2x4 slice.

Runs exactly what a user would type::

    aoizora plan --model wan2.1-1.3b --slice v5e:2x4 --resolution 480p --frames 81 \
        --out plan.json

Stage 1 lowers every legal sharding, Stage 2 compiles the top-K (and the
baselines) with libtpu for a real v5e:2x4 target on this CPU machine, replays
each compiled step on every distinct placement in the ICI simulator, ranks the
VAE decoder's shardings by Stage 1 for the whole clip (no compile), and writes
the winner to ``plan.json``. The first run takes about a minute and a half on two
idle cores (the step's three TPU compiles; README.md); a repeated run reads the
cache and takes seconds.
"""

from __future__ import annotations

import sys

from aoizora.cli import main

__all__ = ["DEMO_ARGS", "main"]

DEMO_ARGS: tuple[str, ...] = (
    "plan",
    "--model",
    "wan2.1-1.3b",
    "--slice",
    "v5e:2x4",
    "--resolution",
    "480p",
    "--frames",
    "81",
    "--out",
    "plan.json",
)

if __name__ == "__main__":
    sys.exit(main([*DEMO_ARGS, *sys.argv[1:]], as_program=True))
