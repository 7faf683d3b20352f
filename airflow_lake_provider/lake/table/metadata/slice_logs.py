"""The log blocks of a metadata table (MDT) file slice, refusing damage that hides a completed
deltacommit.

A damaged region of an MDT log is either the torn tail of an append whose deltacommit never
completed (skipping it is right: readers ignore that instant anyway) or bytes lost after the
deltacommit completed. Readers skip both alike, so in the second case every reader merges the
slice without that deltacommit's records (a listing without the files it added), and an MDT
compaction would write the loss into a base file for good. So a damaged region is accepted only
when no deltacommit readers merge is missing from the slice.
"""

from __future__ import annotations

from collections.abc import Collection, Container, Sequence

from airflow_lake_provider.lake.errors import CorruptDataFileError
from airflow_lake_provider.lake.file_group.file_names import LogFileName
from airflow_lake_provider.lake.log_file.log_format import LogBlock
from airflow_lake_provider.lake.log_file.scanner import read_log_blocks
from airflow_lake_provider.lake.storage import Storage


def read_slice_logs(
    storage: Storage,
    folder: str,
    names: Sequence[str],
    committed: Container[str],
    *,
    named_by_instant: bool,
    expected: Collection[str] = (),
) -> list[LogBlock]:
    """The intact blocks of the log files ``names`` of ``folder``, in order.

    ``committed``: the MDT deltacommits readers merge. With ``named_by_instant`` (Hudi 1.x names a
    log after the deltacommit that wrote it) a damaged log of one of them hides it. Otherwise
    (table version 6 names a log after its slice) ``expected`` are the committed deltacommits that
    must each show a block in these logs: one without any hides it when a log is damaged.

    :raises CorruptDataFileError: naming the damaged log, the damage and the deltacommits hidden.
    """
    blocks: list[LogBlock] = []
    damaged: dict[str, list[str]] = {}
    for name in names:
        lines: list[str] = []
        blocks.extend(read_log_blocks(storage, f"{folder}/{name}", lines))
        if lines:
            damaged[name] = lines
    if not damaged:
        return blocks
    if named_by_instant:
        lost = {n: [i] for n in damaged if (i := _instant_of(n)) is not None and i in committed}
    else:
        shown = {b.instant_time for b in blocks}
        missing = sorted(t for t in expected if t not in shown)
        lost = dict.fromkeys(damaged, missing) if missing else {}
    if lost:
        name, instants = next(iter(lost.items()))
        raise CorruptDataFileError(
            f"{storage.uri(f'{folder}/{name}')}: damaged ({'; '.join(damaged[name])}): the metadata "
            f"table's completed deltacommit(s) {', '.join(instants)} have no readable block in "
            f"{storage.uri(folder)}, so every reader of the metadata table misses their records; drop the "
            "metadata table ('lake metadata-table <table> --drop') for Hudi to build it again"
        )
    return blocks


def _instant_of(name: str) -> str | None:
    parsed = LogFileName.parse(name)
    return parsed.base_instant if parsed is not None else None
