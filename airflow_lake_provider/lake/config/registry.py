"""Every option the services and the writer read: key, aliases, default, parser, one-line doc.

Defaults are Hudi's (``HoodieCleanConfig``, ``HoodieCompactionConfig``, ``HoodieArchivalConfig``...)
and, for partition commit, Flink's filesystem connector's. A Flink alias (``FlinkOptions``) maps onto
a ``hoodie.`` key of the same meaning; where Flink's default differs (``clean.retain_commits`` 30,
``archive.max_commits`` 50...), the ``hoodie.`` key's default applies here.
"""

from __future__ import annotations

import datetime as dt

import airflow_lake_provider.lake.config.checked as c
import airflow_lake_provider.lake.config.parsers as p
from airflow_lake_provider.lake.config.option import Option
from airflow_lake_provider.lake.config.values import (
    CleanPolicy,
    FailedWritesPolicy,
    PartitionCommitTrigger,
    TriggerStrategy,
)
from airflow_lake_provider.lake.errors import (
    ArchivalConfigError,
    CleanConfigError,
    CompactionConfigError,
    ConfigError,
    FailedWritesConfigError,
    MetadataTableConfigError,
    PartitionCommitConfigError,
    WriteConfigError,
)

# -- clean (each setting: the 0.x key first, then the names Hudi 1.x also accepts) -----------------
CLEAN_POLICY = Option(
    "hoodie.cleaner.policy",
    CleanPolicy.KEEP_LATEST_COMMITS,
    p.choice(CleanPolicy),
    "what a clean keeps: KEEP_LATEST_COMMITS, KEEP_LATEST_FILE_VERSIONS or KEEP_LATEST_BY_HOURS",
    "clean",
    CleanConfigError,
    aliases=("hoodie.clean.policy",),
    flink=("clean.policy",),
)
CLEAN_COMMITS_RETAINED = Option(
    "hoodie.cleaner.commits.retained",
    10,
    p.integer(1, p.JAVA_INT_MAX),
    "KEEP_LATEST_COMMITS: commits whose file slices stay readable",
    "clean",
    CleanConfigError,
    aliases=("hoodie.clean.commits.retained",),
    flink=("clean.retain_commits",),
)
CLEAN_FILE_VERSIONS_RETAINED = Option(
    "hoodie.cleaner.fileversions.retained",
    3,
    p.integer(1, p.JAVA_INT_MAX),
    "KEEP_LATEST_FILE_VERSIONS: file slices kept per file group",
    "clean",
    CleanConfigError,
    aliases=("hoodie.clean.fileversions.retained",),
    flink=("clean.retain_file_versions",),
)
CLEAN_HOURS_RETAINED = Option(
    "hoodie.cleaner.hours.retained",
    24,
    p.integer(0, p.JAVA_INT_MAX),
    "KEEP_LATEST_BY_HOURS: hours of commits whose slices stay readable",
    "clean",
    CleanConfigError,
    aliases=("hoodie.clean.hours.retained",),
    flink=("clean.retain_hours",),
)
CLEAN_MAX_COMMITS = Option(
    "hoodie.clean.max.commits",
    1,
    p.integer(0, p.JAVA_INT_MAX),
    "commits since the last clean before a clean is planned",
    "clean",
    CleanConfigError,
    aliases=("hoodie.clean.trigger.max.commits",),
)
CLEAN_ALLOW_MULTIPLE = Option(
    "hoodie.clean.allow.multiple",
    True,
    p.boolean,
    "plan a clean while another is pending",
    "clean",
    CleanConfigError,
    aliases=("hoodie.clean.multiple.enabled",),
)
CLEAN_INCREMENTAL = Option(
    "hoodie.cleaner.incremental.mode",
    True,
    p.boolean,
    "plan from the partitions written since the last clean",
    "clean",
    CleanConfigError,
    aliases=("hoodie.clean.incremental.enabled",),
)


# -- failed writes (rollback) ------------------------------------------------------------------------
def _positive_java_int(key: str, raw: str, error: type[ConfigError]) -> int:
    value = p.whole_number(raw) or 0
    if value <= 0:
        raise error(f"{key}={raw!r} must be a positive whole number")
    if value > p.JAVA_INT_MAX:  # Hudi reads both as Java ints (and a wait that long overflows here)
        raise error(f"{key}={raw!r} must be at most {p.JAVA_INT_MAX}")
    return value


