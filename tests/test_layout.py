"""The layout rules of the code base, checked on the source (AST), not by importing it.

1. Data flows one way: a module imports only modules of its own stage or of an
   earlier one (:data:`STAGES`), imports inside functions included; no import cycle.
2. ``sim/`` never imports ``aoizora/``.
3. Functions are at most 80 lines and modules at most 650 lines in ``aoizora/`` and ``sim/``.
4. The compiled event core's C units (``sim/_flow*.c`` and ``.h``) are layered
   (:data:`C_LAYERS`): a unit includes and calls only units of earlier layers, so no
   two call each other; each header declares what its ``.c`` offers and names it in
   its opening comment.

``pytest -s tests/test_layout.py`` prints both graphs' summaries.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
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
        "aoizora.resources",
        "aoizora.atomic",
        "aoizora.cache",
        "aoizora.fanout",
        "aoizora.software",
        "aoizora.timebound",  # the time bound every phase reads
    ),
    ("aoizora.workloads", "aoizora.zoo"),  # the zoo: workloads of drawn programs
    ("aoizora.tpu",),
    ("aoizora.candidates",),
    ("aoizora.stage1",),
    ("aoizora.compile", "aoizora.buffer_assignment"),
    ("aoizora.hlo",),
    ("aoizora.placement",),
    ("aoizora.replay",),
    ("aoizora.rank",),
    ("aoizora.plan",),
    ("aoizora.planner",),
    ("aoizora.request",),
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
    graph = _graph()
    cycles = list(nx.simple_cycles(graph))
    print(f"\nPython: {graph.number_of_nodes()} modules, {graph.number_of_edges()} imports "
          f"between them, {len(cycles)} cycles")  # fmt: skip
    assert not cycles, f"import cycles: {cycles[:5]}"


def test_data_flows_one_way() -> None:
    late = [
        f"{a} (stage {_stage(a)}) imports {b} (stage {_stage(b)})"
        for a, b in sorted(_graph().edges)
        if _stage(b) > _stage(a)
    ]
    print(f"\nPython: {len(STAGES)} stages, {len(late)} imports of a later stage")
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


# -- 4. the C event core, in layers -------------------------------------------------------

# Bottom layer first. A unit is a .c file and its .h (or a header alone).
C_LAYERS: tuple[tuple[str, ...], ...] = (
    ("_flowvec",),  # containers: ivec, the changed set, the finish heap
    ("_flownet", "_flowclock"),  # the network the solvers share (types); the classes' clocks
    ("_flowclass", "_flowwhole"),  # the solvers: by bottleneck classes, whole
    ("_flowshare",),  # the sharing kept between events: the lazy update, which solver
    ("_flowcore",),  # the event loop and the Python module
)
C_DIR = ROOT / "sim"
_C_DROP = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
_C_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]+"([^"]+)"', re.M)
_C_DIRECTIVE = re.compile(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", re.M)
_C_TOKEN = re.compile(r"[A-Za-z_]\w*|\S")


@dataclass
class _CFile:
    """What one C file defines, declares, includes and names."""

    defined: dict[str, bool] = field(default_factory=dict)  # function -> static
    declared: set[str] = field(default_factory=set)  # prototypes
    includes: set[str] = field(default_factory=set)  # local headers, by unit
    names: set[str] = field(default_factory=set)  # identifiers, not after . or ->
    opening: str = ""  # the file's first comment


def _c_file(path: Path) -> _CFile:
    text = path.read_text(encoding="utf-8")
    out = _CFile(includes={Path(h).stem for h in _C_INCLUDE.findall(text)})
    first = re.match(r"\s*/\*(.*?)\*/", text, re.S)
    out.opening = first.group(1) if first else ""
    code = _C_DIRECTIVE.sub(" ", _C_DROP.sub(lambda m: " " if m[0][0] == "/" else '""', text))
    tokens = _C_TOKEN.findall(code)
    depth, statement = 0, []  # statement: the top-level tokens since the last ; or }
    for i, tok in enumerate(tokens):
        if tok[0].isalpha() or tok[0] == "_":
            if i == 0 or tokens[i - 1] not in (".", ">"):
                out.names.add(tok)
        if depth == 0:
            statement.append(tok)
        if tok == "{":
            # A function's body opens after its parameter list: `name ( ... ) {`.
            if depth == 0 and len(statement) > 2 and statement[-2] == ")":
                name = statement[statement.index("(") - 1]
                out.defined[name] = "static" in statement
            depth += 1
        elif tok == "}":
            depth -= 1
            if depth == 0:
                statement = []
        elif tok == ";" and depth == 0:
            if "(" in statement and "=" not in statement and "typedef" not in statement:
                out.declared.add(statement[statement.index("(") - 1])
            statement = []
    return out


def _c_units(directory: Path) -> dict[str, dict[str, _CFile]]:
    """unit -> {".c" or ".h": its file} for every ``_flow*`` C file in ``directory``."""
    units: dict[str, dict[str, _CFile]] = {}
    for path in sorted(directory.glob("_flow*.[ch]")):
        units.setdefault(path.stem, {})[path.suffix] = _c_file(path)
    return units


def _c_offers(files: dict[str, _CFile]) -> set[str]:
    """A unit's functions others may call: its .c's non-static ones, its .h's inline ones."""
    return {name for suffix, f in files.items() for name, static in f.defined.items()
            if static == (suffix == ".h")}  # fmt: skip


