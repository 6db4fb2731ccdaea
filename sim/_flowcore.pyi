# Type stub of the compiled event core (sim/_flowcore.c); sim.engine calls it.
from collections.abc import Sequence

from sim.records import Event

VERSION: int

def run(
    capacity: Sequence[float],
    route_ptr: Sequence[int],
    route_chan: Sequence[int],
    size_bytes: Sequence[float],
    duration_s: Sequence[float],
    is_flow: Sequence[int],
    ready_s: Sequence[float],
    waiting: Sequence[int],
    child_ptr: Sequence[int],
    child_idx: Sequence[int],
    ids: list[str],
    hop_latency_s: float,
    batch_pairs: int,
    class_load: int,
    record_rates: bool,
    event_type: type[Event],
) -> tuple[
    list[float],
    list[float],
    list[float],
    list[Event],
    list[float],
    list[tuple[float, tuple[tuple[str, float], ...]]] | None,
]: ...