FAILED_WRITES_POLICY = Option(
    "hoodie.cleaner.policy.failed.writes",
    FailedWritesPolicy.EAGER,
    p.choice(FailedWritesPolicy),
    "EAGER, LAZY (heartbeats) or NEVER: when failed writes are rolled back",
    "failed-writes",
    FailedWritesConfigError,
    aliases=("hoodie.clean.failed.writes.policy",),
)
HEARTBEAT_INTERVAL_MS = Option(
    "hoodie.client.heartbeat.interval_in_ms",
    60_000,
    _positive_java_int,
    "LAZY: how often a running write refreshes its heartbeat",
    "failed-writes",
    FailedWritesConfigError,
)
HEARTBEAT_TOLERABLE_MISSES = Option(
    "hoodie.client.heartbeat.tolerable.misses",
    2,
    _positive_java_int,
    "LAZY: missed heartbeats before a write counts as failed",
    "failed-writes",
    FailedWritesConfigError,
)

# -- compaction --------------------------------------------------------------------------------------
STRATEGY_PACKAGE = "org.apache.hudi.table.action.compact.strategy"
DEFAULT_STRATEGY = f"{STRATEGY_PACKAGE}.LogFileSizeBasedCompactionStrategy"

COMPACT_TRIGGER = Option(
    "hoodie.compact.inline.trigger.strategy",
    TriggerStrategy.NUM_COMMITS,
    p.choice(TriggerStrategy),
    "when a compaction is due: NUM_COMMITS, NUM_COMMITS_AFTER_LAST_REQUEST, TIME_ELAPSED, "
    "NUM_AND_TIME or NUM_OR_TIME",
    "compaction",
    CompactionConfigError,
    flink=("compaction.trigger.strategy",),
)
COMPACT_MAX_DELTA_COMMITS = Option(
    "hoodie.compact.inline.max.delta.commits",
    5,
    p.integer(0, p.JAVA_INT_MAX),
    "delta commits since the last compaction that make one due",
    "compaction",
    CompactionConfigError,
    flink=("compaction.delta_commits",),
)
COMPACT_MAX_DELTA_SECONDS = Option(
    "hoodie.compact.inline.max.delta.seconds",
    3600,
    p.integer(0, p.JAVA_INT_MAX),
    "seconds since the last compaction that make one due",
    "compaction",
    CompactionConfigError,
    flink=("compaction.delta_seconds",),
)
COMPACTION_STRATEGY = Option(
    "hoodie.compaction.strategy",
    DEFAULT_STRATEGY,
    c.strategies,
    "which file groups a plan takes (Hudi's strategy class names or short forms, comma-joined)",
    "compaction",
    CompactionConfigError,
    meaning=c.strategy_kinds,
)
COMPACTION_LOG_SIZE_THRESHOLD = Option(
    "hoodie.compaction.logfile.size.threshold",
    0,
    p.integer(0, p.JAVA_LONG_MAX),
    "LogFileSizeBased: least log bytes of a file group to take it",
    "compaction",
    CompactionConfigError,
)
COMPACTION_LOG_NUM_THRESHOLD = Option(
    "hoodie.compaction.logfile.num.threshold",
    0,
    p.integer(0, p.JAVA_LONG_MAX),
    "LogFileNumBased: least log files of a file group to take it",
    "compaction",
    CompactionConfigError,
)
COMPACTION_TARGET_IO = Option(
    "hoodie.compaction.target.io",
    512000.0,
    p.number(0.0),
    "BoundedIO strategies: MB read and written per compaction",
    "compaction",
    CompactionConfigError,
    flink=("compaction.target_io",),
)
COMPACTION_DAY_PARTITIONS = Option(
    "hoodie.compaction.daybased.target.partitions",
    10,
    p.integer(0, p.JAVA_INT_MAX),
    "DayBased: latest partitions compacted",
    "compaction",
    CompactionConfigError,
)
COMPACTION_PARTITION_REGEX = Option(
    "hoodie.compaction.partition.path.regex",
    None,
    p.regex,
    "PartitionRegexBased: partitions whose path matches",
    "compaction",
    CompactionConfigError,
)

