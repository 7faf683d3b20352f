"""The archived timeline of layout 1 (table version 6): ``.hoodie/archived/.commits_.archive.N_<token>``
log files of ``HoodieArchivedMetaEntry`` blocks, written by the data table's archival and by the
archival of a v6 table's metadata table (``hoodie.archivelog.folder=archived`` on both)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_lake_provider.lake.errors import ArchivalError
from airflow_lake_provider.lake.storage import HOODIE_DIR
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.archived import (
    ARCHIVE_FOLDER,
    archive_file_name,
    archive_version,
    commit_metadata_record,
    encode_archive_block,
)
from airflow_lake_provider.lake.timeline.instant import Action, Instant
from airflow_lake_provider.lake.timeline.store import TimelineStore


def archive_entry(timeline: Timeline, instant: Instant) -> dict[str, Any]:
    """The ``HoodieArchivedMetaEntry`` of one completed instant, its metadata as Java archives it."""
    entry: dict[str, Any] = {
        "commitTime": instant.timestamp,
        "actionType": instant.action.value,
        "actionState": instant.state.name,
        "version": 1,
    }
    try:
        if instant.action in (Action.COMMIT, Action.DELTACOMMIT):
            entry["hoodieCommitMetadata"] = commit_metadata_record(
                timeline.read_bytes(instant), replace=False
            )
        elif instant.action is Action.REPLACECOMMIT:
            entry["hoodieReplaceCommitMetadata"] = commit_metadata_record(
                timeline.read_bytes(instant), replace=True
            )
        elif instant.action is Action.CLEAN:
            entry["hoodieCleanMetadata"] = timeline.avro_record(instant)
        elif instant.action is Action.ROLLBACK:
            entry["hoodieRollbackMetadata"] = timeline.avro_record(instant)
    except ValueError as exc:
        raise ArchivalError(f"{timeline.path_of(instant)}: cannot archive it: {exc}") from None
    return entry


def write_archive_log(
    store: TimelineStore, timeline: Timeline, instants: Sequence[Instant], batch: int
) -> str:
    """Write the completed ``instants`` (oldest first, of ``timeline``) as one new archive file of
    ``store``'s table, ``batch`` entries a block; its name. Every entry is built before any write."""
    entries = [archive_entry(timeline, i) for i in instants]
    blocks = [
        encode_archive_block(entries[k : k + batch], instants[k].timestamp)
        for k in range(0, len(entries), batch)
    ]
    versions = [archive_version(n) for n in store.storage.list_names(f"{HOODIE_DIR}/{ARCHIVE_FOLDER}")]
    name = archive_file_name(max((v for v in versions if v is not None), default=0) + 1)
    store.write_archive(name, b"".join(blocks))
    return name
