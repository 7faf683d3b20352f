"""The exception tree of the table core: every error it raises is a ``LakeError``."""

from __future__ import annotations


class LakeError(Exception):
    """Root of every error raised by the table core."""


class ConfigError(LakeError, ValueError):
    """An option holds an unknown name or an invalid value: the parent of every configuration error
    (the Airflow layer fails such a task at once, without retries)."""


class TableNotFoundError(LakeError, FileNotFoundError):
    """The path holds no Hudi table (no ``.hoodie/hoodie.properties``)."""


class TableExistsError(LakeError, FileExistsError):
    """``init`` was asked to create a table where one already exists."""


class TableConfigError(LakeError, ValueError):
    """``hoodie.properties`` is missing a required key or holds an unsupported value."""


class UnsupportedTableVersionError(TableConfigError):
    """The table version (or timeline layout) is not one this core reads and writes."""


class InvalidInstantError(LakeError, ValueError):
    """An instant time or timeline file name does not follow the Hudi grammar."""


class InvalidStateTransitionError(LakeError):
    """A timeline transition was asked from a state the instant is not in."""


class CommitConflictError(LakeError):
    """Another writer created the same timeline file first; nothing was overwritten."""


class PendingClusteringError(LakeError):
    """A write reaches file groups a pending clustering plan will replace; nothing was written."""


class CorruptTimelineFileError(LakeError):
    """A timeline file (JSON or Avro) cannot be parsed."""


class InvalidFileNameError(LakeError, ValueError):
    """A base, log or marker file name (or a file id) does not follow the Hudi grammar."""


class CorruptLogBlockError(LakeError):
    """A log block cannot be decoded (raised only where skipping it is not safe)."""


class UnsupportedLogBlockError(LakeError):
    """A log block uses a feature this core does not merge (e.g. a partial-update block)."""


class CorruptDataFileError(LakeError):
    """A base file cannot be read as parquet (garbage, truncated, unreadable)."""


class SchemaError(LakeError, ValueError):
    """A batch or schema is incompatible with the table (missing key, bad type, ...)."""


class WriteInputError(LakeError, ValueError):
    """The input of a write is missing, empty or not parquet (retrying cannot help)."""


class UnsafePathError(LakeError, ValueError):
    """A path to delete or write lies outside the table base path or inside ``.hoodie/``."""


class SnapshotCleanedError(LakeError):
    """A time-travel read asked for an instant whose files a clean already removed."""


class InstantArchivedError(LakeError):
    """A time-travel read asked for an instant that archival moved out of the active timeline."""


class ArchivalError(LakeError):
    """The timeline cannot be archived as asked (nothing was changed)."""


class ArchivalConfigError(ConfigError, ArchivalError):
    """A ``hoodie.keep.*`` / ``hoodie.commits.archival.batch`` option holds an invalid value."""


class ServiceBusyError(LakeError):
    """Another run of the same table service holds the table's lock."""


class CleanConfigError(ConfigError, TableConfigError):
    """A cleaner option has an unknown name or an invalid value."""


class SavepointError(LakeError):
    """A savepoint cannot be created or deleted at the instant asked for."""


class RollbackError(LakeError):
    """An instant cannot be rolled back (unknown, completed without force, depended upon, ...)."""


class FailedWritesConfigError(ConfigError, RollbackError):
    """``hoodie.cleaner.policy.failed.writes`` or a heartbeat option holds an invalid value."""


class WriteConfigError(ConfigError, TableConfigError):
    """A writer option (bloom filter, index type, automatic archival) holds an invalid value."""


class MetadataTableConfigError(ConfigError, TableConfigError):
    """A metadata-table option holds a value other than true or false, or ``hoodie.metadata.enable=false``
    (drop) comes with ``lake.metadata-table.maintain=true`` (keep)."""


class HeartbeatError(RollbackError):
    """A heartbeat file cannot be read as a time."""


class CompactionError(LakeError):
    """A compaction cannot be scheduled, executed or committed as asked."""


class CompactionConfigError(ConfigError, CompactionError):
    """A ``hoodie.compact*`` option holds a value the compaction services do not accept."""


class CompactionScheduleConflictError(CompactionError):
    """No valid plan instant: it must follow every completed instant and precede every pending write."""


class StorageError(LakeError):
    """A file could not be read, written, listed or deleted as asked."""


class InvalidLocationError(StorageError, ValueError):
    """A table location is malformed or names a store this core cannot open (retrying cannot help)."""


class ObjectNotFoundError(StorageError, FileNotFoundError):
    """The file asked for does not exist."""


class ObjectExistsError(StorageError, FileExistsError):
    """A create-only write found the file already there; nothing was overwritten."""


class PartitionCommitError(LakeError):
    """A partition cannot be committed as asked (a policy failed, the partition is missing...)."""


class PartitionCommitConfigError(ConfigError, PartitionCommitError):
    """A ``sink.partition-commit.*`` or ``partition.time-extractor.*`` option holds a bad value."""


class InvalidPartitionError(PartitionCommitError, ValueError):
    """A partition argument that names no partition folder (none, ``..``, ``.hoodie``, hidden)."""


class PartitionNotFoundError(PartitionCommitError, ValueError):
    """A partition named for commit has no completed write on the table."""


class StorageAccessError(StorageError, PermissionError):
    """The store refused the credentials (wrong key, no permission)."""


class StorageUnavailableError(StorageError, ConnectionError):
    """The store could not be reached (network error, endpoint down)."""


class MissingExtraError(LakeError, ImportError):
    """An optional dependency is not installed; the message names the extra that brings it."""


def missing_extra(extra: str, needed_by: str, exc: ImportError) -> MissingExtraError:
    """A :class:`MissingExtraError` for ``needed_by`` (e.g. ``"s3://b/t: an S3 table"``) without ``extra``."""
    return MissingExtraError(
        f"{needed_by} needs {exc.name or 'a package'}, which is not installed: "
        f"pip install 'airflow-lake-provider[{extra}]'"
    )
