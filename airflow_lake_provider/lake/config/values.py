"""The enumerated values of options (re-exported by the services that act on them)."""

from __future__ import annotations

from enum import Enum


class CleanPolicy(str, Enum):
    KEEP_LATEST_COMMITS = "KEEP_LATEST_COMMITS"
    KEEP_LATEST_FILE_VERSIONS = "KEEP_LATEST_FILE_VERSIONS"
    KEEP_LATEST_BY_HOURS = "KEEP_LATEST_BY_HOURS"


class FailedWritesPolicy(str, Enum):
    EAGER = "EAGER"
    LAZY = "LAZY"
    NEVER = "NEVER"


class TriggerStrategy(str, Enum):
    """When a compaction is due (``hoodie.compact.inline.trigger.strategy``)."""

    NUM_COMMITS = "NUM_COMMITS"
    NUM_COMMITS_AFTER_LAST_REQUEST = "NUM_COMMITS_AFTER_LAST_REQUEST"
    TIME_ELAPSED = "TIME_ELAPSED"
    NUM_AND_TIME = "NUM_AND_TIME"
    NUM_OR_TIME = "NUM_OR_TIME"


class PartitionCommitTrigger(str, Enum):
    PROCESS_TIME = "process-time"
    PARTITION_TIME = "partition-time"


class PolicyKind(str, Enum):
    """A partition-commit policy (``sink.partition-commit.policy.kind``)."""

    SUCCESS_FILE = "success-file"
    METASTORE = "metastore"
    CUSTOM = "custom"
    MERGE_SMALL_FILES = "merge-small-files"
