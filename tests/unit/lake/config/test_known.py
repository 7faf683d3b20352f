"""Unknown option keys: Hudi's own keys (``hudi_keys.txt``) are accepted and ignored with one
warning, a typo of a key the provider reads is refused naming the nearest; in the core, at the CLI
and through an operator."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import pytest
from tree_digest import tree_digest

from airflow_lake_provider.lake.cli import main
from airflow_lake_provider.lake.config import check_options, known
from airflow_lake_provider.lake.errors import ConfigError
from airflow_lake_provider.lake.table.table import LakeTable

LOGGER = "airflow_lake_provider.lake.config.known"
# Keys Spark and Flink jobs pass that no option of this provider reads (Hudi 1.x and 0.15 names).
REAL = {
    "hoodie.auto.commit": "false",  # 0.15's page only
    "hoodie.compaction.payload.class": "org.apache.hudi.common.model.DefaultHoodieRecordPayload",
    "hoodie.clustering.inline": "true",
    "hoodie.avro.schema.validate": "false",
    "hoodie.merge.allow.duplicate.on.inserts": "true",
    "hoodie.rollback.parallelism": "10",
    "hoodie.write.markers.type": "DIRECT",
}


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[tuple[int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((record.levelno, record.getMessage()))


@pytest.fixture
def logged() -> Iterator[list[tuple[int, str]]]:
    """What the check logs, caught on its own logger: once Airflow is imported (the operator test,
    or any earlier test of the session), its logging set-up keeps records from pytest's caplog."""
    logger, handler = logging.getLogger(LOGGER), _Records()
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield handler.lines
    logger.removeHandler(handler)
    logger.setLevel(level)


def _table(tmp_path: Path) -> Path:
    path = tmp_path / "t"
    LakeTable.create(path, name="t", table_type="cow", record_key_fields=("id",), precombine_field="ts")
    return path


# -- the key list ----------------------------------------------------------------------------------
def test_the_shipped_key_list_is_sorted_unique_hoodie_names_under_a_header_saying_where_from() -> None:
    text = resources.files("airflow_lake_provider.lake.config").joinpath("hudi_keys.txt").read_text("utf-8")
    header = [line for line in text.splitlines() if line.startswith("#")]
    names = [line for line in text.splitlines() if not line.startswith("#")]
    assert "website/docs/configurations.md" in " ".join(header)
    assert "website/versioned_docs/version-0.15.0/configurations.md" in " ".join(header)
    assert names == sorted(set(names)) and len(names) > 900
    assert all(n.startswith("hoodie.") and " " not in n for n in names)
    keys, families = known.hudi_keys()
    assert (len(keys), families) == (len(names) - 1, ("hoodie.streamer.jdbc.extra.options.",))
    # Both spellings of the clean retention (1.x's and 0.15's), and every hoodie. name the registry reads.
    assert {"hoodie.clean.commits.retained", "hoodie.cleaner.commits.retained"} <= keys
    assert {n for n in known.BY_NAME if n.startswith("hoodie.") and n not in keys} == set()
    assert known.is_hudi_key("hoodie.streamer.jdbc.extra.options.fetchsize")
    assert not known.is_hudi_key("hoodie.cleaner.commits.retaned")


