"""Read compiled HLO text into computations and instructions.

The input is what ``jax.jit(f).lower(...).compile().as_text()`` prints: a
``HloModule`` header line (``num_partitions=N``, ``is_scheduled=true``, ...),
optional stack-frame tables (``FileNames``, ``FunctionNames``, ``FileLocations``,
``StackFrames``), then computations::

    %name (p: f32[8]) -> f32[8] {
      %p = f32[8]{0} parameter(0)
      ROOT %r = f32[8]{0} add(%p, %p), metadata={op_name="add"}
    }

with one ``ENTRY`` computation. The instruction grammar follows openxla/xla
``xla/hlo/parser/hlo_parser.cc``: ``[ROOT] %name = shape opcode(operands),
attribute=value, ...``; attribute values may nest ``{}``, ``()``, ``[]`` and hold
quoted strings with escapes (``backend_config`` JSON). Values are kept as raw
text here and interpreted by the modules that need them (:mod:`.groups`,
:mod:`.graph`). In a scheduled module the instruction order of each
computation is its execution order.

Anything that is not this grammar raises :class:`~aoizora.errors.HloParseError`
naming the line and what was expected.

Example:
    >>> text = '''HloModule m, is_scheduled=true, num_partitions=2
    ...
    ... ENTRY %main (p: f32[4]) -> f32[4] {
    ...   %p = f32[4]{0} parameter(0)
    ...   ROOT %ar = f32[4]{0} all-reduce(%p), channel_id=1, replica_groups={{0,1}}, to_apply=%add
    ... }
    ... '''
    >>> m = parse_module(text.replace(", to_apply=%add", ""))
    >>> m.num_partitions, m.entry.root.opcode, m.entry.root.attrs["replica_groups"]
    (2, 'all-reduce', '{{0,1}}')
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from aoizora.errors import HloParseError
from aoizora.hlo.shapes import Shape, ShapeSyntaxError, parse_shape

__all__ = [
    "Computation",
    "HloModule",
    "Instruction",
    "parse_module",
    "split_top_level",
]

_EXAMPLE_LINE = "'  %x = f32[8]{0} add(%a, %b)'"
_INSTR_RE = re.compile(r"\s+(ROOT\s+)?%?([^\s=%]+)\s*=\s*")
_OPCODE_RE = re.compile(r"\s*([a-z][a-z0-9\-]*)\(")
_COMP_RE = re.compile(r"(ENTRY\s+)?%?([^\s(]+)\s*(\(.*\)\s*->.*)?\{\s*$")
# Quoted strings (with escapes), /*comments*/ and the characters that nest or separate.
_SIG_RE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|/\*.*?\*/|[{}()\[\],]')
_SECTIONS = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
_OPEN = {"{": "}", "(": ")", "[": "]"}
# Opcodes whose parenthesised "operands" are a literal, not instruction names.
_LITERAL_OPCODES = frozenset({"constant", "parameter"})
# Attributes that name computations (hlo_parser.cc attribute kinds kHloComputation/List).
_CALL_ATTRS = (
    "calls",
    "to_apply",
    "condition",
    "body",
    "true_computation",
    "false_computation",
    "branch_computations",
    "called_computations",
)


@dataclass(frozen=True, slots=True)
class Instruction:
    """One HLO instruction; ``attrs`` maps attribute names to their raw text."""

    name: str
    opcode: str
    shape: Shape
    operands: tuple[str, ...]
    attrs: Mapping[str, str]
    line: int
    is_root: bool = False
    literal: str | None = None

    def called(self) -> tuple[str, ...]:
        """Names of the computations this instruction calls, in attribute order."""
        out: list[str] = []
        for key in _CALL_ATTRS:
            value = self.attrs.get(key)
            if value is None:
                continue
            for part in value.strip().strip("{}").split(","):
                name = part.strip().lstrip("%")
                if name:
                    out.append(name)
        return tuple(out)


@dataclass(frozen=True)
class Computation:
    """A named computation: its instructions in printed (= schedule) order."""

    name: str
    instructions: tuple[Instruction, ...]
    line: int
    is_entry: bool = False
    by_name: Mapping[str, Instruction] = field(default_factory=dict, repr=False)

    @property
    def root(self) -> Instruction:
        for instr in self.instructions:
            if instr.is_root:
                return instr
        return self.instructions[-1]

    def parameter(self, number: int) -> Instruction | None:
        """The ``parameter(number)`` instruction, if any."""
        for instr in self.instructions:
            if instr.opcode == "parameter" and instr.literal is not None:
                if instr.literal.strip() == str(number):
                    return instr
        return None


@dataclass(frozen=True)
class HloModule:
    """A parsed HLO module."""

    name: str
    computations: Mapping[str, Computation]
    entry_name: str
    num_partitions: int
    replica_count: int
    is_scheduled: bool
    header: Mapping[str, str]

    @property
    def entry(self) -> Computation:
        return self.computations[self.entry_name]

    @property
    def num_devices(self) -> int:
        return self.num_partitions * self.replica_count


def _error(lineno: int, problem: str, line: str) -> HloParseError:
    snippet = line.strip()
    if len(snippet) > 160:
        snippet = snippet[:157] + "..."
    return HloParseError(
        f"line {lineno}: {problem}; the line reads {snippet!r} (expected compiled HLO text as "
        f"printed by compiled.as_text(), e.g. {_EXAMPLE_LINE})"
    )


def split_top_level(text: str, start: int, close: str | None) -> tuple[list[str], int]:
    """Split ``text[start:]`` at top-level commas until ``close`` (or the end).

    Nested ``{}``/``()``/``[]``, quoted strings and ``/* */`` comments are kept
    whole. Returns the stripped parts and the index just after ``close`` (or
    ``len(text)``). Raises ``ValueError`` on unbalanced brackets.

    >>> split_top_level('a, b={1,(2)}, c="x,}") tail', 0, ")")
    (['a', 'b={1,(2)}', 'c="x,}"'], 22)
    """
    parts: list[str] = []
    stack: list[str] = []
    piece_start = start
    for m in _SIG_RE.finditer(text, start):
        tok = m.group()
        if len(tok) != 1:
            continue  # a string or a comment
        if tok in _OPEN:
            stack.append(_OPEN[tok])
        elif tok in ")]}":
            if stack:
                if stack.pop() != tok:
                    raise ValueError(f"mismatched {tok!r} at column {m.start() + 1}")
            elif tok == close:
                last = text[piece_start : m.start()].strip()
                if last or parts:
                    parts.append(last)
                return parts, m.end()
            else:
                raise ValueError(f"unbalanced {tok!r} at column {m.start() + 1}")
        elif not stack:  # a top-level comma
            parts.append(text[piece_start : m.start()].strip())
            piece_start = m.end()
    if stack or close is not None:
        want = stack[-1] if stack else close
        raise ValueError(f"missing {want!r} before the end of the line")
    last = text[piece_start:].strip()
    if last or parts:
        parts.append(last)
    return parts, len(text)


def _strip_comment(text: str) -> str:
    if "/*" in text:
        text = re.sub(r"/\*.*?\*/", "", text)
    return text.strip()


def _parse_instruction(line: str, lineno: int) -> Instruction:
    m = _INSTR_RE.match(line)
    if m is None:
        raise _error(lineno, "expected an instruction '%name = shape opcode(...)'", line)
    is_root = m.group(1) is not None
    name = m.group(2)
    try:
        shape, pos = parse_shape(line, m.end())
    except ShapeSyntaxError as exc:
        raise _error(lineno, f"bad result shape of %{name}: {exc}", line) from None
    om = _OPCODE_RE.match(line, pos)
    if om is None:
        raise _error(lineno, f"expected an opcode followed by '(' after the shape of %{name}", line)
    opcode = om.group(1)
    try:
        raw_operands, pos = split_top_level(line, om.end(), ")")
    except ValueError as exc:
        raise _error(lineno, f"bad operand list of %{name}: {exc}", line) from None
    literal: str | None = None
    operands: list[str] = []
    if opcode in _LITERAL_OPCODES:
        literal = line[om.end() : pos - 1]
    else:
        for raw in raw_operands:
            token = _strip_comment(raw)
            if not token:
                raise _error(lineno, f"empty operand in the operand list of %{name}", line)
            # Older printers put the operand shape first: 'f32[8]{0} %x'.
            operand = token.rsplit(None, 1)[-1]
            if not operand.startswith("%") and " " not in token and "[" in operand:
                raise _error(lineno, f"operand {token!r} of %{name} is not an instruction", line)
            operands.append(operand.lstrip("%"))
    attrs: dict[str, str] = {}
    rest = line[pos:]
    if rest.strip():
        if not rest.lstrip().startswith(","):
            raise _error(
                lineno, f"expected ', attribute=value' after the operands of %{name}", line
            )
        try:
            parts, _ = split_top_level(rest, rest.index(",") + 1, None)
        except ValueError as exc:
            raise _error(lineno, f"bad attribute list of %{name}: {exc}", line) from None
        previous = ""
        for part in parts:
            key, eq, value = part.partition("=")
            key = key.strip()
            if key == "device_ids" and attrs.get(previous, "").startswith("mesh"):
                # 'replica_groups=mesh[...], device_ids=(...) {...}': one value with a comma.
                attrs[previous] += ", " + part.strip()
                continue
            previous = key
            if not eq or not key or not re.fullmatch(r"[A-Za-z_][\w.\-]*", key):
                raise _error(lineno, f"attribute {part[:40]!r} of %{name} is not key=value", line)
            attrs[key] = value.strip()
    return Instruction(
        name=name,
        opcode=opcode,
        shape=shape,
        operands=tuple(operands),
        attrs=attrs,
        line=lineno,
        is_root=is_root,
        literal=literal,
    )


def _parse_header(line: str, lineno: int) -> tuple[str, dict[str, str]]:
    body = line[len("HloModule") :].strip()
    name, _, rest = body.partition(",")
    if not name.strip():
        raise _error(lineno, "the HloModule header has no module name", line)
    header: dict[str, str] = {}
    if rest.strip():
        try:
            parts, _ = split_top_level(rest, 0, None)
        except ValueError as exc:
            raise _error(lineno, f"bad HloModule header: {exc}", line) from None
        for part in parts:
            key, _, value = part.partition("=")
            header[key.strip()] = value.strip()
    return name.strip(), header


def _header_int(header: Mapping[str, str], key: str, default: int, lineno: int, line: str) -> int:
    value = header.get(key)
    if value is None:
        return default
    if not value.isdigit() or int(value) < 1:
        raise _error(lineno, f"{key}={value!r} in the header is not a positive integer", line)
    return int(value)


# A computation ends with '}', on tpu7x sometimes with its execution thread:
# '}, execution_thread="sparsecore"' (collectives offloaded to SparseCores; docs/hlo.md).
_COMP_END_RE = re.compile(r'^\}(?:,\s*execution_thread="[^"]*")?\s*$')

# An instruction starts with indentation, then ``%name =`` or ``ROOT %name =``.
_INSTR_START_RE = re.compile(r"^\s+(?:ROOT\s+)?%?[\w.\-]+\s*=")


@dataclass
class _Open:
    """The computation being read: its header and the instructions so far."""

    name: str
    is_entry: bool
    line: int
    instrs: list[Instruction] = field(default_factory=list)
    pending: tuple[str, int] | None = None  # an instruction whose text may continue

    def flush(self) -> None:
        if self.pending is not None:
            self.instrs.append(_parse_instruction(*self.pending))
            self.pending = None

    def feed(self, line: str, num: int) -> bool:
        """Take one body line; True when it closes the computation."""
        if _COMP_END_RE.match(line):
            self.flush()
            return True
        if not line.strip():
            return False
        if self.pending is not None and not _INSTR_START_RE.match(line):
            # TPU custom calls print multi-line attributes (kernel_metadata JSON,
            # '}}, metadata=...'): such a line continues the instruction before it.
            self.pending = (self.pending[0] + "\n" + line, self.pending[1])
            return False
        self.flush()
        self.pending = (line, num)
        return False


def _computations(lines: list[str], start: int) -> tuple[dict[str, Computation], str | None]:
    """Every computation after the header line ``start`` and the ENTRY's name."""
    computations: dict[str, Computation] = {}
    entry_name: str | None = None
    current: _Open | None = None
    in_section = False
    for index in range(start + 1, len(lines)):
        line = lines[index]
        num = index + 1
        if current is not None:
            if current.feed(line, num):
                computations[current.name] = _finish_computation(
                    current.name, current.instrs, current.line, current.is_entry, lines
                )
                current = None
            continue
        stripped = line.strip()
        if not stripped:
            in_section = False
            continue
        if stripped in _SECTIONS:
            in_section = True
            continue
        if in_section and stripped[0].isdigit():
            continue
        m = _COMP_RE.match(line)
        if m is None or line[0].isspace():
            raise _error(
                num,
                "expected a computation header '%name (params) -> shape {' or 'ENTRY ...'",
                line,
            )
        current = _Open(name=m.group(2), is_entry=m.group(1) is not None, line=num)
        if current.name in computations:
            raise _error(num, f"computation %{current.name} is defined twice", line)
        if current.is_entry:
            if entry_name is not None:
                raise _error(num, f"a second ENTRY computation (first: %{entry_name})", line)
            entry_name = current.name
    if current is not None:
        raise _error(
            current.line,
            f"computation %{current.name} is not closed by '}}' before the end of the text "
            f"(truncated input?)",
            lines[current.line - 1],
        )
    return computations, entry_name


