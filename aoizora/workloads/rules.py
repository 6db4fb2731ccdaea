"""Logical axis rules: which mesh axes shard a tensor dimension with a given logical name.

A :class:`Rules` value is an ordered tuple of ``(logical axis name, mesh axis names)``
pairs with the semantics of Flax's ``flax.linen.partitioning.logical_to_mesh_axes``
(also what MaxText and maxdiffusion use):

* rules are visited in order; a rule applies to the first dimension of the array
  that carries its logical name and is still unassigned;
* a rule whose mesh axes are not all still free in this array is skipped (the
  next rule for the same logical name may then apply) -- "the first still-free
  mesh axis wins";
* a rule with an empty tuple of mesh axes pins the dimension to "replicated";
* a dimension no rule matched is replicated.

There is no global rule context: every call takes its rules explicitly.

Example (maxdiffusion's Wan rules, excerpt):

    >>> r = Rules.of("md", [("activation_batch", ("data", "fsdp")),
    ...                     ("activation_length", "context"),
    ...                     ("embed", ("context", "fsdp")),
    ...                     ("heads", "tensor")])
    >>> logical_to_pspec(("activation_batch", "activation_length", None), r)
    P(('data', 'fsdp'), 'context', None)
    >>> logical_to_pspec(("embed", "heads"), r)
    P(('context', 'fsdp'), 'tensor')
    >>> logical_to_pspec(("activation_length", "embed"), r)  # context taken: embed skipped
    P('context', None)
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aoizora.errors import WorkloadError

if TYPE_CHECKING:  # imported where used: the command line reads rules before jax starts
    from jax.sharding import PartitionSpec

__all__ = [
    "LogicalAxes",
    "Rules",
    "is_logical_axes",
    "mesh_axes_of",
    "logical_to_mesh_axes",
    "logical_to_pspec",
    "sharding_degree",
    "rule_pair_from_json",
    "rule_pairs_to_json",
    "rules_to_json",
    "rules_from_json",
]

# One name (or None = never sharded) per dimension of an array.
LogicalAxes = tuple[str | None, ...]

_JSON_FORMAT = "aoizora.rules/1"


def is_logical_axes(value: object) -> bool:
    """True for a leaf of a logical-axes pytree: a tuple of ``str | None`` (``()`` for scalars).

    Use as ``is_leaf`` when mapping over a pytree of logical axes, because a
    plain tuple is otherwise a pytree node:

        >>> is_logical_axes(("batch", None)), is_logical_axes(()), is_logical_axes((1,))
        (True, True, False)
    """
    return isinstance(value, tuple) and all(e is None or isinstance(e, str) for e in value)


@dataclass(frozen=True)
class Rules:
    """An ordered tuple of ``(logical name, mesh axis names)`` pairs plus a stable name.

    ``name`` is the rules id a plan file and a :class:`~aoizora.candidates.space.Candidate`
    refer to. Build one with :meth:`of`, which also accepts a bare mesh axis
    string or ``None`` (replicated) as the right-hand side:

        >>> Rules.of("tp", [("heads", "tensor"), ("embed", None)]).pairs
        (('heads', ('tensor',)), ('embed', ()))
    """

    name: str
    pairs: tuple[tuple[str, tuple[str, ...]], ...]

    def __post_init__(self) -> None:
        if not self.name:
            raise WorkloadError("a Rules value needs a non-empty name, e.g. Rules.of('fsdp', ...)")
        for pair in self.pairs:
            ok = (
                isinstance(pair, tuple)
                and len(pair) == 2
                and isinstance(pair[0], str)
                and isinstance(pair[1], tuple)
                and all(isinstance(a, str) for a in pair[1])
            )
            if not ok:
                raise WorkloadError(
                    f"rule {pair!r} in rules {self.name!r} is not (logical name, tuple of mesh "
                    f"axis names); e.g. ('heads', ('tensor',)) -- use Rules.of to normalise"
                )
            if len(set(pair[1])) != len(pair[1]):
                raise WorkloadError(
                    f"rule {pair!r} in rules {self.name!r} names a mesh axis twice; "
                    f"e.g. ('embed', ('context', 'fsdp'))"
                )

    @classmethod
    def of(cls, name: str, pairs: Sequence[tuple[str, str | Sequence[str] | None]]) -> Rules:
        """Normalise ``(logical, "axis" | ("a", "b") | None)`` pairs into a :class:`Rules`."""
        norm: list[tuple[str, tuple[str, ...]]] = []
        for pair in pairs:
            if not isinstance(pair, Sequence) or isinstance(pair, str) or len(pair) != 2:
                raise WorkloadError(
                    f"rule {pair!r} in rules {name!r} is not a (logical name, mesh axes) pair; "
                    f"e.g. ('heads', 'tensor')"
                )
            logical, mesh = pair
            if mesh is None:
                axes: tuple[str, ...] = ()
            elif isinstance(mesh, str):
                axes = (mesh,)
            else:
                axes = tuple(mesh)
            norm.append((logical, axes))
        return cls(name=name, pairs=tuple(norm))

    def __iter__(self) -> Iterator[tuple[str, tuple[str, ...]]]:
        return iter(self.pairs)

    def __len__(self) -> int:
        return len(self.pairs)

    @property
    def mesh_axes_used(self) -> tuple[str, ...]:
        """Every mesh axis some rule names, sorted."""
        return tuple(sorted({a for _, axes in self.pairs for a in axes}))


def mesh_axes_of(rule_sets: Sequence[Rules]) -> tuple[str, ...]:
    """Every mesh axis the rule sets name, in order of first mention (rule sets in order).

    This is the mesh a workload's candidates are built over when it names none itself:

        >>> mesh_axes_of([Rules.of("a", [("batch", "dp"), ("mlp", "tp")]),
        ...               Rules.of("b", [("batch", ("dp", "sp")), ("heads", "model")])])
        ('dp', 'tp', 'sp', 'model')
    """
    seen: dict[str, None] = {}
    for rules in rule_sets:
        for _, axes in rules.pairs:
            seen.update((a, None) for a in axes)
    return tuple(seen)


def logical_to_mesh_axes(
    logical_axes: Sequence[str | None], rules: Rules
) -> tuple[tuple[str, ...] | None, ...]:
    """Flax's resolution: per dimension the mesh axes it is sharded over (``None`` = replicated).

    >>> r = Rules.of("x", [("a", "m1"), ("b", "m1"), ("b", "m2")])
    >>> logical_to_mesh_axes(("a", "b"), r)   # m1 taken by a, b falls to its 2nd rule
    (('m1',), ('m2',))
    >>> logical_to_mesh_axes(("b", "a"), r)   # rule order, not dim order, decides
    (('m2',), ('m1',))
    """
    dims = tuple(logical_axes)
    unassigned = object()
    result: list[object] = [unassigned] * len(dims)
    used: set[str] = set()
    for logical, mesh_axes in rules.pairs:
        if logical not in dims:
            continue
        pos = dims.index(logical)  # Flax: the first dimension with that name
        if result[pos] is not unassigned:
            continue
        if any(a in used for a in mesh_axes):
            continue
        result[pos] = mesh_axes if mesh_axes else None
        used.update(mesh_axes)
    out: list[tuple[str, ...] | None] = []
    for value in result:
        if value is unassigned or value is None:
            out.append(None)
        else:
            assert isinstance(value, tuple)
            out.append(value)
    return tuple(out)


def logical_to_pspec(
    logical_axes: Sequence[str | None],
    rules: Rules,
    mesh_axis_names: Sequence[str] | None = None,
    mesh_axis_sizes: Sequence[int] | Mapping[str, int] | None = None,
) -> PartitionSpec:
    """The :class:`~jax.sharding.PartitionSpec` of an array with these logical axes.

    With ``mesh_axis_names``, a rule naming an axis not in the mesh raises
    :class:`WorkloadError`. With ``mesh_axis_sizes`` (same order as the names, or a
    name -> size mapping), mesh axes of size 1 are dropped from the spec after
    resolution; they shard nothing, and dropping them makes equal shardings
    compare equal.

        >>> r = Rules.of("x", [("b", ("data", "fsdp")), ("s", "context")])
        >>> logical_to_pspec(("b", "s", None), r, ("data", "fsdp", "context"), (2, 1, 4))
        P('data', 'context', None)

    Answers are memoised (a PartitionSpec is immutable): enumerating a pod's
    candidates asks the same question of every attention kind of a sharding.
    """
    names = None if mesh_axis_names is None else tuple(mesh_axis_names)
    sizes: tuple[object, ...] | None = None
    if isinstance(mesh_axis_sizes, Mapping):
        sizes = ("by name", tuple(mesh_axis_sizes.items()))
    elif mesh_axis_sizes is not None:
        sizes = ("in order", tuple(mesh_axis_sizes))
    try:
        return _memo_pspec(tuple(logical_axes), rules, names, sizes)
    except TypeError:  # an unhashable argument: answer without the memo
        return _pspec(logical_axes, rules, mesh_axis_names, mesh_axis_sizes)


@functools.lru_cache(maxsize=1 << 16)
def _memo_pspec(
    logical_axes: tuple[str | None, ...],
    rules: Rules,
    names: tuple[str, ...] | None,
    sizes: tuple[object, ...] | None,
) -> PartitionSpec:
    given: Any = None if sizes is None else sizes[1]
    if sizes is not None and sizes[0] == "by name":
        given = dict(given)
    return _pspec(logical_axes, rules, names, given)


def _pspec(
    logical_axes: Sequence[str | None],
    rules: Rules,
    mesh_axis_names: Sequence[str] | None,
    mesh_axis_sizes: Sequence[int] | Mapping[str, int] | None,
) -> PartitionSpec:
    resolved = logical_to_mesh_axes(logical_axes, rules)
    sizes = _size_map(mesh_axis_names, mesh_axis_sizes)
    entries: list[str | tuple[str, ...] | None] = []
    for logical, axes in zip(logical_axes, resolved, strict=True):
        if axes is None:
            entries.append(None)
            continue
        if mesh_axis_names is not None:
            missing = [a for a in axes if a not in mesh_axis_names]
            if missing:
                raise WorkloadError(
                    f"rules {rules.name!r} map logical axis {logical!r} to mesh axes "
                    f"{list(missing)} not in the mesh {list(mesh_axis_names)}; use mesh axis "
                    f"names of the mesh, e.g. ({logical!r}, {mesh_axis_names[0]!r})"
                )
        kept = tuple(a for a in axes if sizes is None or sizes[a] != 1)
        if not kept:
            entries.append(None)
        elif len(kept) == 1:
            entries.append(kept[0])
        else:
            entries.append(kept)
    from jax.sharding import PartitionSpec  # here: see the TYPE_CHECKING import above

    return PartitionSpec(*entries)


def sharding_degree(spec_entry: str | tuple[str, ...] | None, sizes: Mapping[str, int]) -> int:
    """How many shards one PartitionSpec entry cuts a dimension into.

    >>> sharding_degree(("data", "context"), {"data": 2, "context": 4})
    8
    """
    if spec_entry is None:
        return 1
    if isinstance(spec_entry, str):
        return sizes[spec_entry]
    return math.prod(sizes[a] for a in spec_entry)


def _size_map(
    names: Sequence[str] | None, sizes: Sequence[int] | Mapping[str, int] | None
) -> dict[str, int] | None:
    if sizes is None:
        return None
    if isinstance(sizes, Mapping):
        return {str(k): int(v) for k, v in sizes.items()}
    if names is None or len(names) != len(sizes):
        raise WorkloadError(
            f"mesh_axis_sizes {list(sizes)} need mesh_axis_names of the same length "
            f"(got {None if names is None else list(names)}); e.g. names ('data', 'context') "
            f"with sizes (2, 4)"
        )
    return {n: int(s) for n, s in zip(names, sizes, strict=True)}


def rule_pairs_to_json(pairs: Sequence[tuple[str, tuple[str, ...]]]) -> list[list[Any]]:
    """Rule pairs as JSON lists ``[[logical name, [mesh axes...]], ...]`` (rules and plan files).

    >>> rule_pairs_to_json((("heads", ("tensor",)), ("embed", ())))
    [['heads', ['tensor']], ['embed', []]]
    """
    return [[logical, list(axes)] for logical, axes in pairs]


def rule_pair_from_json(item: object) -> tuple[str, tuple[str, ...]] | None:
    """The pair a JSON ``[logical name, [mesh axes...]]`` spells, or ``None`` if it is not one.

    The caller raises its own error (with its own context) on ``None``:

    >>> rule_pair_from_json(["heads", ["tensor"]]), rule_pair_from_json(["heads", "tensor"])
    (('heads', ('tensor',)), None)
    """
    if (
        not isinstance(item, list)
        or len(item) != 2
        or not isinstance(item[0], str)
        or not isinstance(item[1], list)
        or not all(isinstance(a, str) for a in item[1])
    ):
        return None
    return item[0], tuple(item[1])


def rules_to_json(rules: Rules) -> dict[str, Any]:
    """A JSON-ready value for a plan file (``json.dumps`` it or embed it).

    >>> rules_to_json(Rules.of("tp", [("heads", "tensor")]))
    {'format': 'aoizora.rules/1', 'name': 'tp', 'rules': [['heads', ['tensor']]]}
    """
    return {
        "format": _JSON_FORMAT,
        "name": rules.name,
        "rules": rule_pairs_to_json(rules.pairs),
    }


def rules_from_json(value: str | Mapping[str, Any]) -> Rules:
    """Inverse of :func:`rules_to_json`; accepts the dict or its ``json.dumps`` text.

    >>> r = Rules.of("tp", [("heads", "tensor"), ("embed", None)])
    >>> rules_from_json(json.dumps(rules_to_json(r))) == r
    True
    """
    data: Any = json.loads(value) if isinstance(value, str) else value
    example = '{"format": "aoizora.rules/1", "name": "tp", "rules": [["heads", ["tensor"]]]}'
    if not isinstance(data, Mapping) or data.get("format") != _JSON_FORMAT:
        raise WorkloadError(f"rules JSON must be an object with format {_JSON_FORMAT!r}: {example}")
    name = data.get("name")
    raw = data.get("rules")
    if not isinstance(name, str) or not isinstance(raw, list):
        raise WorkloadError(f"rules JSON needs a string 'name' and a list 'rules': {example}")
    pairs: list[tuple[str, tuple[str, ...]]] = []
    for item in raw:
        pair = rule_pair_from_json(item)
        if pair is None:
            raise WorkloadError(
                f"rule {item!r} in rules JSON {name!r} is not [logical name, [mesh axes]]: "
                f"{example}"
            )
        pairs.append(pair)
    return Rules(name=name, pairs=tuple(pairs))
