"""The ``files`` base files of Hudi's metadata table (MDT): which one an MDT writer takes the record
schema and HFile dialect from (the newest that reads whole, not a pending instant's)."""

from __future__ import annotations

import logging
from collections.abc import Container, Iterable

from airflow_lake_provider.lake.errors import CorruptDataFileError
from airflow_lake_provider.lake.format.hfile import HFile, read_hfile
from airflow_lake_provider.lake.storage import Storage
from airflow_lake_provider.lake.table.metadata.files import FILES_GROUP, FILES_PARTITION
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.layouts import TimelineLayout

log = logging.getLogger(__name__)

_INFOS: dict[tuple[str, int], HFile] = {}  # (base file URI, size) -> its file info (a bounded few)


def files_bases(storage: Storage, pending: Container[str] = ()) -> list[str]:
    """The ``files`` base files of the MDT at ``storage``, newest (by instant) first, but those of
    the ``pending`` instants: a crashed compaction's base files belong to no reader until it
    completes, and one a Java writer died writing is partial."""
    return sorted(
        (
            n
            for n in storage.list_names(FILES_PARTITION)
            if n.startswith(FILES_GROUP)
            and n.endswith(".hfile")
            and n.removesuffix(".hfile").rsplit("_", 1)[-1] not in pending
        ),
        key=lambda n: n.rsplit("_", 1)[-1],
        reverse=True,
    )


def newest_readable(storage: Storage, names: Iterable[str], skipped: list[str]) -> tuple[str, HFile] | None:
    """The first of ``names`` (``files`` base files) that reads as an HFile: the newest may be a
    pending compaction's, cut short by a writer that died (the timeline is not read for this). Its
    blocks are not read: only its file info (the record schema) and settings are wanted. Why each
    unreadable one was skipped is added to ``skipped`` (and logged if one reads)."""
    unreadable: list[str] = []
    for name in names:
        rel = f"{FILES_PARTITION}/{name}"
        try:
            found = rel, _base_info(storage, rel)
        except CorruptDataFileError as exc:
            unreadable.append(str(exc))
            continue
        for reason in unreadable:
            log.warning("skipped for the metadata table's record schema: %s", reason)
        return found
    skipped.extend(unreadable)
    return None


def _base_info(storage: Storage, rel: str) -> HFile:
    """The file info and settings of the ``files`` base file ``rel``, read once per process and
    size (a size request, not a read of the whole file): a write opens the MDT several times."""
    key = storage.uri(rel), storage.size(rel)
    found = _INFOS.get(key)
    if found is None:
        found = read_hfile(storage.read(rel), key[0], info_only=True)
        if len(_INFOS) >= 64:
            _INFOS.clear()
        _INFOS[key] = found
    return found


def pending_bases(storage: Storage, layout: TimelineLayout) -> tuple[set[str], list[str]]:
    """Table version 6 (layout 1): the pending MDT instants, and why their ``files`` base files do
    not count (an initialisation or compaction a writer died in: Java writes it again). Layout 2
    (Hudi 1.x) is left as it was: there a base file is skipped only when it does not read."""
    if layout.has_completion_times:
        return set(), []
    pending = {i.timestamp for i in Timeline.load(storage, layout).instants if not i.is_completed}
    return pending, [
        f"{n}: its instant {t} is pending"
        for n in files_bases(storage)
        if (t := n.removesuffix(".hfile").rsplit("_", 1)[-1]) in pending
    ]