def _c_graph(units: dict[str, dict[str, _CFile]]) -> nx.DiGraph:
    """An arrow from each unit to each other unit it includes or names a function of."""
    offers = {unit: _c_offers(files) for unit, files in units.items()}
    graph = nx.DiGraph()
    for unit, files in units.items():
        graph.add_node(unit)
        own = set().union(*(f.defined for f in files.values()))
        names = set().union(*(f.names for f in files.values())) - own
        for other in units:
            why = sorted(names & offers[other]) if other != unit else []
            if other != unit and any(other in f.includes for f in files.values()):
                why.insert(0, "#include")
            if why:
                graph.add_edge(unit, other, why=why)
    return graph


def _c_layer(unit: str, layers: tuple[tuple[str, ...], ...]) -> int:
    found = [i for i, names in enumerate(layers) if unit in names]
    if not found:
        raise AssertionError(f"C unit {unit} belongs to no layer; add it to C_LAYERS")
    return found[0]


def _c_upward(graph: nx.DiGraph, layers: tuple[tuple[str, ...], ...]) -> list[str]:
    """Each arrow that does not go to an earlier layer: up, or sideways within a layer."""
    return [
        f"{a} (layer {_c_layer(a, layers)}) -> {b} (layer {_c_layer(b, layers)}): "
        + ", ".join(graph.edges[a, b]["why"])
        for a, b in sorted(graph.edges)
        if _c_layer(b, layers) >= _c_layer(a, layers)
    ]


def test_c_core_is_layered() -> None:
    units = _c_units(C_DIR)
    graph = _c_graph(units)
    assert set(units) == {u for layer in C_LAYERS for u in layer}
    cycles = list(nx.simple_cycles(graph))
    upward = _c_upward(graph, C_LAYERS)
    print("\nC units, bottom layer first (-> the units each includes or calls):")
    for i, layer in enumerate(C_LAYERS):
        for unit in layer:
            below = ", ".join(sorted(graph.successors(unit))) or "nothing"
            print(f"  {i} {unit:<11} offers {len(_c_offers(units[unit])):2} -> {below}")
    print(f"C: {graph.number_of_edges()} arrows, {len(cycles)} cycles, {len(upward)} "
          "going up or sideways")  # fmt: skip
    assert not cycles, f"C call/include cycles: {cycles[:5]}"
    assert not upward, "C arrows up or sideways:\n" + "\n".join(upward)


def test_c_headers_say_what_their_unit_offers() -> None:
    for unit, files in _c_units(C_DIR).items():
        c, h = files.get(".c"), files.get(".h")
        public = {name for name, static in c.defined.items() if not static} if c else set()
        if h is None:  # the Python module: offers the interpreter its init, no more
            assert public == {"PyInit_" + unit}, f"{unit}.c defines {public} but has no header"
            continue
        assert c is None or unit in c.includes, f"{unit}.c does not include its header"
        assert h.declared == public, f"{unit}.h declares {h.declared}, {unit}.c defines {public}"
        unnamed = sorted(n for n in h.declared if not re.search(rf"\b{n}\b", h.opening))
        assert not unnamed, f"{unit}.h's opening comment does not name {unnamed}"


def test_c_layer_check_catches_a_call_up(tmp_path: Path) -> None:
    """The rule can fail: a container calling the sharing is an arrow up, and a cycle."""
    (tmp_path / "_flowlow.h").write_text("/* Offers low(). */\nint low(int x);\n")
    (tmp_path / "_flowlow.c").write_text(
        '#include "_flowlow.h"\n/* calls up */\nint low(int x) { return high(x) + 1; }\n'
    )
    (tmp_path / "_flowhigh.c").write_text(
        '#include "_flowlow.h"\nstatic int helper(int y) { return y; }\n'
        "int high(int x) { return low(helper(x)); }\n"
    )
    units = _c_units(tmp_path)
    assert units["_flowhigh"][".c"].defined == {"helper": True, "high": False}
    graph = _c_graph(units)
    layers = (("_flowlow",), ("_flowhigh",))
    assert graph.edges["_flowlow", "_flowhigh"]["why"] == ["high"]
    assert graph.edges["_flowhigh", "_flowlow"]["why"] == ["#include", "low"]
    assert _c_upward(graph, layers) == ["_flowlow (layer 0) -> _flowhigh (layer 1): high"]
    assert list(nx.simple_cycles(graph))
