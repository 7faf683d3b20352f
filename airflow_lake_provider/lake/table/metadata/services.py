"""The metadata table's (MDT's) own services under the maintain policy, run after a maintained data
instant completes (a write, compaction, clean, rollback, restore or partition commit's merge of
small files; Hudi 1.x's Java writer runs them at the start of its next write,
``performTableServices``), in Java's order: a pending MDT compaction is finished, the MDT is cleaned
when due (``metadata.clean``), compacted when due (``metadata.compaction``), then its timeline
archived (``metadata.archival``).

They run under the locks every other writer of the MDT holds while it adds a deltacommit (clean,
write, compaction; taken in the order the drop takes them), so no deltacommit completes while a
compaction is planned and executed. A busy lock skips the services (the next maintained instant
runs them); the data instant stands whatever happens here.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from airflow_lake_provider.lake.config.registry import CLEAN_COMMITS_RETAINED, METADATA_COMPACT_DELTA_COMMITS
from airflow_lake_provider.lake.errors import LakeError, ServiceBusyError
from airflow_lake_provider.lake.storage import HOODIE_DIR
from airflow_lake_provider.lake.table.metadata.archival import (
    archive_metadata_table,
    metadata_archival_config,
)
from airflow_lake_provider.lake.table.metadata.clean import MAX_RETAINED, clean_metadata_table
from airflow_lake_provider.lake.table.metadata.compaction import compact_metadata_table
from airflow_lake_provider.lake.table.metadata.policy import (
    MetadataTablePolicy,
    kept_metadata_table,
    lists_files_partition,
)
from airflow_lake_provider.lake.timeline.instant import Action, State
from airflow_lake_provider.lake.timeline.store import WRITE_LOCK

if TYPE_CHECKING:
    from airflow_lake_provider.lake.table.metadata.commit import MetadataTableWriter
    from airflow_lake_provider.lake.table.table import LakeTable

log = logging.getLogger(__name__)

# Every lock under which a maintained action adds an MDT deltacommit, in ALL_SERVICE_LOCKS' order.
MDT_WRITER_LOCKS = ("clean", WRITE_LOCK, "compaction")
LOCK_WAIT_SECONDS = 5.0


def _no_fault(_point: str) -> None:
    return None


def run_metadata_table_services(
    table: LakeTable,
    options: Mapping[str, object] | None = None,
    *,
    fault: Callable[[str], None] = _no_fault,
    wait_seconds: float = LOCK_WAIT_SECONDS,
) -> str | None:
    """Run the MDT's services due, if the table keeps an MDT under the maintain policy; the MDT
    compaction instant run or finished (None: none; a clean is logged).
    ``ServiceBusyError`` when another writer holds a lock past ``wait_seconds``; any other error
    is the caller's to log."""
    layers = (table.config.properties, table.option_defaults, options or {})
    if MetadataTablePolicy.from_options(*layers) is not MetadataTablePolicy.MAINTAIN:
        return None
    # A kept MDT always lists `files` in hoodie.properties (the guard refuses one that does not): a
    # table without one is not asked for the folder again (on S3, a request per committed action);
    # a listed one is looked for once, by kept_metadata_table under the locks.
    if not lists_files_partition(table):
        return None
    max_delta_commits = METADATA_COMPACT_DELTA_COMMITS.read(*layers)
    with contextlib.ExitStack() as stack:
        for name in MDT_WRITER_LOCKS:
            stack.enter_context(table.store.exclusive(name, wait_seconds))
        mdt = kept_metadata_table(table)
        if mdt is None:
            return None
        data = functools.cache(table.timeline)  # read once, only if a step needs it (most need none)
        # Java's order: finish a pending compaction, clean, then compact when due. The MDT's
        # timeline is read again only after a step changed it (each read is a listing: on S3, a LIST).
        timeline = mdt.timeline()
        finished = None
        if timeline.filter([Action.COMPACTION], [State.REQUESTED, State.INFLIGHT]):
            finished = compact_metadata_table(table.storage, mdt, data, max_delta_commits, fault, timeline)
            timeline = mdt.timeline()
        retained = min(CLEAN_COMMITS_RETAINED.read(*layers), MAX_RETAINED)
        if clean_metadata_table(mdt, retained, fault, timeline) is not None:
            timeline = mdt.timeline()
        compacted = compact_metadata_table(table.storage, mdt, data, max_delta_commits, fault, timeline)
        if compacted is not None:
            timeline = mdt.timeline()
            sweep_temp_files(mdt)  # (seldom: leftovers are hidden from every reader meanwhile)
        archive_metadata_table(mdt, data, metadata_archival_config(*layers), timeline)
        return compacted or finished


def services_after_commit(table: LakeTable, options: Mapping[str, object] | None = None) -> str | None:
    """:func:`run_metadata_table_services` after a committed data instant: a busy lock or a failure
    is logged (the instant stands; the next one retries)."""
    try:
        return run_metadata_table_services(table, options)
    except ServiceBusyError as exc:
        log.info("the metadata table's services after the commit on %s skipped: %s", table.uri, exc)
    except LakeError as exc:
        log.warning("the metadata table's services after the commit on %s failed: %s", table.uri, exc)
    except Exception:  # an I/O error too: the data instant is committed, and a retry would redo it
        log.warning("the metadata table's services after the commit on %s failed", table.uri, exc_info=True)
    return None


# A temp file of our local storage (``_<name>.<hex>.tmp``; ``.<name>.<hex>.tmp`` before 2026-11-27,
# which Java's log file pattern ``^\.(.+)_(.*)\.(log|archive)\.(\d+)`` takes for a log file).
_TEMP_FILE = re.compile(r"[._].+\.[0-9a-f]{32}\.tmp")


def sweep_temp_files(mdt: MetadataTableWriter) -> list[str]:
    """Remove the temp files a writer of ours, killed between writing a file and renaming it into
    place, left in the MDT (its partitions and timeline folders); their MDT-relative paths. The
    caller holds the data table's MDT writer locks and this the MDT commit lock: no writer of ours
    is making one meanwhile, and Java's writers make no such names. Object stores put whole
    objects: there are none there."""
    storage = mdt.storage
    if storage.local_folder() is None:
        return []
    layout = mdt.store.layout
    removed = []
    with mdt.commit_lock():
        folders = [*storage.list_dir("")[1], HOODIE_DIR, layout.folder, layout.history_folder]
        for folder in dict.fromkeys(f for f in folders if f):
            for name in storage.list_names(folder):
                if _TEMP_FILE.fullmatch(name):
                    storage.delete(f"{folder}/{name}")
                    removed.append(f"{folder}/{name}")
    if removed:
        log.info("removed temp files killed writers left in %s: %s", storage.uri(), removed)
    return removed
