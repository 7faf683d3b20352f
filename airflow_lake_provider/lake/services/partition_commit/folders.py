"""Partition folders partition commit may write in: none that a link leads out of the table or
directory (a success file, merged files or a metastore location would land outside it)."""

from __future__ import annotations

from airflow_lake_provider.lake.errors import UnsafePathError
from airflow_lake_provider.lake.storage.base import Storage


def check_folder_inside(storage: Storage, partition: str, what: str) -> None:
    """``UnsafePathError`` for a partition folder that a link leads out of ``storage`` (``what``
    names it: the table, the directory)."""
    if not partition:
        return
    try:
        storage.check_deletable(partition)  # resolves links (local disk)
    except UnsafePathError as exc:
        reason = str(exc).split(": ", 1)[-1]  # "it resolves to <target>, outside <root>"
        raise UnsafePathError(
            f"partition folder {partition!r} of {storage.root} leads out of it ({reason}): partition "
            f"commit only writes inside {what}; nothing changed"
        ) from None
