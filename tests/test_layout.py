"""The layout rules of the code base, checked on the source (AST), not by importing it.

1. Data flows one way: a module imports only modules of its own stage or of an
   earlier one (:data:`STAGES`), imports inside functions included; no import cycle.
2. ``sim/`` never imports ``aoizora/``.
3. Functions are at most 80 lines and modules at most 650 lines in ``aoizora/`` and ``sim/``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("aoizora", "sim")
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 650

# The pipeline in order. A module belongs to the first stage one of whose prefixes
# names it or a package above it; it may import its own stage and earlier ones.
STAGES: tuple[tuple[str, ...], ...] = (
    ("sim",),
    (
        "aoizora.errors",
        "aoizora.metrics",
        "aoizora.interrupts",
        "aoizora.atomic",
        "aoizora.cache",
        "aoizora.fanout",
        "aoizora.software",
    ),
    ("aoizora.workloads",),
    ("aoizora.tpu",),
    ("aoizora.candidates",),
    ("aoizora.stage1",),
    ("aoizora.compile",),
    ("aoizora.hlo",),
    ("aoizora.placement",),
    ("aoizora.replay",),
    ("aoizora.rank",),
    ("aoizora.plan",),
    ("aoizora.planner",),
    ("aoizora.request",),
    # Reading a device profile (a trace's op events, as jaxlib prints them) is an input
    # like HLO text: the studies that explain and fit steps read it; measure writes it.
    ("aoizora.measure.profile",),
    ("aoizora.report",),
    ("aoizora.studies",),
    # Timing a plan on devices: reads plans and workloads, writes measurement rows.
    ("aoizora.measure",),
    # Serving capacity: sizes replicas from plans' clip latencies.
    ("aoizora.serving",),
    ("aoizora.export",),
    ("aoizora.commands", "aoizora.cli", "aoizora.demo", "aoizora.__main__"),
    # The package itself re-exports the public API (load_plan, user_workload, ...).
    ("aoizora",),
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    return {
        _module_name(p): p
        for package in PACKAGES
        for p in sorted((ROOT / package).rglob("*.py"))
        if "__pycache__" not in p.parts
    }


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base.pop()
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _imports(module: str, path: Path, known: set[str]) -> set[str]:
    """Every first-party module ``module`` imports, wherever the import statement is."""
    out: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, path.name == "__init__.py", node)
            # `from pkg import mod` imports pkg.mod when that is a module.
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names
            ]
        else:
            continue
        out.update(t for t in targets if t.split(".")[0] in PACKAGES)
    return out


def _stage(module: str) -> int:
    best = (-1, -1)  # (prefix length, stage index): the most specific prefix wins
    for i, prefixes in enumerate(STAGES):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                best = max(best, (len(prefix), i))
    if best[1] < 0:
        raise AssertionError(f"module {module} belongs to no stage; add it to STAGES")
    return best[1]


def _graph() -> nx.DiGraph:
    sources = _sources()
    known = set(sources)
    graph = nx.DiGraph()
    for module, path in sources.items():
        graph.add_node(module)
        for target in _imports(module, path, known):
            if target != module:
                graph.add_edge(module, target)
    return graph


def test_no_import_cycle() -> None:
    cycles = list(nx.simple_cycles(_graph()))
    assert not cycles, f"import cycles: {cycles[:5]}"


def test_data_flows_one_way() -> None:
    late = [
        f"{a} (stage {_stage(a)}) imports {b} (stage {_stage(b)})"
        for a, b in sorted(_graph().edges)
        if _stage(b) > _stage(a)
    ]
    assert not late, "imports of a later stage:\n" + "\n".join(late)


def test_sim_never_imports_aoizora() -> None:
    bad = [(a, b) for a, b in _graph().edges if a.startswith("sim") and b.startswith("aoizora")]
    assert not bad


def test_stage_check_catches_a_late_import() -> None:
    """The rule can fail: a Stage-1 module importing the planner is a late import."""
    assert _stage("aoizora.planner") > _stage("aoizora.stage1.q1")
    assert _stage("aoizora.stage1") > _stage("aoizora.workloads.base")
    assert _stage("aoizora.plan") != _stage("aoizora.planner")


def _long_functions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        f"{path.relative_to(ROOT)}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)"
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        and n.end_lineno is not None
        and n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES
    ]


@pytest.mark.parametrize("package", PACKAGES)
def test_functions_and_modules_are_short(package: str) -> None:
    paths = sorted((ROOT / package).rglob("*.py"))
    long_functions = [f for p in paths for f in _long_functions(p)]
    long_modules = [
        f"{p.relative_to(ROOT)} ({n} lines)"
        for p in paths
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    ]
    assert not long_functions, f"functions over {MAX_FUNCTION_LINES} lines: {long_functions}"
    assert not long_modules, f"modules over {MAX_MODULE_LINES} lines: {long_modules}"
