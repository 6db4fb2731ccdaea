"""Measurements on real TPUs, the simulator's predictions of them, and the regression gate.

One concept per module:

- :mod:`aoizora.studies.validation.format` -- the measurement CSV: :class:`Measurement`
  rows (``collective`` and ``step``), :func:`parse_measurements`,
  :func:`read_measurements`, :func:`format_measurements`, group specs and
  :func:`row_slice`;
- :mod:`aoizora.studies.validation.predict` -- one predictor per row kind:
  :func:`predict_collective` (the collective in :mod:`sim`) and
  :func:`default_predictors`;
- :mod:`aoizora.studies.validation.step` -- :func:`predict_step`: compile the row's
  sharding, replay it with the row's device order (the planner's Q2);
- :mod:`aoizora.studies.validation.validate` -- :func:`validate`: predictions grouped by
  workload and slice, with Spearman's rho, top-1 agreement and MAPE per group
  (the statistics live in :mod:`aoizora.metrics`);
- :mod:`aoizora.studies.validation.gate` -- :class:`Thresholds` and :func:`gate`;
- :mod:`aoizora.studies.validation.origin` -- rows that ran on the host CPU (a dry run of
  ``aoizora measure``): :func:`ran_on_cpu`, :func:`check_tpu_rows`.

The file format is documented in ``docs/validation.md``. Every name is
re-exported here, so ``from aoizora.studies.validation import ...`` keeps working.

Example
-------
>>> text = '''row_id,kind,slice,collective,groups,size_bytes,measured_s,spread_s,spread_kind,source
... a,collective,v5e:2x2,all-gather,dims:0,1000000,2.0e-05,,unreported,https://example.org
... b,collective,v5e:2x2,all-gather,dims:0,4000000,5.0e-05,,unreported,https://example.org
... '''
>>> rows = parse_measurements(text, name="doc")
>>> rows[0].workload, rows[0].slice_name, rows[1].collective.size_bytes
('all-gather dims:0', 'v5e:2x2', 4000000)
>>> report = validate(rows, predictors={"collective": lambda r: r.measured_s * 1.1})
>>> g = report.groups[0]
>>> g.n, g.spearman, g.top1, round(g.mape_percent, 6)
(2, 1.0, True, 10.0)
>>> gate(report, Thresholds(max_mape_percent=5.0))[0].metric
'mape_percent'
"""

from __future__ import annotations

from aoizora.metrics import mape_percent, rank_average, spearman, top1_agreement
from aoizora.studies.validation.format import (
    COLLECTIVE_KINDS,
    COLUMNS,
    ROW_KINDS,
    SPREAD_KINDS,
    CollectiveCase,
    Measurement,
    StepCase,
    format_measurements,
    parse_group_spec,
    parse_measurements,
    read_measurements,
    row_slice,
)
from aoizora.studies.validation.gate import GateFailure, Thresholds, gate
from aoizora.studies.validation.origin import CPU_HARDWARE_PREFIX, check_tpu_rows, ran_on_cpu
from aoizora.studies.validation.predict import (
    DIMWISE,
    Predictor,
    collective_nodes,
    default_predictors,
    predict_collective,
)
from aoizora.studies.validation.step import DEFAULT_ATTENTION, predict_step
from aoizora.studies.validation.validate import (
    GroupReport,
    RowPrediction,
    ValidationReport,
    validate,
)

__all__ = [
    "COLLECTIVE_KINDS",
    "COLUMNS",
    "CPU_HARDWARE_PREFIX",
    "DEFAULT_ATTENTION",
    "DIMWISE",
    "ROW_KINDS",
    "SPREAD_KINDS",
    "CollectiveCase",
    "GateFailure",
    "GroupReport",
    "Measurement",
    "Predictor",
    "RowPrediction",
    "StepCase",
    "Thresholds",
    "ValidationReport",
    "check_tpu_rows",
    "collective_nodes",
    "default_predictors",
    "format_measurements",
    "gate",
    "mape_percent",
    "parse_group_spec",
    "parse_measurements",
    "predict_collective",
    "predict_step",
    "ran_on_cpu",
    "rank_average",
    "read_measurements",
    "row_slice",
    "spearman",
    "top1_agreement",
    "validate",
]
