"""Which option names a caller may pass: the registry's, plus Hudi's own keys, which are ignored.

Checked where a person types options (the CLI's ``--option``, an operator's ``options=``, a Spark
job's ``--option``), never on ``hoodie.properties``, whose keys are table properties. People copy
their Spark and Flink jobs' Hudi options here, so a ``hoodie.`` key Hudi documents
(``hudi_keys.txt``: every name of Hudi's configuration page, 0.15 and 1.x) is accepted and ignored,
with one warning naming the keys ignored. Any other ``hoodie.`` or ``lake.`` key is refused, naming
the nearest registered one: a misspelt ``hoodie.cleaner.commits.retained`` must not let a clean run
with the default retention. Other keys (Flink's ``write.tasks``, ``compaction.async.enabled``...) are
not ours to judge.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Mapping
from functools import cache

from airflow_lake_provider.lake.config.option import Option
from airflow_lake_provider.lake.config.registry import OPTIONS
from airflow_lake_provider.lake.errors import ConfigError

log = logging.getLogger(__name__)

CHECKED_PREFIXES = ("hoodie.", "lake.")
HUDI_KEYS_FILE = "hudi_keys.txt"
# Names neither page lists that jobs still carry: a key of Hudi 0.11-0.12, and the precombine name
# Flink SQL table definitions often give (Hudi's are hoodie.datasource.write.precombine.field and
# hoodie.table.precombine.field).
IGNORED = frozenset({"hoodie.compaction.preserve.commit.metadata", "hoodie.precombine.field"})
# Families whose older releases held keys neither page lists (``hoodie.metadata.enable.full.scan.
# log.files`` of 0.10-0.12, the metadata table's own cleaner and archival keys, Spark datasource and
# index settings of past versions) and ``hoodie.deltastreamer.``, the names ``hoodie.streamer.*``
# had before 0.14, which Hudi still reads but its page no longer shows. A key under one of them is
# accepted unless it is one slip from a registered name (``_one_slip``): what a typo looks like.
IGNORED_PREFIXES = (
    "hoodie.datasource.",
    "hoodie.deltastreamer.",
    "hoodie.table.",
    "hoodie.write.",
    "hoodie.upsert.",
    "hoodie.insert.",
    "hoodie.bulkinsert.",
    "hoodie.delete.",
    "hoodie.parquet.",
    "hoodie.logfile.",
    "hoodie.memory.",
    "hoodie.embed.",
    "hoodie.filesystem.",
    "hoodie.metadata.",
    "hoodie.index.",
    "hoodie.bloom.",
)
BY_NAME: dict[str, Option] = {name: option for option in OPTIONS for name in option.names}
_REGISTERED = sorted(BY_NAME)


@cache
def hudi_keys() -> tuple[frozenset[str], tuple[str, ...]]:
    """Hudi's documented key names, and the families with a variable last part (``....``).

    Read once, the first time options are checked: importing an operator does not pay for it.
    (Through the package's loader with ``pkgutil``: importing ``importlib.resources`` alone costs
    more than reading the file.)
    """
    import pkgutil

    data = pkgutil.get_data(__package__, HUDI_KEYS_FILE)
    if data is None:  # pragma: no cover - a loader that cannot read package data
        raise ConfigError(f"{HUDI_KEYS_FILE} is missing from {__package__}")
    text = data.decode("utf-8")
    names = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    return frozenset(n for n in names if not n.endswith(".")), tuple(n for n in names if n.endswith("."))


def is_hudi_key(name: str) -> bool:
    """``name`` is a configuration key Hudi documents (0.15 or 1.x)."""
    keys, families = hudi_keys()
    return name in keys or name.startswith(families)


def _one_slip(a: str, b: str) -> bool:
    """``a`` is ``b`` with one letter added, dropped, changed, or two neighbours swapped: how an
    ignored-prefix key is taken for a misspelt registered one. (A similarity ratio is not enough:
    the long shared prefix made Hudi's own ``hoodie.datasource.hive_sync.enable`` a near miss of
    ``...hive_sync.table``.)"""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    i = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    if len(a) != len(b):
        return a[i + (len(a) > len(b)) :] == b[i + (len(b) > len(a)) :]
    return a[i + 1 :] == b[i + 1 :] or (a[i : i + 2] == b[i : i + 2][::-1] and a[i + 2 :] == b[i + 2 :])


def _ignored(name: str) -> bool:
    """A ``hoodie.`` key to accept and ignore: Hudi's own (even one slip from a registered name:
    it is then a different, real setting), or one under an ignored prefix that is no typo."""
    if name in IGNORED or is_hudi_key(name):
        return True
    return name.startswith(IGNORED_PREFIXES) and not any(_one_slip(name, known) for known in _REGISTERED)


def _variant_of_ours(name: str) -> bool:
    """A key outside the checked prefixes that is still meant as one of ours: a checked key in
    another case or with spaces around it (``HOODIE.CLEANER.COMMITS.RETAINED``: Hudi's keys are
    case-sensitive, so nothing would read it), or one slip from a registered Flink name
    (``clean.retain_commit``). Passed over, the clean would run with the default retention."""
    folded = name.strip().lower()
    if folded.startswith(CHECKED_PREFIXES) or folded in BY_NAME:
        return True
    return any(_one_slip(folded, known) for known in _REGISTERED)


def _nearest(name: str, names: list[str]) -> tuple[str, float] | None:
    near = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    return (near[0], difflib.SequenceMatcher(None, name, near[0]).ratio()) if near else None


def _hint(name: str) -> str:
    """The nearest registered name; or Hudi's own key when that is nearer (``hoodie.markers.type``
    is Hudi's ``hoodie.write.markers.type``, not ``hoodie.index.type``), said to be ignored here."""
    near = _nearest(name, _REGISTERED)
    hudi = _nearest(name, sorted(hudi_keys()[0]))
    if hudi and hudi[0] not in BY_NAME and (not near or hudi[1] > near[1]):
        return f"; did you mean {hudi[0]} (a Hudi option this provider ignores)?"
    return f"; did you mean {near[0]}?" if near else " (every option: docs/options.md)"


def check_options(options: Mapping[str, object]) -> None:
    """Refuse an unknown ``hoodie.``/``lake.`` key, naming the nearest registered one, and a bad
    value of a registered one; log (one warning) the Hudi keys accepted that no option here reads."""
    ignored = []
    for key in options:
        if not isinstance(key, str):  # no option reads it: its value would be dropped without a word
            raise ConfigError(f"option names are strings: {key!r}={options[key]!r}")
        name = key
        if name in BY_NAME:
            continue
        if not name.startswith(CHECKED_PREFIXES):
            if _variant_of_ours(name):
                raise ConfigError(f"unknown option {name!r}={options[key]!r}{_hint(name.strip().lower())}")
            continue
        if _ignored(name):
            ignored.append(name)
            continue
        raise ConfigError(f"unknown option {name}={options[key]!r}{_hint(name)}")
    for option in OPTIONS:
        # Every registered key's value, and its names agreeing, even where the action at hand does
        # not read it: `lake clean --option hoodie.keep.min.commits=x` ran the clean on a value that
        # the next archival refuses, and `hoodie.metadata.enable=yes` passed a success-file commit.
        option.read(options)
    if ignored:
        log.warning("ignoring Hudi options this provider does not use: %s", ", ".join(ignored))


def of_family(options: Mapping[str, object], *families: str) -> dict[str, object]:
    """The options that belong to ``families`` (registry names only)."""
    return {k: v for k, v in options.items() if str(k) in BY_NAME and BY_NAME[str(k)].family in families}
