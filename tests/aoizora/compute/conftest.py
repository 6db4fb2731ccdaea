"""Fixtures of the v5e compute model: profiled steps and kernels measured on a real chip
(validation/v5e/, validation/README.md "v5e compute")."""

from __future__ import annotations

from pathlib import Path

import pytest

from aoizora.hlo.profile import load_profile, read_text_file
from aoizora.hlo.text import parse_module
from aoizora.studies.compute_fit import ProfiledStep, load_profiled_steps
from aoizora.studies.explain import Explanation, explain, op_prices
from sim.topology import load_chip

V5E = Path(__file__).resolve().parents[3] / "validation" / "v5e"
PROFILES = V5E / "profiles"
KERNELS = V5E / "kernels.json"
# The rows topologies/v5e.toml's [compute] was fitted to (its sources name them).
FIT_ROWS = (
    "m-24893bf72f-winner",  # wan2.1-1.3b 832x480x21
    "m-d0700e072f-winner",  # wan2.1-1.3b 1280x720x21
    "m-db692be5fe-winner",  # wan2.1-1.3b 832x480x5
    "m-80c6028188-winner",  # wan2.2-ti2v-5b 640x352x41
    "m-bd44dfa8c7-winner",  # wan2.2-ti2v-5b 960x544x61
)

# VAE decodes measured with aoizora measure on the chip (validation/v5e/vae/rows.csv), by
# row id: the workload each decoded.
VAE_ROWS = {
    "m-40a99d5f22-vae": "wan2.1-vae@832x480x21",
    "m-80b8d37c33-vae": "wan2.1-vae@832x480x21[chunk2]",
    "m-58178b83de-vae": "wan2.1-vae@832x480x81",
    "m-acb5109a39-vae": "wan2.2-vae@640x352x41",
    "m-77d816fc20-vae": "wan2.1-vae@1280x720x21",
    "m-af1b21402f-vae": "wan2.1-vae@832x480x41",
    "m-b398b9a02f-vae": "wan2.1-vae@480x320x41",
    "m-cd2853ffd8-vae": "wan2.2-vae@832x480x21",
}


@pytest.fixture(scope="session")
def v5e_steps() -> dict[str, ProfiledStep]:
    """Every profiled v5e step, by row id."""
    return {s.name: s for s in load_profiled_steps(PROFILES)}


@pytest.fixture(scope="session")
def decodes_explained() -> dict[str, Explanation]:
    """Every VAE decode profiled on the chip (validation/v5e/**/profiles), explained op by
    op, by file name."""
    chip = load_chip("v5e")
    out = {}
    for ops in sorted(V5E.glob("**/profiles/*-vae.ops.json.gz")):
        hlo = parse_module(read_text_file(str(ops).replace(".ops.json.gz", ".hlo.txt.gz")))
        out[ops.name] = explain(load_profile(ops, module=hlo.name), hlo, op_prices(hlo, chip))
    return out