def test_importing_operators_and_the_cli_does_not_read_the_key_list() -> None:
    code = (
        "import airflow_lake_provider.operators.clean, airflow_lake_provider.operators.rollback\n"
        "import airflow_lake_provider.lake.cli\n"
        "from airflow_lake_provider.lake.config.known import hudi_keys\n"
        "print('misses', hudi_keys.cache_info().misses)\n"
        "from airflow_lake_provider.lake.config import check_options\n"
        "check_options({'hoodie.auto.commit': 'false'})\n"
        "print('misses', hudi_keys.cache_info().misses)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    # (Airflow's own log lines may come first: its operators' import configures logging.)
    assert [line for line in out.splitlines() if line.startswith("misses ")] == ["misses 0", "misses 1"]


# -- check_options ---------------------------------------------------------------------------------
def test_real_hudi_keys_are_accepted_and_one_warning_names_them_not_the_registered_ones(
    logged: list[tuple[int, str]],
) -> None:
    check_options({"hoodie.cleaner.commits.retained": "3", **REAL, "hoodie.metadata.enable": "false"})
    assert logged == [
        (
            logging.WARNING,
            "ignoring Hudi options this provider does not use: hoodie.auto.commit, "
            "hoodie.compaction.payload.class, hoodie.clustering.inline, hoodie.avro.schema.validate, "
            "hoodie.merge.allow.duplicate.on.inserts, hoodie.rollback.parallelism, "
            "hoodie.write.markers.type",
        )
    ]


def test_other_engines_keys_are_not_judged_nor_named_as_ignored(logged: list[tuple[int, str]]) -> None:
    check_options({"write.tasks": "4", "compaction.async.enabled": "false", "hoodie.clustering.inline": "1"})
    assert logged == [
        (logging.WARNING, "ignoring Hudi options this provider does not use: hoodie.clustering.inline")
    ]


@pytest.mark.parametrize(
    ("key", "message"),
    [
        (
            "hoodie.cleaner.commits.retaned",
            "unknown option hoodie.cleaner.commits.retaned='3'; "
            "did you mean hoodie.cleaner.commits.retained?",
        ),
        (
            "hoodie.clean.commits.retaind",
            "unknown option hoodie.clean.commits.retaind='3'; did you mean hoodie.clean.commits.retained?",
        ),
        (
            "hoodie.keep.min.comits",
            "unknown option hoodie.keep.min.comits='3'; did you mean hoodie.keep.min.commits?",
        ),
        (
            "lake.partition-commit.late-data.recomit",
            "unknown option lake.partition-commit.late-data.recomit='3'; "
            "did you mean lake.partition-commit.late-data.recommit?",
        ),
        ("lake.nothing.like.it", "unknown option lake.nothing.like.it='3' (every option: docs/options.md)"),
    ],
)
def test_a_typo_beside_real_hudi_keys_is_refused_naming_the_nearest_registered_key(
    key: str, message: str, logged: list[tuple[int, str]]
) -> None:
    with pytest.raises(ConfigError) as caught:
        check_options({**REAL, key: "3"})
    assert str(caught.value) == message
    assert logged == []  # refused: nothing was ignored


@pytest.mark.parametrize(
    ("key", "near"),
    [("hoodie.markers.type", "hoodie.write.markers.type"), ("hoodie.auto.comit", "hoodie.auto.commit")],
)
def test_a_key_nearer_to_a_hudi_key_than_to_ours_names_that_key_as_ignored(key: str, near: str) -> None:
    with pytest.raises(ConfigError) as caught:
        check_options({key: "1"})
    assert str(caught.value) == (
        f"unknown option {key}='1'; did you mean {near} (a Hudi option this provider ignores)?"
    )


@pytest.mark.parametrize(
    ("key", "message"),
    [
        # Hudi's keys are case-sensitive: nothing would read these, the clean would keep 10 commits.
        (
            "HOODIE.CLEANER.COMMITS.RETAINED",
            "unknown option 'HOODIE.CLEANER.COMMITS.RETAINED'='1'; "
            "did you mean hoodie.cleaner.commits.retained?",
        ),
        (
            "Hoodie.keep.min.commits",
            "unknown option 'Hoodie.keep.min.commits'='1'; did you mean hoodie.keep.min.commits?",
        ),
        # An operator's options= dict is not stripped as the CLI's --option is.
        (
            " hoodie.cleaner.policy",
            "unknown option ' hoodie.cleaner.policy'='1'; did you mean hoodie.cleaner.policy?",
        ),
        # One slip from a registered Flink name.
        (
            "clean.retain_commit",
            "unknown option 'clean.retain_commit'='1'; did you mean clean.retain_commits?",
        ),
        ("archive.min_commit", "unknown option 'archive.min_commit'='1'; did you mean archive.min_commits?"),
        (
            "clean.retain_commits ",
            "unknown option 'clean.retain_commits '='1'; did you mean clean.retain_commits?",
        ),
    ],
)
def test_a_case_or_space_variant_or_a_flink_name_slip_of_ours_is_refused(key: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        check_options({key: "1"})
    assert str(caught.value) == message


def test_the_cli_refuses_an_upper_case_retention_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _table(tmp_path)
    before = tree_digest(path)
    code = main(["clean", str(path), "--option", "HOODIE.CLEANER.COMMITS.RETAINED=1"])
    assert (code, capsys.readouterr().err) == (
        1,
        "lake: error: unknown option 'HOODIE.CLEANER.COMMITS.RETAINED'='1'; "
        "did you mean hoodie.cleaner.commits.retained?\n",
    )
    assert tree_digest(path) == before


# -- through the CLI and an operator -------------------------------------------------------------
def test_the_cli_accepts_a_copied_hudi_option_and_warns_that_it_is_ignored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], logged: list[tuple[int, str]]
) -> None:
    path = _table(tmp_path)
    code = main(["clean", str(path), "--option", "hoodie.precombine.field=ts"])
    out = capsys.readouterr()
    assert code == 0 and "error" not in out.err
    assert '"outcome": "NO_WORK"' in out.out
    assert logged == [
        (logging.WARNING, "ignoring Hudi options this provider does not use: hoodie.precombine.field")
    ]


