"""The option registry through the services that read it: one boolean parser, Hudi 1.x and Flink
names, conflicts, layers, unknown keys at the CLI and in Spark job arguments, one ConfigError parent."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pyarrow as pa
import pytest
from metadata_table_support import add_metadata_table
from tree_digest import tree_digest

from airflow_lake_provider.lake.cli import main
from airflow_lake_provider.lake.config import check_options
from airflow_lake_provider.lake.config.known import BY_NAME
from airflow_lake_provider.lake.config.registry import OPTIONS
from airflow_lake_provider.lake.errors import (
    ArchivalConfigError,
    CleanConfigError,
    CompactionConfigError,
    ConfigError,
    FailedWritesConfigError,
    LakeError,
    MetadataTableConfigError,
    PartitionCommitConfigError,
    RollbackError,
    TableConfigError,
    WriteConfigError,
)
from airflow_lake_provider.lake.services.clean.config import CleanConfig, CleanPolicy
from airflow_lake_provider.lake.services.compaction.config import CompactionConfig, TriggerStrategy
from airflow_lake_provider.lake.services.partition_commit.config import PartitionCommitConfig
from airflow_lake_provider.lake.table.archival.config import ArchivalConfig
from airflow_lake_provider.lake.table.metadata.policy import MetadataTablePolicy
from airflow_lake_provider.lake.table.rollback.policy import FailedWritesConfig
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.spark_jobs._common import option_values


def test_every_configuration_error_is_a_config_error_and_keeps_its_old_parents() -> None:
    for error, old in (
        (CleanConfigError, TableConfigError),
        (CompactionConfigError, LakeError),
        (ArchivalConfigError, LakeError),
        (FailedWritesConfigError, RollbackError),
        (PartitionCommitConfigError, LakeError),
        (WriteConfigError, TableConfigError),
        (MetadataTableConfigError, TableConfigError),
    ):
        assert issubclass(error, ConfigError) and issubclass(error, old) and issubclass(error, ValueError)


# -- one boolean parser ----------------------------------------------------------------------------
BOOLEAN_READERS = {
    "hoodie.clean.allow.multiple": lambda o: CleanConfig.from_options(o).allow_multiple,
    "hoodie.cleaner.incremental.mode": lambda o: CleanConfig.from_options(o).incremental,
    "hoodie.metadata.enable": lambda o: MetadataTablePolicy.from_options(o) is not MetadataTablePolicy.DROP,
    "lake.metadata-table.maintain": lambda o: (
        MetadataTablePolicy.from_options(o) is MetadataTablePolicy.MAINTAIN
    ),
    "lake.partition-commit.late-data.recommit": lambda o: (
        PartitionCommitConfig.from_options(o).recommit_late_data
    ),
}


@pytest.mark.parametrize("key", sorted(BOOLEAN_READERS))
def test_every_boolean_option_reads_true_and_false_in_any_case_and_nothing_else(key: str) -> None:
    read = BOOLEAN_READERS[key]
    for raw, value in (("true", True), ("TRUE ", True), (" True", True), ("false", False), ("FALSE", False)):
        assert read({key: raw}) is value
    for raw in ("1", "0", "yes", "no", "on", "truee"):
        with pytest.raises(ConfigError) as caught:
            read({key: raw})
        assert str(caught.value) == f"{key}={raw!r} is not true or false"


def test_the_writer_reads_hoodie_archive_automatic_with_the_same_parser(tmp_path: Path) -> None:
    table = LakeTable.create(
        tmp_path / "t", name="t", table_type="cow", record_key_fields=("id",), precombine_field="ts"
    )

    batch = pa.table({"id": pa.array([1], pa.int64()), "ts": pa.array([1], pa.int64())})
    with pytest.raises(WriteConfigError) as caught:
        write(table, batch, "insert", options={"hoodie.archive.automatic": "1"})
    assert str(caught.value) == "hoodie.archive.automatic='1' is not true or false"
    assert write(table, batch, "insert", options={"hoodie.archive.automatic": " FALSE"}).archived == ()


# -- whole numbers, read as Hudi's Java ints and longs ----------------------------------------------
# Hudi reads these as Java ints (a larger value fails there with NumberFormatException), the two
# log-file thresholds as longs. The bloom sizes are bounded with the other bloom settings.
JAVA_INTS = sorted(
    o.key
    for o in OPTIONS
    if o.family != "write"
    and type(o.default) is int
    and o.key not in ("compaction.file-size",)
    and "logfile" not in o.key
)
JAVA_LONGS = ["hoodie.compaction.logfile.num.threshold", "hoodie.compaction.logfile.size.threshold"]


def test_the_whole_number_options_are_the_ones_hudi_reads_as_java_ints_and_longs() -> None:
    assert JAVA_INTS == [
        "hoodie.clean.max.commits",
        "hoodie.cleaner.commits.retained",
        "hoodie.cleaner.fileversions.retained",
        "hoodie.cleaner.hours.retained",
        "hoodie.client.heartbeat.interval_in_ms",
        "hoodie.client.heartbeat.tolerable.misses",
        "hoodie.commits.archival.batch",
        "hoodie.compact.inline.max.delta.commits",
        "hoodie.compact.inline.max.delta.seconds",
        "hoodie.compaction.daybased.target.partitions",
        "hoodie.keep.max.commits",
        "hoodie.keep.min.commits",
        "hoodie.metadata.compact.max.delta.commits",
    ]


@pytest.mark.parametrize(
    ("key", "largest"), [(k, 2**31 - 1) for k in JAVA_INTS] + [(k, 2**63 - 1) for k in JAVA_LONGS]
)
def test_a_whole_number_beyond_javas_range_or_in_python_only_spelling_is_refused(
    key: str, largest: int
) -> None:
    option = BY_NAME[key]
    assert option.read({key: str(largest)}) == largest
    for raw in (str(largest + 1), "99999999999999999999999", "1_0", "0x10", "1.5", "5 5"):
        with pytest.raises(ConfigError) as caught:
            option.read({key: raw})
        assert f"{key}=" in str(caught.value) and (raw in str(caught.value)), str(caught.value)


# -- other names, conflicts, layers ----------------------------------------------------------------
def test_flink_names_set_the_hoodie_options_they_stand_for() -> None:
    clean = CleanConfig.from_options(
        {
            "clean.policy": "keep_latest_by_hours",
            "clean.retain_commits": "7",
            "clean.retain_file_versions": "2",
            "clean.retain_hours": "5",
        }
    )
    assert (clean.policy, clean.commits_retained, clean.file_versions_retained, clean.hours_retained) == (
        CleanPolicy.KEEP_LATEST_BY_HOURS,
        7,
        2,
        5,
    )
    compaction = CompactionConfig.from_options(
        {
            "compaction.trigger.strategy": "num_or_time",
            "compaction.delta_commits": "2",
            "compaction.delta_seconds": "60",
            "compaction.target_io": "100",
        }
    )
    assert (
        compaction.trigger,
        compaction.max_delta_commits,
        compaction.max_delta_seconds,
        compaction.target_io_mb,
    ) == (TriggerStrategy.NUM_OR_TIME, 2, 60, 100.0)
    archival = ArchivalConfig.from_options({"archive.min_commits": "3", "archive.max_commits": "4"})
    assert (archival.min_commits, archival.max_commits) == (3, 4)


def test_an_option_and_another_name_of_it_with_different_values_are_refused_naming_both() -> None:
    with pytest.raises(CleanConfigError) as caught:
        CleanConfig.from_options({"hoodie.cleaner.commits.retained": "3", "clean.retain_commits": "4"})
    assert str(caught.value) == (
        "hoodie.cleaner.commits.retained='3' and clean.retain_commits='4' set the same option to "
        "different values: give one"
    )
    with pytest.raises(FailedWritesConfigError, match="hoodie.clean.failed.writes.policy='NEVER'"):
        FailedWritesConfig.from_options(
            {"hoodie.cleaner.policy.failed.writes": "LAZY", "hoodie.clean.failed.writes.policy": "NEVER"}
        )
    # The same value under two names (in any spelling the parser reads alike) is one setting.
    same = {
        "hoodie.compact.inline.trigger.strategy": "NUM_OR_TIME",
        "compaction.trigger.strategy": "num_or_time",
    }
    assert CompactionConfig.from_options(same).trigger is TriggerStrategy.NUM_OR_TIME


def test_the_callers_option_wins_over_the_table_property_whatever_names_they_use() -> None:
    table = {"hoodie.cleaner.commits.retained": "5", "hoodie.keep.max.commits": "40"}
    assert CleanConfig.from_options(table, {"hoodie.clean.commits.retained": "3"}).commits_retained == 3
    assert CleanConfig.from_options(table, {"clean.retain_commits": "4"}).commits_retained == 4
    assert ArchivalConfig.from_options(table, {"archive.max_commits": "35"}).max_commits == 35
    # Blank or None: not set, the table's value stays.
    assert CleanConfig.from_options(table, {"clean.retain_commits": " ", "x": None}).commits_retained == 5


def test_partition_commit_durations_and_sizes_parse_through_the_registry() -> None:
    config = PartitionCommitConfig.from_options(
        {
            "sink.partition-commit.delay": "1 h",
            "lake.partition-commit.merge-small-files.target-file-size": "1 gb",
        }
    )
    assert (config.delay, config.target_file_size) == (dt.timedelta(hours=1), 1024**3)


# -- unknown keys ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("key", "message"),
    [
        (
            "hoodie.cleaner.comits.retained",
            "unknown option hoodie.cleaner.comits.retained='3'; "
            "did you mean hoodie.cleaner.commits.retained?",
        ),
        (
            "hoodie.metadata.enabel",
            "unknown option hoodie.metadata.enabel='3'; did you mean hoodie.metadata.enable?",
        ),
        (
            "lake.nothing.like.it",
            "unknown option lake.nothing.like.it='3' (every option: docs/options.md)",
        ),
    ],
)
def test_an_unknown_hoodie_or_lake_key_is_refused_naming_the_nearest(key: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        check_options({key: "3"})
    assert str(caught.value) == message


def test_hudi_keys_this_provider_ignores_and_other_engines_keys_are_accepted() -> None:
    check_options(
        {
            "hoodie.datasource.write.recordkey.field": "id",
            "hoodie.table.name": "t",
            "hoodie.compact.inline": "false",
            "hoodie.clean.automatic": "true",
            "hoodie.metadata.index.column.stats.enable": "true",
            # Hudi's own keys a letter or two from a registered one (hive_sync.table, metadata.enable)
            "hoodie.datasource.hive_sync.enable": "true",
            "hoodie.datasource.hive_sync.mode": "hms",
            "hoodie.metadata.enable.full.scan.log.files": "false",
            "write.tasks": "4",
            "compaction.async.enabled": "false",
            "clean.retain_commits": "3",
        }
    )


@pytest.mark.parametrize(
    ("key", "near"),
    [
        ("hoodie.datasource.hive_sync.tabel", "hoodie.datasource.hive_sync.table"),
        ("hoodie.datasource.hive_sync.databse", "hoodie.datasource.hive_sync.database"),
        ("hoodie.index.bloom.fp", "hoodie.index.bloom.fpp"),
        ("hoodie.index.types", "hoodie.index.type"),
        ("hoodie.metadata.enabled", "hoodie.metadata.enable"),
    ],
)
def test_a_one_letter_slip_under_an_ignored_prefix_is_still_refused(key: str, near: str) -> None:
    with pytest.raises(ConfigError, match=rf"did you mean {re.escape(near)}\?$"):
        check_options({key: "1"})


def test_the_cli_refuses_a_misspelt_option_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t"
    LakeTable.create(path, name="t", table_type="cow", record_key_fields=("id",), precombine_field="ts")
    before = tree_digest(path)
    code = main(["clean", str(path), "--option", "hoodie.cleaner.comits.retained=3"])
    assert code == 1
    assert capsys.readouterr().err.strip() == (
        "lake: error: unknown option hoodie.cleaner.comits.retained='3'; did you mean "
        "hoodie.cleaner.commits.retained?"
    )
    assert tree_digest(path) == before


@pytest.mark.parametrize("metadata_table", [False, True])
def test_a_bad_rollback_option_is_refused_before_any_lock_or_metadata_table_drop(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], metadata_table: bool
) -> None:
    path = tmp_path / "t"
    LakeTable.create(path, name="t", table_type="cow", record_key_fields=("id",), precombine_field="ts")
    if metadata_table:
        add_metadata_table(path)
    before = tree_digest(path)
    argv = ["rollback", str(path), "--option", "hoodie.client.heartbeat.tolerable.misses=abc"]
    code = main([*argv, "--option", "hoodie.metadata.enable=false"])
    assert (code, capsys.readouterr().err) == (
        1,
        "lake: error: hoodie.client.heartbeat.tolerable.misses='abc' must be a positive whole number\n",
    )
    assert tree_digest(path) == before  # no lock file either


def test_a_bad_option_is_refused_before_the_metadata_table_drop_takes_its_locks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The drop reads the failed-writes options (heartbeats of pending writes) under every lock."""
    path = tmp_path / "t"
    LakeTable.create(path, name="t", table_type="cow", record_key_fields=("id",), precombine_field="ts")
    add_metadata_table(path)
    before = tree_digest(path)
    argv = [
        "restore",
        str(path),
        "--savepoint",
        "20200101000000000",
        "--option",
        "hoodie.metadata.enable=false",
    ]
    code = main([*argv, "--option", "hoodie.client.heartbeat.tolerable.misses=abc"])
    assert (code, capsys.readouterr().err) == (
        1,
        "lake: error: hoodie.client.heartbeat.tolerable.misses='abc' must be a positive whole number\n",
    )
    assert tree_digest(path) == before


