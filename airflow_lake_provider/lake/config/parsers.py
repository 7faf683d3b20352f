"""Parsers of option values: each takes the key it read, the stripped text and the error to raise,
and names both key and value when it refuses."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from enum import Enum
from typing import TypeVar

from airflow_lake_provider.lake.errors import ConfigError

T = TypeVar("T")
E = TypeVar("E", bound=Enum)
Parser = Callable[[str, str, type[ConfigError]], T]

# Hudi reads its integer options as Java ints (a few as longs): a larger value is refused there, and here.
JAVA_INT_MAX = 2**31 - 1
JAVA_LONG_MAX = 2**63 - 1
# What Java's Integer.parseInt reads: a sign and ASCII digits (Python's int() also takes ``1_000``
# and other scripts' digits, and refuses over 4,300 digits with its own error); 40 is past any Java type.
_WHOLE = re.compile(r"[+-]?[0-9]{1,40}")


def whole_number(raw: str) -> int | None:
    """``raw`` as Java reads a whole number (at most 40 digits: far past any Java type), or None."""
    return int(raw) if _WHOLE.fullmatch(raw) else None


def boolean(key: str, raw: str, error: type[ConfigError]) -> bool:
    """The one boolean parser: ``true``/``false`` in any case (as Java's ``Boolean.parseBoolean``
    reads them), anything else refused rather than read as false."""
    text = raw.strip().lower()
    if text not in ("true", "false"):
        raise error(f"{key}={raw!r} is not true or false")
    return text == "true"


def text(key: str, raw: str, error: type[ConfigError]) -> str:
    return raw


def integer(minimum: int | None, maximum: int | None = None) -> Parser[int]:
    def parse(key: str, raw: str, error: type[ConfigError]) -> int:
        value = whole_number(raw)
        if value is None:
            raise error(f"{key}={raw!r} is not a whole number")
        if minimum is not None and value < minimum:
            raise error(f"{key}={value} must be at least {minimum}")
        if maximum is not None and value > maximum:
            raise error(f"{key}={value} must be at most {maximum}")
        return value

    return parse


# What Java's Double.parseDouble reads in decimal (Python's float() also takes ``1_000``, ``inf``).
_DECIMAL = re.compile(r"[+-]?(?:NaN|Infinity|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)[fFdD]?")


def number(minimum: float | None) -> Parser[float]:
    def parse(key: str, raw: str, error: type[ConfigError]) -> float:
        if not _DECIMAL.fullmatch(raw):
            raise error(f"{key}={raw!r} is not a number")
        value = float(raw.rstrip("fFdD").replace("Infinity", "inf"))
        if minimum is not None and not value >= minimum:  # also refuses NaN
            raise error(f"{key}={raw} must be a number of at least {minimum}")
        return value

    return parse


def choice(kind: type[E], upper: bool = True) -> Parser[E]:
    """A member of ``kind`` by value (upper- or lower-cased first, as Hudi and Flink spell them)."""

    def parse(key: str, raw: str, error: type[ConfigError]) -> E:
        try:
            return kind(raw.upper() if upper else raw.lower())
        except ValueError:
            names = ", ".join(str(m.value) for m in kind)
            raise error(f"{key}={raw!r} is not one of {names}") from None

    return parse


def regex(key: str, raw: str, error: type[ConfigError]) -> str:
    try:
        re.compile(raw)
    except re.error as exc:
        raise error(f"{key}={raw!r} is not a valid regex: {exc}") from None
    except (OverflowError, RecursionError):  # a repeat count or a nesting past what re can compile
        raise error(f"{key}={raw!r} is not a regex this engine can compile (too large or too deep)") from None
    return raw


# Flink's duration units (TimeUtils.parseDuration); a bare number is milliseconds, as there.
_UNITS = {
    **dict.fromkeys(("ms", "milli", "millis", "millisecond", "milliseconds"), 0.001),
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1.0),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 60.0),
    **dict.fromkeys(("h", "hour", "hours"), 3600.0),
    **dict.fromkeys(("d", "day", "days"), 86400.0),
}
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*")
# Delays beyond this cannot be added to a time without leaving the calendar: refused up front.
LONGEST_DURATION = dt.timedelta(days=365 * 1000)


def duration(key: str, raw: object, error: type[ConfigError]) -> dt.timedelta:
    """A Flink duration (``0 s``, ``1 h``, ``30min``, ``1 d``; a bare number is ms) or a timedelta."""
    if isinstance(raw, dt.timedelta):
        if raw < dt.timedelta(0):
            raise error(f"{key}={raw} must not be negative")
        return raw
    value = str(raw)
    match = _DURATION.fullmatch(value)
    unit = match.group(2).lower() if match else ""
    if match is None or (unit and unit not in _UNITS):
        raise error(f"{key}={value!r} is not a duration such as '0 s', '30 min', '1 h' or '1 d'")
    try:
        delay = dt.timedelta(seconds=float(match.group(1)) * _UNITS[unit or "ms"])
    except OverflowError:
        raise error(f"{key}={value!r} is longer than any date range") from None
    if delay > LONGEST_DURATION:
        raise error(f"{key}={value!r} is longer than {LONGEST_DURATION.days} days")
    return delay


_SIZE = re.compile(r"\s*(\d+)\s*([a-zA-Z]*)\s*")
_SIZE_UNITS = {"": 1, "b": 1, "kb": 1024, "k": 1024, "mb": 1024**2, "m": 1024**2, "gb": 1024**3, "g": 1024**3}


def size(key: str, raw: object, error: type[ConfigError]) -> int:
    """A memory size as Flink writes it (``128mb``, ``1 gb``, ``65536``), in bytes."""
    match = _SIZE.fullmatch(str(raw))
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _SIZE_UNITS or int(match.group(1)) <= 0:
        raise error(f"{key}={raw!r} is not a positive size such as '128mb' or '1 gb'")
    return int(match.group(1)) * _SIZE_UNITS[unit]