def test_the_cli_refuses_a_misspelt_retention_beside_real_keys_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _table(tmp_path)
    before = tree_digest(path)
    argv = ["clean", str(path), "--option", "hoodie.auto.commit=false"]
    code = main([*argv, "--option", "hoodie.cleaner.commits.retaned=3"])
    assert (code, capsys.readouterr().err) == (
        1,
        "lake: error: unknown option hoodie.cleaner.commits.retaned='3'; "
        "did you mean hoodie.cleaner.commits.retained?\n",
    )
    assert tree_digest(path) == before


def test_an_operator_runs_with_copied_hudi_options_and_logs_them_as_ignored(
    tmp_path: Path, logged: list[tuple[int, str]]
) -> None:
    from airflow_lake_provider.operators.rollback import RollbackFailedWritesOperator

    path = _table(tmp_path)
    task = RollbackFailedWritesOperator(
        task_id="rollback", table_path=str(path), options={"hoodie.rollback.parallelism": "10"}
    )
    assert task.execute({}) == {"outcome": "NO_WORK", "instant": None, "rollbacks": []}
    assert logged == [
        (logging.WARNING, "ignoring Hudi options this provider does not use: hoodie.rollback.parallelism")
    ]


@pytest.mark.parametrize("key", [3, None, ("hoodie.cleaner.commits.retained",)])
def test_an_option_name_that_is_not_a_string_is_refused(key: object) -> None:
    """Before, ``options={3: "x"}`` was passed over: no option reads a key that is not a string."""
    with pytest.raises(ConfigError, match=r"option names are strings: "):
        check_options({"hoodie.cleaner.policy": "KEEP_LATEST_COMMITS", key: "x"})  # type: ignore[dict-item]