def _check_calls(computations: Mapping[str, Computation], lines: list[str]) -> None:
    for comp in computations.values():
        for instr in comp.instructions:
            for callee in instr.called():
                if callee not in computations:
                    raise _error(
                        instr.line,
                        f"%{instr.name} calls computation %{callee}, which is not defined",
                        lines[instr.line - 1],
                    )


def parse_module(text: str) -> HloModule:
    """Parse compiled HLO text (``compiled.as_text()``) into an :class:`HloModule`.

    Raises :class:`HloParseError` naming the line on anything malformed:
    a missing header, a garbled instruction, an unclosed computation, an
    operand or called computation that does not exist, no ENTRY computation.
    """
    lines = text.splitlines()
    lineno = 0
    while lineno < len(lines) and not lines[lineno].strip():
        lineno += 1
    if lineno >= len(lines) or not lines[lineno].startswith("HloModule"):
        first = lines[lineno] if lineno < len(lines) else ""
        raise _error(lineno + 1, "the text does not start with an 'HloModule' header", first)
    header_line = lineno + 1
    name, header = _parse_header(lines[lineno], header_line)
    num_partitions = _header_int(header, "num_partitions", 1, header_line, lines[lineno])
    replica_count = _header_int(header, "replica_count", 1, header_line, lines[lineno])
    computations, entry_name = _computations(lines, lineno)
    if entry_name is None:
        raise HloParseError(
            "the module has no ENTRY computation (compiled HLO marks one computation "
            "'ENTRY %main... {'); was the text truncated?"
        )
    _check_calls(computations, lines)
    return HloModule(
        name=name,
        computations=computations,
        entry_name=entry_name,
        num_partitions=num_partitions,
        replica_count=replica_count,
        is_scheduled=header.get("is_scheduled") == "true",
        header=header,
    )


def _finish_computation(
    name: str, instrs: list[Instruction], line: int, is_entry: bool, lines: list[str]
) -> Computation:
    if not instrs:
        raise _error(line, f"computation %{name} has no instructions", lines[line - 1])
    by_name: dict[str, Instruction] = {}
    for instr in instrs:
        if instr.name in by_name:
            raise _error(
                instr.line,
                f"instruction %{instr.name} is defined twice in %{name}",
                lines[instr.line - 1],
            )
        by_name[instr.name] = instr
    for instr in instrs:
        for operand in instr.operands:
            if operand not in by_name:
                raise _error(
                    instr.line,
                    f"operand %{operand} of %{instr.name} is not defined in computation %{name}",
                    lines[instr.line - 1],
                )
    return Computation(
        name=name, instructions=tuple(instrs), line=line, is_entry=is_entry, by_name=by_name
    )
