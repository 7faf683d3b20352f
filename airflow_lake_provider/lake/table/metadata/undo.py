"""How a kept metadata table (MDT) undoes a completed data instant that a rollback or restore takes
away.

- **forget**: remove the instant's MDT deltacommit (its timeline files and log files) while the
  instant is pending, as the undo of a failed write does. Only while nothing in the MDT came to
  depend on that deltacommit: no later MDT compaction (or log compaction, indexing) folded it into
  files it does not own, and no partition initialisation listed the instant's files.
- **correct**: otherwise (the instant older than the MDT too), the instant's MDT deltacommit stays
  (a later write may remove it as one whose data instant is gone: the correction rules either way),
  and the rollback's own MDT deltacommit,
  at the rollback's instant, records every file the rollback deletes as a deletion in ``files``, as
  Java 0.14's writer records a rollback, with the clean's ``column_stats`` records of those files
  and the ``partition_stats`` of their partitions without the instant (``rollback_index_records``).
  Hudi 1.x writes an MDT rollback instant instead, or refuses one an MDT compaction came after and
  restores the MDT; the listing and the stats are the same.
"""

from __future__ import annotations

from airflow_lake_provider.lake.file_group.file_names import LogFileName
from airflow_lake_provider.lake.table.metadata.commit import MetadataTableWriter
from airflow_lake_provider.lake.timeline.instant import Action

_SOLO = "00000000000000"  # Hudi's SOLO_COMMIT_TIMESTAMP: the MDT's own initialisation instants


def why_not_forgettable(mdt: MetadataTableWriter, instant: str) -> str | None:
    """Why the completed data instant ``instant`` cannot be undone by removing its MDT deltacommit
    (None: it can): that deltacommit must be there, completed, and no later MDT compaction (or log
    compaction, indexing) may have folded it into files it does not own."""
    timeline = mdt.timeline()
    own = [i for i in timeline.filter([Action.DELTACOMMIT]) if i.timestamp == instant]
    if not any(i.is_completed for i in own):
        return f"the metadata table has no completed deltacommit of {instant}"
    later = [
        i
        for i in timeline.instants
        if i.timestamp > instant and i.action not in (Action.DELTACOMMIT, Action.CLEAN, Action.ROLLBACK)
    ]
    if later:
        return (
            f"the metadata table's {later[0].action.value} {later[0].timestamp} came after it, and "
            "undoing it there needs a metadata-table rollback instant, which this engine does not write"
        )
    init = _initialised_after(mdt, instant)
    if init is not None:
        return (
            f"the metadata table's partition initialisation {init} completed after it (its files "
            "hold the instant's records), and undoing it there needs a metadata-table rollback "
            "instant, which this engine does not write"
        )
    return None


def _initialised_after(mdt: MetadataTableWriter, instant: str) -> str | None:
    """An MDT partition initialisation (a deltacommit at Hudi's ``0000...`` times, building the
    partition's files from a listing of the data table) that completed after data instant
    ``instant`` was requested and left files in a kept partition: those files may hold
    ``instant``'s records (None: none). Its time is before every data instant's, so only its
    completion time tells; it is no date, so it is read from the file names (``Timeline``
    leaves such names out)."""
    inits = set()
    for name in mdt.storage.list_names(mdt.store.layout.folder):
        head, _, action = name.partition(".")
        time, _, completion = head.partition("_")
        if action == Action.DELTACOMMIT.value and time.startswith(_SOLO) and completion > instant:
            inits.add(time)
    for partition in sorted(mdt.partitions & set(mdt.storage.list_dir("")[1])) if inits else ():
        for name in mdt.storage.list_names(partition):
            log_name = LogFileName.parse(name)
            t = log_name.base_instant if log_name is not None else name.rsplit("_", 1)[-1].split(".")[0]
            if t in inits:
                return t
    return None
