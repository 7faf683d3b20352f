"""Which option names a caller may pass: the registry's, plus Hudi's keys this provider ignores.

Checked where a person types options (the CLI's ``--option``, an operator's ``options=``, a Spark
job's ``--option``), never on ``hoodie.properties``, whose keys are table properties. A ``hoodie.``
or ``lake.`` key is refused unless the registry knows it, it is in ``IGNORED``, or it starts with
one of ``IGNORED_PREFIXES`` (Hudi settings of writers, indexes and the metadata table that Spark jobs
pass along and the services here have no use for) and is not a near miss of a registered name.
Other keys (Flink's ``write.tasks``, ``compaction.async.enabled``...) are not ours to judge.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from airflow_lake_provider.lake.config.option import Option
from airflow_lake_provider.lake.config.registry import OPTIONS
from airflow_lake_provider.lake.errors import ConfigError

CHECKED_PREFIXES = ("hoodie.", "lake.")
# Hudi service switches with no meaning here (the services run when Airflow runs them).
IGNORED = frozenset(
    {
        "hoodie.compact.inline",
        "hoodie.compact.schedule.inline",
        "hoodie.clean.automatic",
        "hoodie.clean.async",
        "hoodie.clean.async.enabled",
        "hoodie.archive.async",
        "hoodie.archive.merge.enable",
        "hoodie.cleaner.parallelism",
        "hoodie.clean.parallelism",
        "hoodie.compaction.lazy.block.read",
        "hoodie.compaction.reverse.log.read",
        "hoodie.compaction.preserve.commit.metadata",
        "hoodie.cleaner.delete.bootstrap.base.file",
        "hoodie.clean.delete.bootstrap.base.file",
    }
)
IGNORED_PREFIXES = (
    "hoodie.datasource.",
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


def check_options(options: Mapping[str, object]) -> None:
    """Refuse an unknown ``hoodie.``/``lake.`` key, naming the nearest registered one."""
    for key in options:
        name = str(key)
        if name in BY_NAME or name in IGNORED or not name.startswith(CHECKED_PREFIXES):
            continue
        near = difflib.get_close_matches(name, _REGISTERED, n=1, cutoff=0.6)
        if name.startswith(IGNORED_PREFIXES) and not any(_one_slip(name, known) for known in _REGISTERED):
            continue
        hint = f"; did you mean {near[0]}?" if near else " (every option: docs/options.md)"
        raise ConfigError(f"unknown option {name}={options[key]!r}{hint}")


def of_family(options: Mapping[str, object], *families: str) -> dict[str, object]:
    """The options that belong to ``families`` (registry names only)."""
    return {k: v for k, v in options.items() if str(k) in BY_NAME and BY_NAME[str(k)].family in families}