def test_spark_job_options_are_checked_like_the_others() -> None:
    assert option_values(["clean.retain_commits=3"]) == {"clean.retain_commits": "3"}
    with pytest.raises(ConfigError, match="did you mean hoodie.keep.min.commits"):
        option_values(["hoodie.keep.min.comits=3"])


@pytest.mark.parametrize("raw", ["1_000", "inf", "infinity", "nan", "0x10", "1e"])
def test_a_decimal_option_takes_what_java_reads_not_what_python_reads(raw: str) -> None:
    """``hoodie.compaction.target.io`` is a Java double: ``1_000`` and ``inf`` were read by Python's
    float() (a bound of 1000 MB, or none at all) where Hudi refuses them."""
    with pytest.raises(CompactionConfigError) as refused:
        CompactionConfig.from_options({"hoodie.compaction.target.io": raw})
    assert str(refused.value) == f"hoodie.compaction.target.io={raw!r} is not a number"


@pytest.mark.parametrize(
    ("raw", "value"), [("1e3", 1000.0), (".5", 0.5), ("2.5d", 2.5), ("Infinity", float("inf")), ("7", 7.0)]
)
def test_a_decimal_option_reads_javas_forms(raw: str, value: float) -> None:
    assert CompactionConfig.from_options({"compaction.target_io": raw}).target_io_mb == value
