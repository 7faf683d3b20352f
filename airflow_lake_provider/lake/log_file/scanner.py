"""Log files read back through storage: every intact block of a file, and which blocks of a file
slice's log files a reader sees (Hudi's log record scanner, before any record is decoded).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from airflow_lake_provider.lake.errors import (
    CorruptLogBlockError,
    LakeError,
    StorageAccessError,
    StorageUnavailableError,
    UnsupportedLogBlockError,
)
from airflow_lake_provider.lake.log_file.log_format import BlockType, HeaderKey, LogBlock, parse_log_bytes
from airflow_lake_provider.lake.storage import Storage


def read_log_blocks(storage: Storage, rel: str, damage: list[str] | None = None) -> list[LogBlock]:
    """Every intact block of log file ``rel``; damaged regions are skipped with a warning (and, if
    ``damage`` is given, one line each appended to it).

    :raises CorruptLogBlockError: if the file cannot be read at all.
    """
    try:
        data = storage.read(rel)
    except (StorageAccessError, StorageUnavailableError):
        raise  # the store, not the file: already names the URI, and is not corruption
    except (LakeError, OSError) as exc:
        raise CorruptLogBlockError(f"cannot read log file {storage.uri(rel)}: {exc}") from exc
    return parse_log_bytes(data, storage.uri(rel), damage)


def append_log_blocks(storage: Storage, rel: str, blocks: Sequence[bytes]) -> tuple[int, int]:
    """Append encoded blocks to log file ``rel`` (created if missing), durably.

    :returns: (file size before = offset of the first new block, new file size).
    """
    return storage.append(rel, b"".join(blocks))


def visible_blocks(
    blocks: Sequence[LogBlock], is_committed: Callable[[str], bool], as_of: str | None = None
) -> list[LogBlock]:
    """Of the blocks of one slice's log files (in log order), the data and delete blocks of committed
    instants (up to ``as_of``), minus those of instants a rollback command block names."""
    rolled_back = {b.target_instant_time for b in blocks if b.is_rollback}
    out = []
    for block in blocks:
        instant = block.instant_time
        if block.block_type in (BlockType.COMMAND, BlockType.CORRUPTED) or instant is None:
            continue
        if instant in rolled_back or not is_committed(instant):
            continue
        if as_of is not None and instant > as_of:
            continue
        if block.header.get(HeaderKey.IS_PARTIAL, "").strip().lower() == "true":
            # Table version 8+: the block holds only some columns of each record, to be merged into
            # the previous version field by field; read as whole records it would null the rest.
            raise UnsupportedLogBlockError(
                f"{block.location}: a partial-update log block (header IS_PARTIAL=true, instant "
                f"{instant}) is not supported"
            )
        out.append(block)
    return out