@pytest.mark.parametrize(
    ("command", "options", "message"),
    [
        # The clean does not archive: the value was taken, and the next archival refused it.
        (
            ["clean", "--retained", "1"],
            ["hoodie.keep.min.commits=x"],
            "hoodie.keep.min.commits='x' is not a whole number",
        ),
        (
            ["clean", "--retained", "1"],
            ["hoodie.keep.max.commits=30", "archive.max_commits=40"],
            "hoodie.keep.max.commits='30' and archive.max_commits='40' set the same option to different "
            "values: give one",
        ),
        (
            ["archive"],
            ["hoodie.archive.automatic=yes"],
            "hoodie.archive.automatic='yes' is not true or false",
        ),
        (
            ["partition-commit", "--partition", "a"],
            ["hoodie.metadata.enable=yes"],
            "hoodie.metadata.enable='yes' is not true or false",
        ),
        (
            ["compact", "--mode", "schedule"],
            ["hoodie.cleaner.commits.retained=0"],
            "hoodie.cleaner.commits.retained=0 must be at least 1",
        ),
        # Values the reading service checks beyond their type (the registry's checked parsers).
        (
            ["clean", "--retained", "1"],
            ["hoodie.compaction.strategy=Bogus"],
            "hoodie.compaction.strategy: unknown strategy 'Bogus' (known: LogFileSizeBased, LogFileNumBased, "
            "BoundedIO, DayBased, DayBasedAndBoundedIO, BoundedPartitionAware, UnBoundedPartitionAware, "
            "UnBounded, PartitionRegexBased)",
        ),
        (["archive"], ["hoodie.index.bloom.fpp=NaN"], "hoodie.index.bloom.fpp must be in (0, 1), got nan"),
        (["archive"], ["hoodie.index.bloom.fpp=1"], "hoodie.index.bloom.fpp must be in (0, 1), got 1.0"),
        (
            ["archive"],
            ["hoodie.index.bloom.num_entries=1099511627776"],
            "hoodie.index.bloom.num_entries must be at most 2147483647, got 1099511627776",
        ),
        (
            ["archive"],
            ["hoodie.index.bloom.num_entries=0"],
            "hoodie.index.bloom.num_entries must be positive, got 0",
        ),
        (
            ["archive"],
            ["hoodie.bloom.index.filter.dynamic.max.entries=2147483648"],
            "hoodie.bloom.index.filter.dynamic.max.entries must be at most 2147483647, got 2147483648",
        ),
        (
            ["archive"],
            ["hoodie.bloom.index.filter.type=foo"],
            "hoodie.bloom.index.filter.type must be SIMPLE or DYNAMIC_V0, got 'FOO'",
        ),
        (
            ["clean", "--retained", "1"],
            ["sink.partition-commit.watermark-time-zone=Mars/Phobos"],
            "sink.partition-commit.watermark-time-zone='Mars/Phobos' is not a known time zone",
        ),
        (
            ["clean", "--retained", "1"],
            ["sink.partition-commit.policy.kind=success-file,bogus"],
            "sink.partition-commit.policy.kind: unknown policy 'bogus' (known: success-file, metastore, "
            "custom, merge-small-files)",
        ),
        (
            ["clean", "--retained", "1"],
            ["partition.time-extractor.kind=Bogus"],
            "partition.time-extractor.kind='bogus' is not default or custom",
        ),
        (
            ["clean", "--retained", "1"],
            ["sink.partition-commit.success-file.name=../x"],
            "sink.partition-commit.success-file.name='../x' is not a plain file name",
        ),
        (
            ["clean", "--retained", "1"],
            ["partition.time-extractor.timestamp-formatter=yyyy-yyyy"],
            "partition.time-extractor.timestamp-formatter='yyyy-yyyy': pattern field 'yyyy' is given more "
            "than once",
        ),
        (
            ["clean", "--retained", "1"],
            ["hoodie.compaction.partition.path.regex=a{4294967296}"],
            "hoodie.compaction.partition.path.regex='a{4294967296}' is not a regex this engine can compile "
            "(too large or too deep)",
        ),
    ],
    ids=[
        "clean-archival",
        "clean-archival-names",
        "archive-automatic",
        "partition-commit-mdt",
        "compact-clean",
        "clean-compaction-strategy",
        "archive-bloom-fpp-nan",
        "archive-bloom-fpp-one",
        "archive-bloom-entries-large",
        "archive-bloom-entries-zero",
        "archive-bloom-max-entries",
        "archive-bloom-type",
        "clean-time-zone",
        "clean-policy-kind",
        "clean-extractor-kind",
        "clean-success-file",
        "clean-formatter-repeated-field",
        "clean-regex-too-large",
    ],
)
def test_a_bad_value_of_a_registered_option_the_command_does_not_read_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str], options: list[str], message: str
) -> None:
    """Every registered key given is parsed, not only those the action reads: a bad value (or two
    names of one option at odds) is a mistake whichever command it reaches first."""
    import pyarrow as pa

    from airflow_lake_provider.lake.table.write import write

    path = tmp_path / "t"
    table = LakeTable.create(
        path,
        name="t",
        table_type="mor",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",),
    )
    for ts in (1, 2):
        write(table, pa.table({"id": ["k"], "ts": pa.array([ts], pa.int64()), "p": ["a"]}), "upsert")
    before = tree_digest(path)
    argv = [command[0], str(path), *command[1:]] + [a for o in options for a in ("--option", o)]
    code = main(argv)
    assert (code, capsys.readouterr().err) == (1, f"lake: error: {message}\n")
    assert tree_digest(path) == before
