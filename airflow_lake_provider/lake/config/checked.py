"""Parsers that check a value on its own as the service reading it does (compaction strategies,
partition-commit policies, a success file's name, a time zone, bloom filter settings). The registry
reads every option a caller gives with its parser, also in an action that does not read the option,
so a value the next compaction or commit would refuse is refused by every action. Checks of several
options together (archival's min < max, a bloom filter's size) stay with the service that reads them."""

from __future__ import annotations

import re
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from airflow_lake_provider.lake.config.parsers import JAVA_INT_MAX, integer, number
from airflow_lake_provider.lake.config.values import PolicyKind
from airflow_lake_provider.lake.errors import ConfigError

# -- compaction strategies ------------------------------------------------------------------------
# Normalised strategy names (Hudi's class names and short forms) -> the kind of strategy they build.
_STRATEGY_KINDS = {
    "logfilesize": "logfilesize",
    "logfilenum": "logfilenum",
    "logfilecount": "logfilenum",
    "boundedio": "boundedio",
    "day": "day",
    "daybasedandboundedio": "dayio",
    "dayandboundedio": "dayio",
    "boundedpartitionaware": "boundedpartitionaware",
    "unboundedpartitionaware": "unboundedpartitionaware",
    "unbounded": "unbounded",
    "partitionregex": "partitionregex",
}
_KNOWN_STRATEGIES = (
    "LogFileSizeBased, LogFileNumBased, BoundedIO, DayBased, DayBasedAndBoundedIO, "
    "BoundedPartitionAware, UnBoundedPartitionAware, UnBounded, PartitionRegexBased"
)


def normalize_strategy_name(name: str) -> str:
    """``org.apache...LogFileSizeBasedCompactionStrategy`` and ``log_file_size`` both give ``logfilesize``."""
    short = name.strip().rsplit(".", 1)[-1].lower()
    short = re.sub(r"[^a-z0-9]", "", short)
    for suffix in ("compactionstrategy", "strategy"):
        short = short.removesuffix(suffix)
    return short.removesuffix("based")


def strategy_kinds(key: str, raw: str, error: type[ConfigError]) -> list[str]:
    """The kinds of the strategies ``raw`` names (comma-joined), each checked."""
    names = [n for n in raw.split(",") if n.strip()]
    if not names:
        raise error(f"{key}={raw!r} names no strategy")
    kinds = []
    for name in names:
        kind = _STRATEGY_KINDS.get(normalize_strategy_name(name))
        if kind is None:
            raise error(f"{key}: unknown strategy {name.strip()!r} (known: {_KNOWN_STRATEGIES})")
        kinds.append(kind)
    return kinds


def strategies(key: str, raw: str, error: type[ConfigError]) -> str:
    strategy_kinds(key, raw, error)
    return raw


# -- partition commit -----------------------------------------------------------------------------
def policy_kinds(key: str, raw: str, error: type[ConfigError]) -> tuple[PolicyKind, ...]:
    """``success-file,metastore`` -> kinds in the order given (applied in that order), repeats once."""
    names = [p.strip().lower() for p in str(raw).split(",") if p.strip()]
    if not names:
        raise error(f"{key}={raw!r} names no policy")
    kinds: list[PolicyKind] = []
    for name in names:
        try:
            kind = PolicyKind(name)
        except ValueError:
            known = ", ".join(k.value for k in PolicyKind)
            raise error(f"{key}: unknown policy {name!r} (known: {known})") from None
        if kind not in kinds:
            kinds.append(kind)
    return tuple(kinds)


def policies(key: str, raw: str, error: type[ConfigError]) -> str:
    policy_kinds(key, raw, error)
    return raw


# Hudi's base and log file formats, and parquet directories' files: data, whatever the rest of the name.
DATA_SUFFIXES = (".parquet", ".orc", ".hfile", ".avro")


def success_file_name(key: str, raw: str, error: type[ConfigError]) -> str:
    """``raw`` if a success file may take it: a plain name, not hidden, not a data file's."""
    if not raw or "/" in raw or "\\" in raw or "\x00" in raw or raw in (".", ".."):
        raise error(f"{key}={raw!r} is not a plain file name")
    if raw.startswith("."):
        raise error(
            f"{key}={raw!r} is a hidden name, as Hudi's own files in a partition are "
            "(.hoodie_partition_metadata, log files .<fileId>_<instant>.log.<n>): choose another, "
            "e.g. _SUCCESS"
        )
    if raw.lower().endswith(DATA_SUFFIXES):
        raise error(
            f"{key}={raw!r} is the name of a data file ({', '.join(DATA_SUFFIXES)}): "
            "choose another, e.g. _SUCCESS"
        )
    return raw


def time_zone(key: str, raw: str, error: type[ConfigError]) -> str:
    try:
        ZoneInfo(raw)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a folder of zones, a name too long
        raise error(f"{key}={raw!r} is not a known time zone") from None
    return raw


def extractor_kind(key: str, raw: str, error: type[ConfigError]) -> str:
    kind = raw.lower()
    if kind not in ("default", "custom"):
        raise error(f"{key}={kind!r} is not default or custom")
    return kind


# Java DateTimeFormatter letters read as strptime's (the common date/time subset).
_JAVA_LETTERS = {"yyyy": "%Y", "MM": "%m", "dd": "%d", "HH": "%H", "mm": "%M", "ss": "%S"}


def strptime_format(key: str, formatter: str, error: type[ConfigError]) -> str:
    """A Java date pattern (``yyyyMMdd HH``) as strptime's; a letter we do not know, or a field given
    twice (strptime cannot read one field twice), is refused."""
    out: list[str] = []
    i = 0
    while i < len(formatter):
        java = next((j for j in _JAVA_LETTERS if formatter.startswith(j, i)), None)
        if java is not None:
            if _JAVA_LETTERS[java] in out:
                raise error(f"{key}={formatter!r}: pattern field {java!r} is given more than once")
            out.append(_JAVA_LETTERS[java])
            i += len(java)
            continue
        ch = formatter[i]
        if ch.isalpha():
            known = ", ".join(_JAVA_LETTERS)
            raise error(f"{key}={formatter!r}: pattern letter {ch!r} is not supported (use {known})")
        out.append("%%" if ch == "%" else ch)
        i += 1
    return "".join(out)


def time_formatter(key: str, raw: str, error: type[ConfigError]) -> str:
    strptime_format(key, raw, error)
    return raw


# -- bloom filters (Hudi reads their sizes as Java ints) ------------------------------------------
def bloom_entries(key: str, raw: str, error: type[ConfigError]) -> int:
    value = integer(None)(key, raw, error)
    if value <= 0:
        raise error(f"{key} must be positive, got {value}")
    return bloom_max_entries(key, raw, error)


def bloom_max_entries(key: str, raw: str, error: type[ConfigError]) -> int:
    value = integer(None)(key, raw, error)
    if value > JAVA_INT_MAX:
        raise error(f"{key} must be at most {JAVA_INT_MAX}, got {value}")
    return value


def bloom_fpp(key: str, raw: str, error: type[ConfigError]) -> float:
    value = number(None)(key, raw, error)
    if not 0.0 < value < 1.0:  # also refuses NaN
        raise error(f"{key} must be in (0, 1), got {value}")
    return value


def bloom_filter_type(key: str, raw: str, error: type[ConfigError]) -> str:
    code = raw.upper()
    if code not in ("SIMPLE", "DYNAMIC_V0"):
        raise error(f"{key} must be SIMPLE or DYNAMIC_V0, got {code!r}")
    return code
