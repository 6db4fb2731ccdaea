"""``README.md`` of an export directory: how to run the plan, what AoiZora predicted, how to
measure it.

The predictions are the plan's, labelled simulated. The denoising time is the config's
``num_inference_steps`` times the predicted step (both CFG passes are one step); a
whole-clip time is shown when the plan carries one (``clip_s``).
"""

from __future__ import annotations

import csv
import io

from aoizora.export.maxdiffusion import MaxdiffusionExport
from aoizora.export.maxdiffusion_table import MAXDIFFUSION_COMMIT, MAXDIFFUSION_REPO
from aoizora.studies.validation.format import COLUMNS

__all__ = ["readme_text"]


def _predictions(export: MaxdiffusionExport) -> list[str]:
    plan, config = export.plan, export.config
    step_s = plan.predicted.winner_s
    steps = config.num_inference_steps
    lines = [
        f"- one denoising step (both CFG passes): **{step_s * 1e3:.2f} ms**",
        f"- denoising at the config's `num_inference_steps: {steps}`: {steps} x step = "
        f"{steps * step_s:.2f} s",
    ]
    clip_s = getattr(plan, "clip_s", None)  # plans that predict the whole clip carry it
    if isinstance(clip_s, float):
        lines.append(f"- the whole clip (text encoder, denoising, VAE decode): {clip_s:.2f} s")
    else:
        lines.append("- the whole clip: not predicted by this plan (it records the step only)")
    for name, seconds in plan.predicted.baselines_s:
        lines.append(
            f"- baseline {name}: {seconds * 1e3:.2f} ms per step "
            f"({seconds / step_s:.2f}x the plan's)"
        )
    return lines


def _measurement_row(export: MaxdiffusionExport) -> str:
    plan = export.plan
    clip = plan.clip
    # the tiles and their VMEM limit, so validate compiles what maxdiffusion ran
    columns = [c for c in COLUMNS if c != "scoped_vmem_kib" or plan.scoped_vmem_kib is not None]
    cells = dict.fromkeys(columns, "")
    cells.update(
        row_id="maxdiffusion-step",
        kind="step",
        slice=plan.slice_name,
        model=plan.model,
        clip="" if clip is None else f"{clip.frames}x{clip.height}x{clip.width}",
        mesh_shape="x".join(str(s) for s in plan.mesh_shape),
        mesh_axes=" ".join(plan.mesh_axis_names),
        rules_id=plan.rules_name,
        attention=plan.attention,
        device_order=" ".join(str(i) for i in plan.physical_ids),
        splash_blocks="x".join(str(b) for b in plan.splash_blocks or ()),
        **({} if plan.scoped_vmem_kib is None else {"scoped_vmem_kib": str(plan.scoped_vmem_kib)}),
        measured_s="SECONDS",
        spread_kind="unreported",
        source="your run of maxdiffusion generate_wan (Denoise Total / num_inference_steps)",
    )
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    writer.writerow([cells[c] for c in columns])
    return buf.getvalue()


def _libtpu(export: MaxdiffusionExport) -> list[str]:
    """The libtpu flags the plan needs (its tiles' scoped VMEM limit), and how they are set."""
    if not export.libtpu_flags:
        return []
    flags = " ".join(export.libtpu_flags)
    return [
        "",
        f"The plan's splash tiles need a scoped VMEM limit above the compiler's default: "
        f"`mesh.py` adds `{flags}` to `LIBTPU_INIT_ARGS` before jax starts. Without `mesh.py`, "
        "set it yourself as maxdiffusion's Wan recipes do, before `python -m ...`:",
        "",
        "```bash",
        f'export LIBTPU_INIT_ARGS="${{LIBTPU_INIT_ARGS:-}} {flags}"',
        "```",
    ]


def readme_text(export: MaxdiffusionExport, *, note: str = "") -> str:
    """The README for ``export`` (``note``: a line to put first, e.g. a substitution)."""
    plan, config = export.plan, export.config
    clip = plan.clip
    what = f"{plan.model}" + ("" if clip is None else f", {clip.width}x{clip.height}x{clip.frames}")
    parts = [
        f"# AoiZora plan {plan.candidate_id} on maxdiffusion",
        "",
        *([note, ""] if note else []),
        f"Model {what} on `{plan.slice_name}`; placement `{plan.placement_id}`. "
        f"maxdiffusion config `{config.path}` ({MAXDIFFUSION_REPO}, checked at commit "
        f"`{MAXDIFFUSION_COMMIT[:7]}`).",
        "",
        "Files: `maxdiffusion.yml` (the overrides as YAML), `maxdiffusion.args` (the same as "
        "`key=value` arguments, one a line), `mesh.py` (the planned device order).",
        "",
        "## Run",
        "",
        "From a maxdiffusion checkout (`pip install -e .` done), with this directory as `$PLAN`:",
        "",
        "```bash",
        'mapfile -t ARGS < "$PLAN/maxdiffusion.args"',
        f'python "$PLAN/mesh.py" {config.path} "${{ARGS[@]}}"',
        "```",
        "",
        "`mesh.py` makes maxdiffusion build its mesh from the planned devices (maxdiffusion has "
        "no setting for a device order) and runs `maxdiffusion.generate_wan`. Without it, "
        f'`python -m maxdiffusion.generate_wan {config.path} "${{ARGS[@]}}"` runs the planned '
        "sharding in `mesh_utils`' device order instead of the planned placement.",
        *_libtpu(export),
        "",
        "## What AoiZora predicted (simulated, not measured)",
        "",
        *_predictions(export),
        "",
        "## Measure it",
        "",
        "maxdiffusion prints a TIMING SUMMARY after the timed run; `Denoise Total` divided by "
        "`num_inference_steps` is the measured step. Put it (seconds) in the `measured_s` cell "
        "of this measurement row and check the prediction with `aoizora validate steps.csv` "
        "(docs/validation.md):",
        "",
        "```csv",
        _measurement_row(export).rstrip("\n"),
        "```",
    ]
    return "\n".join(parts) + "\n"