# -- archival ----------------------------------------------------------------------------------------
KEEP_MIN_COMMITS = Option(
    "hoodie.keep.min.commits",
    20,
    p.integer(1, p.JAVA_INT_MAX),
    "completed commits left active after archiving",
    "archival",
    ArchivalConfigError,
    flink=("archive.min_commits",),
)
KEEP_MAX_COMMITS = Option(
    "hoodie.keep.max.commits",
    30,
    p.integer(1, p.JAVA_INT_MAX),
    "completed commits active before archiving starts",
    "archival",
    ArchivalConfigError,
    flink=("archive.max_commits",),
)
ARCHIVAL_BATCH = Option(
    "hoodie.commits.archival.batch",
    10,
    p.integer(1, p.JAVA_INT_MAX),
    "instants per block of the archive log",
    "archival",
    ArchivalConfigError,
)
ARCHIVE_AUTOMATIC = Option(
    "hoodie.archive.automatic",
    True,
    p.boolean,
    "archive the timeline after each write",
    "archival",
    WriteConfigError,
)

# -- write -------------------------------------------------------------------------------------------
BLOOM_NUM_ENTRIES = Option(
    "hoodie.index.bloom.num_entries",
    60_000,
    c.bloom_entries,
    "keys a new base file's bloom filter is sized for",
    "write",
    WriteConfigError,
)
BLOOM_FPP = Option(
    "hoodie.index.bloom.fpp",
    1e-9,
    c.bloom_fpp,
    "false positive rate of new bloom filters",
    "write",
    WriteConfigError,
)
BLOOM_FILTER_TYPE = Option(
    "hoodie.bloom.index.filter.type",
    "DYNAMIC_V0",
    c.bloom_filter_type,
    "SIMPLE or DYNAMIC_V0 bloom filters",
    "write",
    WriteConfigError,
)
BLOOM_MAX_ENTRIES = Option(
    "hoodie.bloom.index.filter.dynamic.max.entries",
    100_000,
    c.bloom_max_entries,
    "DYNAMIC_V0: most keys a filter grows to",
    "write",
    WriteConfigError,
)
INDEX_TYPE = Option(
    "hoodie.index.type",
    None,
    p.text,
    "the table's Hudi index; only BLOOM and SIMPLE (or unset) are written",
    "write",
    WriteConfigError,
)
EVENT_TIME_FIELD = Option(
    "hoodie.payload.event.time.field",
    None,
    p.text,
    "column whose min/max a commit records as event time (partition-time watermark)",
    "write",
    WriteConfigError,
)

# -- metadata table ----------------------------------------------------------------------------------
METADATA_ENABLE = Option(
    "hoodie.metadata.enable",
    True,
    p.boolean,
    "false drops a table's metadata table before a mutation, as Hudi does",
    "metadata-table",
    MetadataTableConfigError,
)
METADATA_MAINTAIN = Option(
    "lake.metadata-table.maintain",
    True,
    p.boolean,
    "true (the default) keeps a v8/v9 table's metadata table (files, column_stats, partition_stats) "
    "and a v6 table's (files) up to date on writes, compaction, clean, rollback, restore, partition "
    "commit's merge-small-files and archival, and runs its own compaction, clean and archival; where "
    "it cannot, the action refuses naming why; false refuses every mutating action on a table with a "
    "metadata table",
    "metadata-table",
    MetadataTableConfigError,
)
METADATA_COMPACT_DELTA_COMMITS = Option(
    "hoodie.metadata.compact.max.delta.commits",
    10,
    p.integer(1, p.JAVA_INT_MAX),
    "under maintain: the metadata table's deltacommits since its last compaction that trigger the next one",
    "metadata-table",
    MetadataTableConfigError,
)


def _pc_trigger(key: str, raw: str, error: type[ConfigError]) -> PartitionCommitTrigger:
    try:
        return PartitionCommitTrigger(raw.lower())
    except ValueError:
        raise error(f"{key}={raw!r} is not process-time or partition-time") from None


