"""The JSON flow-replay format read by ``python -m sim flows FILE.json``.

Input (``start`` and ``after`` optional; ``wraparound`` one bool or one per
dimension; ``routing`` a permutation of ``xy``/``xyz``, default x first)::

    {"topology": {"shape": [4, 4], "wraparound": false, "link_bandwidth": 4.5e10,
                  "hop_latency": 1e-6, "routing": "xy"},
     "flows": [{"id": "f0", "src": [0, 0], "dst": [3, 2], "bytes": 1e6,
                "start": 0.0, "after": ["f1"]}]}

``"topology": {"slice": "v5e:4x4"}`` names a real slice instead (it may add
``wraparound``, ``routing``, ``link_bandwidth`` or ``hop_latency`` to
override). Output: ``{"flows": {"f0": {"start": s, "finish": f}, ...},
"makespan": m}`` where ``start`` is the release time. Units: bytes, bytes per
second (one-way per link), seconds.

Every problem raises :class:`FlowFileError` (a :class:`~sim.errors.SimError`)
with a one-line message naming the offending field.

>>> doc = {"topology": {"shape": [2], "link_bandwidth": 1e9, "hop_latency": 0.0},
...        "flows": [{"id": "a", "src": [0], "dst": [1], "bytes": 1e6}]}
>>> replay(doc)
{'flows': {'a': {'start': 0.0, 'finish': 0.001}}, 'makespan': 0.001}
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from itertools import chain, repeat
from operator import itemgetter
from pathlib import Path
from typing import Any

from sim.coords import all_plain
from sim.engine import Compute, Flow, run_nodes
from sim.errors import SimError
from sim.topology import Slice, load_slice, make_slice

__all__ = [
    "FlowFileError",
    "flow_document",
    "format_output",
    "parse_flow_document",
    "read_flow_file",
    "replay",
]

_AXES = "xyz"
_TOPOLOGY_KEYS = ("shape", "slice", "wraparound", "link_bandwidth", "hop_latency", "routing")
_FLOW_KEYS = ("id", "src", "dst", "bytes", "start", "after")
_FLOW_KEY_SET = frozenset(_FLOW_KEYS)
_REQUIRED_KEYS = frozenset(_FLOW_KEYS[:4])
# Integers up to 2**53 convert to floats exactly (larger ones take the slow path).
_EXACT_INT = 2**53
# A flow without "after" (shared, never changed: only read into a tuple).
_NO_AFTER: list[str] = []
_EXAMPLE = (
    '{"topology": {"shape": [4, 4], "wraparound": false, "link_bandwidth": 4.5e10, '
    '"hop_latency": 1e-6}, "flows": [{"id": "f0", "src": [0, 0], "dst": [3, 2], "bytes": 1e6}]}'
)


class FlowFileError(SimError):
    """The flow file is unreadable or does not follow the format."""


def _number(value: Any, where: str, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FlowFileError(f"{where} must be a number, got {json.dumps(value)}")
    number = float(value)
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        rule = "> 0" if positive else ">= 0"
        raise FlowFileError(f"{where} must be finite and {rule}, got {json.dumps(value)}")
    return number


def _coord(value: Any, where: str, slice_: Slice) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
        isinstance(c, int) and not isinstance(c, bool) for c in value
    ):
        raise FlowFileError(f"{where} must be a list of ints, e.g. [0, 1]; got {json.dumps(value)}")
    coord = tuple(value)
    if not slice_.contains(coord):
        raise FlowFileError(
            f"{where} {json.dumps(value)} is outside the mesh of shape {list(slice_.shape)} "
            f"(each entry 0 <= c < n), e.g. {list(slice_.coords[-1])}"
        )
    return coord


def _object(value: Any, where: str, keys: tuple[str, ...]) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise FlowFileError(f"{where} must be a JSON object, got {json.dumps(value)[:60]}")
    unknown = sorted(set(value) - set(keys))
    if unknown:
        raise FlowFileError(
            f"{where} has unknown field {unknown[0]!r}; valid fields: {', '.join(keys)}"
        )
    return value


def _routing(value: Any, num_dims: int) -> tuple[int, ...]:
    axes = _AXES[:num_dims]
    if not isinstance(value, str) or sorted(value) != sorted(axes):
        raise FlowFileError(
            f"topology.routing must order the axes {axes!r}, e.g. {axes!r} or "
            f"{axes[::-1]!r}; got {json.dumps(value)}"
        )
    return tuple(axes.index(c) for c in value)


def _topology(data: Any) -> tuple[Slice, tuple[int, ...]]:
    topo = _object(data, "topology", _TOPOLOGY_KEYS)
    wrap = topo.get("wraparound")
    if wrap is not None and not (
        isinstance(wrap, bool)
        or (isinstance(wrap, list) and all(isinstance(w, bool) for w in wrap))
    ):
        raise FlowFileError(
            f"topology.wraparound must be true/false or a list of them, got {json.dumps(wrap)}"
        )
    bandwidth = topo.get("link_bandwidth")
    latency = topo.get("hop_latency")
    if bandwidth is not None:
        bandwidth = _number(bandwidth, "topology.link_bandwidth", positive=True)
    if latency is not None:
        latency = _number(latency, "topology.hop_latency")
    try:
        if "slice" in topo:
            if "shape" in topo:
                raise FlowFileError("topology takes either 'slice' or 'shape', not both")
            named = load_slice(str(topo["slice"]), wraparound=wrap)
            slice_ = (
                named
                if bandwidth is None and latency is None
                else make_slice(
                    named.shape,
                    wraparound=list(named.wraparound),
                    link_bandwidth_bytes_per_s=bandwidth,
                    hop_latency_s=latency,
                    chip=named.chip,
                    name=named.name,
                )
            )
        else:
            if "shape" not in topo:
                raise FlowFileError(
                    "topology needs 'shape' (e.g. [4, 4]) or 'slice' (e.g. \"v5e:4x4\")"
                )
            for key, value in (("link_bandwidth", bandwidth), ("hop_latency", latency)):
                if value is None:
                    raise FlowFileError(f"topology.{key} is missing; e.g. {_EXAMPLE}")
            shape = topo["shape"]
            if not isinstance(shape, list):
                raise FlowFileError(
                    f"topology.shape must be a list of 1-3 positive ints, got {json.dumps(shape)}"
                )
            slice_ = make_slice(
                shape,
                wraparound=False if wrap is None else wrap,
                link_bandwidth_bytes_per_s=bandwidth,
                hop_latency_s=latency,
            )
    except FlowFileError:
        raise
    except SimError as exc:
        raise FlowFileError(f"topology: {exc}") from None
    order = _routing(topo.get("routing", _AXES[: slice_.num_dims]), slice_.num_dims)
    return slice_, order


def _plain_number(value: object) -> bool:
    return (type(value) is float and 0.0 <= value < math.inf) or (
        type(value) is int and 0 <= value <= _EXACT_INT
    )


def _plain_coord(value: object, shape: tuple[int, ...]) -> bool:
    if type(value) is not list or len(value) != len(shape):
        return False
    for c, n in zip(value, shape, strict=True):
        if type(c) is not int or not 0 <= c < n:
            return False
    return True


def _plain_flow(item: Any, shape: tuple[int, ...]) -> Flow | None:
    """``item`` as a :class:`Flow` when it is plainly valid, else ``None``.

    The common case, decided in a few type checks: a dict with known fields,
    a non-empty id, coordinates of ints on the mesh, finite non-negative
    numbers, ``after`` a list of strings. Anything else (including every
    error) goes through the field-by-field checks, which name the problem.
    """
    if type(item) is not dict or not _REQUIRED_KEYS <= item.keys() <= _FLOW_KEY_SET:
        return None
    flow_id, src, dst, size = item["id"], item["src"], item["dst"], item["bytes"]
    start, after = item.get("start", 0.0), item.get("after", [])
    if (
        type(flow_id) is not str
        or not flow_id
        or not _plain_coord(src, shape)
        or not _plain_coord(dst, shape)
        or not _plain_number(size)
        or not _plain_number(start)
        or type(after) is not list
        or not all(type(a) is str for a in after)
    ):
        return None
    return Flow(
        flow_id,
        tuple(src),
        tuple(dst),
        float(size),
        float(start),
        tuple(after),
    )


def _plain_numbers(values: list[Any]) -> bool:
    """:func:`_plain_number` of every value, by the list (C loops, no call per value)."""
    kinds = set(map(type, values))
    if not kinds <= {float, int}:
        return False
    floats = values
    if int in kinds:
        ints = [v for v in values if type(v) is int]
        if min(ints) < 0 or max(ints) > _EXACT_INT:
            return False
        floats = [v for v in values if type(v) is float]
    return not floats or (all(map(math.isfinite, floats)) and min(floats) >= 0.0)


def _plain_flows(items: list[Any], shape: tuple[int, ...]) -> list[Flow] | None:
    """:func:`_plain_flow` of every item when all are plainly valid, else ``None``.

    The same checks field by field over the whole list at once (sets of types,
    minima and maxima), without a Python call per flow: a third of
    parsing 10,000 flows one by one.
    """
    if not set(map(type, items)) <= {dict}:
        return None
    keys = list(map(dict.keys, items))
    if not all(map(_REQUIRED_KEYS.issubset, keys)) or not all(map(_FLOW_KEY_SET.issuperset, keys)):
        return None
    ids = list(map(itemgetter("id"), items))
    srcs, dsts = list(map(itemgetter("src"), items)), list(map(itemgetter("dst"), items))
    sizes = list(map(itemgetter("bytes"), items))
    starts = list(map(dict.get, items, repeat("start"), repeat(0.0)))
    afters = list(map(dict.get, items, repeat("after"), repeat(_NO_AFTER)))
    if (
        not set(map(type, ids)) <= {str}
        or not all(ids)
        or not all_plain(srcs, shape, list)
        or not all_plain(dsts, shape, list)
        or not _plain_numbers(sizes)
        or not _plain_numbers(starts)
        or not set(map(type, afters)) <= {list}
        or not set(map(type, chain.from_iterable(afters))) <= {str}
    ):
        return None
    return list(
        map(
            Flow,
            ids,
            map(tuple, srcs),
            map(tuple, dsts),
            map(float, sizes),
            map(float, starts),
            map(tuple, afters),
        )
    )


def _checked_flow(item: Any, k: int, slice_: Slice) -> Flow:
    """``flows[k]`` checked field by field: a :class:`Flow`, or an error naming the field."""
    where = f"flows[{k}]"
    obj = _object(item, where, _FLOW_KEYS)
    for key in ("id", "src", "dst", "bytes"):
        if key not in obj:
            raise FlowFileError(f"{where} is missing field {key!r}; e.g. {_EXAMPLE}")
    flow_id = obj["id"]
    if not isinstance(flow_id, str) or not flow_id:
        raise FlowFileError(f"{where}.id must be a non-empty string, got {json.dumps(flow_id)}")
    where = f"flow {flow_id!r}"
    after = obj.get("after", [])
    if not isinstance(after, list) or not all(isinstance(a, str) for a in after):
        raise FlowFileError(f"{where}: 'after' must be a list of ids, got {json.dumps(after)}")
    return Flow(
        id=flow_id,
        src=_coord(obj["src"], f"{where}: src", slice_),
        dst=_coord(obj["dst"], f"{where}: dst", slice_),
        size_bytes=_number(obj["bytes"], f"{where}: bytes"),
        start_s=_number(obj.get("start", 0.0), f"{where}: start"),
        after=tuple(after),
    )


def parse_flow_document(doc: Any) -> tuple[Slice, list[Flow], tuple[int, ...]]:
    """Check a decoded flow document; return the slice, flows and routing order."""
    top = _object(doc, "the file", ("topology", "flows"))
    for key in ("topology", "flows"):
        if key not in top:
            raise FlowFileError(f"missing top-level field {key!r}; e.g. {_EXAMPLE}")
    slice_, order = _topology(top["topology"])
    if not isinstance(top["flows"], list):
        raise FlowFileError(f"'flows' must be a list of flow objects; e.g. {_EXAMPLE}")
    shape = slice_.shape
    flows = _plain_flows(top["flows"], shape)
    if flows is None:  # one by one: the first flow that is not plain is checked field by field
        flows = [
            _plain_flow(item, shape) or _checked_flow(item, k, slice_)
            for k, item in enumerate(top["flows"])
        ]
    return slice_, flows, order


def flow_document(
    slice_: Slice, flows: list[Flow], routing_order: tuple[int, ...]
) -> dict[str, Any]:
    """The flow document that :func:`parse_flow_document` reads back to these flows on a
    slice of the same shape, wrap-around, link numbers and routing (written with
    ``shape``, whatever named the slice).

    >>> doc = {"topology": {"slice": "v5e:2x2"},
    ...        "flows": [{"id": "a", "src": [0, 0], "dst": [1, 1], "bytes": 8}]}
    >>> again = parse_flow_document(flow_document(*parse_flow_document(doc)))
    >>> again[1] == parse_flow_document(doc)[1], again[0].shape, again[2]
    (True, (2, 2), (0, 1))
    """
    return {
        "topology": {
            "shape": list(slice_.shape),
            "wraparound": list(slice_.wraparound),
            "link_bandwidth": slice_.link_bandwidth_bytes_per_s,
            "hop_latency": slice_.hop_latency_s,
            "routing": "".join(_AXES[i] for i in routing_order),
        },
        "flows": [
            {
                "id": f.id, "src": list(f.src), "dst": list(f.dst), "bytes": f.size_bytes,
                "start": f.start_s, "after": list(f.after),
            }
            for f in flows
        ],
    }  # fmt: skip


def replay(doc: Any) -> dict[str, Any]:
    """Simulate a decoded flow document and build the output document."""
    slice_, flows, order = parse_flow_document(doc)
    nodes: list[Flow | Compute] = list(flows)
    # simulate()'s numbers, read off the core's arrays (every node is a flow):
    # its per-flow and per-link records would cost more than this whole loop.
    problem, out = run_nodes(slice_, nodes, routing_order=order)
    finish = out.finish_s
    return {
        "flows": {
            fid: {"start": start, "finish": end}
            for fid, start, end in zip(problem.ids, out.release_s, finish, strict=True)
        },
        "makespan": float(max(finish, default=0.0)),
    }


def _json_float(x: float) -> str:
    # What json.dumps writes for a float (its default allow_nan=True).
    if x != x:
        return "NaN"
    if x in (math.inf, -math.inf):
        return "Infinity" if x > 0 else "-Infinity"
    return float.__repr__(x)


_FLOW_TEXT = '    %s: {\n      "start": %r,\n      "finish": %r\n    }'


def format_output(output: dict[str, Any]) -> str:
    """``json.dumps(output, indent=2) + "\\n"`` for :func:`replay`'s output, written directly.

    The same text byte for byte (``tests/sim/test_cli.py`` compares them),
    without the pure-Python encoder ``json`` uses whenever it indents: on
    10,000 flows that encoder costs a quarter of the engine's time.
    """
    flows = output["flows"]
    if not flows:
        return json.dumps(output, indent=2) + "\n"
    key = json.encoder.encode_basestring_ascii
    times = list(flows.values())
    starts, finishes = [v["start"] for v in times], [v["finish"] for v in times]
    if all(map(math.isfinite, starts)) and all(map(math.isfinite, finishes)):
        # Finite floats print as repr, so %-formatting does them in C, and
        # _json_float (a call per number) is only for the odd NaN or infinity.
        body = ",\n".join(
            map(_FLOW_TEXT.__mod__, zip(map(key, flows), starts, finishes, strict=True))
        )
    else:
        body = ",\n".join(
            f'    {key(fid)}: {{\n      "start": {_json_float(v["start"])},\n'
            f'      "finish": {_json_float(v["finish"])}\n    }}'
            for fid, v in flows.items()
        )
    makespan = _json_float(output["makespan"])
    return f'{{\n  "flows": {{\n{body}\n  }},\n  "makespan": {makespan}\n}}\n'


def read_flow_file(path: str | Path) -> Any:
    """Read and decode ``path`` as JSON (FlowFileError on any failure)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FlowFileError(f"flow file {str(path)!r} does not exist") from None
    except IsADirectoryError:
        raise FlowFileError(f"flow file {str(path)!r} is a directory, not a JSON file") from None
    except UnicodeDecodeError as exc:
        line = exc.object[: exc.start].count(b"\n") + 1
        raise FlowFileError(
            f"flow file {str(path)!r} is not UTF-8 text: byte {exc.start}, line {line}"
        ) from None
    except OSError as exc:
        raise FlowFileError(f"cannot read flow file {str(path)!r}: {exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise FlowFileError(
            f"{str(path)!r} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
