"""One option: its key, the other names it answers to, default, parser and one-line doc.

Options are read from layers (table properties, then the caller's options; a later layer overrides
an earlier one). Within one layer an option may be given under its key and an alias (a Hudi 1.x
``hoodie.clean.*`` name, a Flink name): equal values are fine, different ones are refused, since
neither engine documents which would win. A blank or ``None`` value counts as not set.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from airflow_lake_provider.lake.config.parsers import Parser
from airflow_lake_provider.lake.errors import ConfigError

T = TypeVar("T")
Layer = Mapping[str, object]


@dataclass(frozen=True)
class Option(Generic[T]):
    key: str
    default: T
    parse: Parser[T]
    doc: str
    family: str
    error: type[ConfigError] = ConfigError
    aliases: tuple[str, ...] = ()  # Hudi's other names for it (1.x renames)
    flink: tuple[str, ...] = ()  # Flink's names for it (FlinkOptions)
    # What two values are compared by, where the value read is the text as given (a list of names)
    meaning: Parser[object] | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return (self.key, *self.aliases, *self.flink)

    def find(self, *layers: Mapping[str, object]) -> tuple[str, str] | None:
        """The name and stripped raw value of the last layer that sets this option (conflicts refused)."""
        found = self._found(layers)
        return None if found is None else (found[0], found[1])

    def given_in(self, *layers: Mapping[str, object]) -> str:
        """`` (in <file>)`` when the value ``read`` takes comes from a layer that knows its file (a
        table's ``hoodie.properties``), else "": for messages about two options together."""
        found = self._found(layers)
        source = None if found is None else getattr(found[2], "source", None)
        return "" if source is None else f" (in {source})"

    def _found(self, layers: tuple[Layer, ...]) -> tuple[str, str, Layer] | None:
        for layer in reversed(layers):
            given = [(n, str(layer[n]).strip()) for n in self.names if _is_set(layer.get(n))]
            if not given:
                continue
            first = given[0]
            for other in given[1:]:
                try:
                    same = self.same(first, other)
                except ConfigError as exc:
                    raise _named(exc, layer) from None
                if not same:
                    raise _named(
                        self.error(
                            f"{first[0]}={first[1]!r} and {other[0]}={other[1]!r} set the same option "
                            "to different values: give one"
                        ),
                        layer,
                    )
            return (*first, layer)
        return None

    def same(self, given: tuple[str, str], other: tuple[str, str]) -> bool:
        """Whether two (name, raw value) pairs of this option mean the same (``3`` and ``03``); a
        value its parser refuses raises that refusal."""
        parse = self.meaning or self.parse
        return parse(other[0], other[1].strip(), self.error) == parse(given[0], given[1].strip(), self.error)

    def read(self, *layers: Mapping[str, object]) -> T:
        """The typed value from ``layers`` (later ones override earlier), or the default. A refused
        value of a layer that knows its file (``hoodie.properties``: a ``source``) names the file."""
        found = self._found(layers)
        if found is None:
            return self.default
        try:
            return self.parse(found[0], found[1], self.error)
        except ConfigError as exc:
            raise _named(exc, found[2]) from None


class NamedLayer(dict[str, str]):
    """Options read from one named place (a connection's extra): a refusal of a value names it, as
    one read from a table's ``hoodie.properties`` names the file."""

    def __init__(self, values: Mapping[str, str], source: str) -> None:
        super().__init__(values)
        self.source = source


def _named(exc: ConfigError, layer: Mapping[str, object]) -> ConfigError:
    """``exc`` led by the file ``layer`` was read from, when it knows one (a table's properties)."""
    source = getattr(layer, "source", None)
    return exc if source is None else type(exc)(f"{source}: {exc}")


def _is_set(value: object) -> bool:
    return value is not None and str(value).strip() != ""