# -- partition commit (the Flink filesystem connector's names, then ours) ---------------------------
PC_TRIGGER = Option(
    "sink.partition-commit.trigger",
    PartitionCommitTrigger.PROCESS_TIME,
    _pc_trigger,
    "process-time or partition-time",
    "partition-commit",
    PartitionCommitConfigError,
)
PC_DELAY = Option(
    "sink.partition-commit.delay",
    dt.timedelta(0),
    p.duration,
    "how long after its time a partition is committed",
    "partition-commit",
    PartitionCommitConfigError,
)
PC_TIME_ZONE = Option(
    "sink.partition-commit.watermark-time-zone",
    "UTC",
    c.time_zone,
    "time zone of partition times",
    "partition-commit",
    PartitionCommitConfigError,
)
PC_POLICY_KIND = Option(
    "sink.partition-commit.policy.kind",
    "success-file",
    c.policies,
    "success-file, metastore, custom, merge-small-files (comma-joined, applied in that order)",
    "partition-commit",
    PartitionCommitConfigError,
    meaning=c.policy_kinds,
)
PC_POLICY_CLASS = Option(
    "sink.partition-commit.policy.class",
    None,
    p.text,
    "custom: the policy's name",
    "partition-commit",
    PartitionCommitConfigError,
)
PC_SUCCESS_FILE = Option(
    "sink.partition-commit.success-file.name",
    "_SUCCESS",
    c.success_file_name,
    "name of the success file",
    "partition-commit",
    PartitionCommitConfigError,
)
PC_EXTRACTOR_KIND = Option(
    "partition.time-extractor.kind",
    "default",
    c.extractor_kind,
    "default or custom",
    "partition-commit",
    PartitionCommitConfigError,
)
PC_EXTRACTOR_CLASS = Option(
    "partition.time-extractor.class",
    None,
    p.text,
    "custom: the extractor's name",
    "partition-commit",
    PartitionCommitConfigError,
)
PC_PATTERN = Option(
    "partition.time-extractor.timestamp-pattern",
    None,
    p.text,
    "how partition values form a timestamp (e.g. $dt $hour:00:00)",
    "partition-commit",
    PartitionCommitConfigError,
)
PC_FORMATTER = Option(
    "partition.time-extractor.timestamp-formatter",
    None,
    c.time_formatter,
    "the timestamp's format (yyyy-MM-dd HH:mm:ss)",
    "partition-commit",
    PartitionCommitConfigError,
)
PC_LATENESS = Option(
    "lake.partition-commit.watermark.allowed-lateness",
    dt.timedelta(0),
    p.duration,
    "how far the table-side watermark trails the latest event time",
    "partition-commit",
    PartitionCommitConfigError,
)
PC_RECOMMIT = Option(
    "lake.partition-commit.late-data.recommit",
    False,
    p.boolean,
    "commit a partition again when late data arrives",
    "partition-commit",
    PartitionCommitConfigError,
)
PC_TARGET_FILE_SIZE = Option(
    "compaction.file-size",
    128 * 1024 * 1024,  # Flink's rolling file size
    p.size,
    "merge-small-files: target size of merged files, in bytes (or 128mb, 1 gb)",
    "partition-commit",
    PartitionCommitConfigError,
    aliases=("lake.partition-commit.merge-small-files.target-file-size",),
)
PC_PARTITION_FIELDS = Option(
    "lake.partition-commit.partition-fields",
    None,
    p.text,
    "plain parquet directories: the partition fields (f1,f2)",
    "partition-commit",
    PartitionCommitConfigError,
)

PC_HIVE_DATABASE = Option(
    "hoodie.datasource.hive_sync.database",
    "default",
    p.text,
    "metastore: the database of the table",
    "partition-commit",
    PartitionCommitConfigError,
)
PC_HIVE_TABLE = Option(
    "hoodie.datasource.hive_sync.table",
    None,
    p.text,
    "metastore: the table's name there (default: the Hudi table's name)",
    "partition-commit",
    PartitionCommitConfigError,
)

OPTIONS: tuple[Option, ...] = tuple(v for v in list(globals().values()) if isinstance(v, Option))
