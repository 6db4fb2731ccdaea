"""What a chip-hour costs, per TPU generation: a sourced table, overridable by a file.

The shipped table is ``aoizora/serving/prices.toml``: per generation ``usd_per_chip_hour``
with its ``basis`` (on-demand, commitment, estimate) and ``source``. A file given with
``--prices FILE`` has the same form; its generations replace the shipped ones, the
others stay (``source`` and ``basis`` may be left out there: they default to the file).

    >>> table = load_prices()
    >>> table.price("v6e").usd_per_chip_hour, table.slice_usd_per_hour("v6e", 8)
    (2.7, 21.6)
    >>> table.price("v9")
    Traceback (most recent call last):
    ...
    aoizora.errors.ServingError: no chip-hour price for generation 'v9'; ...
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aoizora.errors import ServingError

__all__ = ["PRICES_FILE", "ChipPrice", "PriceTable", "load_prices"]

PRICES_FILE = Path(__file__).with_name("prices.toml")


@dataclass(frozen=True)
class ChipPrice:
    """One generation's price of a chip for an hour, its basis and its source."""

    generation: str
    usd_per_chip_hour: float
    basis: str
    source: str

    def to_json(self) -> dict[str, Any]:
        return {
            "usd_per_chip_hour": self.usd_per_chip_hour,
            "basis": self.basis,
            "source": self.source,
        }


@dataclass(frozen=True)
class PriceTable:
    """Prices by generation (:func:`load_prices`)."""

    prices: tuple[ChipPrice, ...]
    files: tuple[str, ...]

    def price(self, generation: str) -> ChipPrice:
        for p in self.prices:
            if p.generation == generation:
                return p
        known = ", ".join(p.generation for p in self.prices)
        raise ServingError(
            f"no chip-hour price for generation {generation!r}; the table has {known} "
            f"({' + '.join(self.files)}); give one with --prices FILE, e.g. a TOML file with "
            f"[{generation}] usd_per_chip_hour = 2.5"
        )

    def slice_usd_per_hour(self, generation: str, num_chips: int) -> float:
        """The hourly price of a slice of ``num_chips`` chips."""
        return self.price(generation).usd_per_chip_hour * num_chips


def _read(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise ServingError(f"cannot read prices file {str(path)!r}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ServingError(f"prices file {str(path)!r} is not valid TOML: {exc}") from None


def _entry(generation: str, value: Any, path: Path) -> ChipPrice:
    example = f"[{generation}] usd_per_chip_hour = 2.5"
    if not isinstance(value, Mapping):
        raise ServingError(f"prices file {str(path)!r}: {generation!r} must be a table, e.g. "
                           f"{example}")  # fmt: skip
    unknown = sorted(set(value) - {"usd_per_chip_hour", "basis", "source"})
    price = value.get("usd_per_chip_hour")
    number = isinstance(price, int | float) and not isinstance(price, bool)
    usd = float(price) if number else math.nan  # type: ignore[arg-type]
    if unknown or not math.isfinite(usd) or usd <= 0:
        raise ServingError(
            f"prices file {str(path)!r}: [{generation}] needs a positive usd_per_chip_hour "
            f"(and optional basis, source; got {dict(value)!r}), e.g. {example}"
        )
    return ChipPrice(
        generation=generation,
        usd_per_chip_hour=usd,
        basis=str(value.get("basis", "given")),
        source=str(value.get("source", f"--prices {path}")),
    )


def load_prices(override: str | Path | None = None) -> PriceTable:
    """The shipped table, with the generations ``override`` names replaced by its prices."""
    table = {g: _entry(g, v, PRICES_FILE) for g, v in _read(PRICES_FILE).items()}
    files = [str(PRICES_FILE.name)]
    if override is not None:
        path = Path(override)
        given = _read(path)
        if not given:
            raise ServingError(
                f"prices file {str(path)!r} names no generation; e.g. [v6e] usd_per_chip_hour = 2.5"
            )
        table.update({g: _entry(g, v, path) for g, v in given.items()})
        files.append(str(path))
    return PriceTable(prices=tuple(table[g] for g in sorted(table)), files=tuple(files))
