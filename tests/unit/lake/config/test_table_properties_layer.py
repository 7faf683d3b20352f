"""Options a table's ``hoodie.properties`` holds (a table another writer set up) under the caller's:
the caller's value wins whichever name each side uses, and a bad value there is refused only by the
actions that read it, naming the file, before anything changes."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from compaction_support import DUE, batch, empty_mor
from tree_digest import tree_digest
from write_support import hudi_rows

from airflow_lake_provider.lake.errors import ArchivalConfigError, MetadataTableConfigError, WriteConfigError
from airflow_lake_provider.lake.format import bloom_filter
from airflow_lake_provider.lake.services.compaction.executor import execute_compaction
from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write


def _with_properties(path: Path, **extra: str) -> LakeTable:
    """The table at ``path`` reopened after ``extra`` keys were added to its hoodie.properties."""
    props = path / ".hoodie" / "hoodie.properties"
    props.write_text(props.read_text() + "".join(f"{k}={v}\n" for k, v in extra.items()))
    return LakeTable.open(path)


def test_a_write_options_flink_name_wins_over_the_properties_hoodie_key(tmp_path: Path) -> None:
    """hoodie.properties says hoodie.keep.max.commits=30, the caller archive.max_commits=40: two
    layers, not one option given twice (the write was refused as a conflict)."""
    table = empty_mor(tmp_path)
    write(table, batch(["a"], 1, "x"), "insert")
    table = _with_properties(tmp_path / "t", **{"hoodie.keep.max.commits": "30"})

    result = write(table, batch(["b"], 2, "x"), "upsert", options={"archive.max_commits": "40"})

    assert result.inserted == 1
    assert hudi_rows(tmp_path / "t", "id", "ts") == [("a", 1), ("b", 2)]


def test_a_write_options_bloom_setting_wins_over_a_bad_one_in_the_properties(tmp_path: Path) -> None:
    table = empty_mor(tmp_path)
    table = _with_properties(tmp_path / "t", **{"hoodie.index.bloom.fpp": "2"})

    result = write(table, batch(["a", "b"], 1, "x"), "insert", options={"hoodie.index.bloom.fpp": "0.01"})

    (path,) = (tmp_path / "t" / "x").glob("*.parquet")
    found = bloom_filter.from_footer(pq.ParquetFile(path).metadata.metadata)
    assert found is not None and found.might_contain(pa.array(["a", "b"])).tolist() == [True, True]
    expected = bloom_filter.BloomSettings.from_options({"hoodie.index.bloom.fpp": "0.01"})
    assert found.vector_size == expected.vector_size
    assert result.inserted == 2


def test_a_bad_bloom_setting_in_the_properties_leaves_the_table_readable(tmp_path: Path) -> None:
    """Readers size no filter: the table opens and reads (as hudi-rs reads it); the actions that
    write base files refuse it, naming hoodie.properties, before anything changes."""
    table = empty_mor(tmp_path)
    write(table, batch(["a", "b"], 1, "x"), "insert")
    write(table, batch(["a"], 2, "x"), "upsert")
    table = _with_properties(tmp_path / "t", **{"hoodie.index.bloom.fpp": "2"})
    before = tree_digest(tmp_path / "t")
    where = table.storage.uri(".hoodie/hoodie.properties")
    message = f"{where}: hoodie.index.bloom.fpp must be in (0, 1), got 2.0"

    assert sorted(read_snapshot(table).column("id").to_pylist()) == ["a", "b"]
    with pytest.raises(WriteConfigError) as refused:
        write(table, batch(["c"], 3, "x"), "upsert")
    assert str(refused.value) == message
    with pytest.raises(WriteConfigError) as refused:
        schedule_compaction(table, DUE)
    assert str(refused.value) == message
    assert tree_digest(tmp_path / "t") == before


def test_a_plan_scheduled_before_a_bad_bloom_setting_is_refused_before_it_starts(tmp_path: Path) -> None:
    table = empty_mor(tmp_path)
    write(table, batch(["a", "b"], 1, "x"), "insert")
    write(table, batch(["a"], 2, "x"), "upsert")
    assert schedule_compaction(table, DUE).plan is not None
    table = _with_properties(tmp_path / "t", **{"hoodie.index.bloom.num_entries": "0"})
    before = tree_digest(tmp_path / "t")

    with pytest.raises(WriteConfigError) as refused:
        execute_compaction(table)

    where = table.storage.uri(".hoodie/hoodie.properties")
    assert str(refused.value) == f"{where}: hoodie.index.bloom.num_entries must be positive, got 0"
    assert tree_digest(tmp_path / "t") == before


@pytest.mark.parametrize(
    ("extra", "action", "message"),
    [
        (
            {"hoodie.cleaner.commits.retained": "abc"},
            "clean",
            "hoodie.cleaner.commits.retained='abc' is not a whole number",
        ),
        (
            {"hoodie.cleaner.commits.retained": "3", "clean.retain_commits": "4"},
            "clean",
            "hoodie.cleaner.commits.retained='3' and clean.retain_commits='4' set the same option to "
            "different values: give one",
        ),
        (
            {"hoodie.compact.inline.trigger.strategy": "bogus"},
            "schedule",
            "hoodie.compact.inline.trigger.strategy='bogus' is not one of NUM_COMMITS, "
            "NUM_COMMITS_AFTER_LAST_REQUEST, TIME_ELAPSED, NUM_AND_TIME, NUM_OR_TIME",
        ),
    ],
    ids=["not-a-number", "two-names", "enum"],
)
def test_a_bad_value_the_properties_hold_is_refused_naming_the_file(
    tmp_path: Path, extra: dict[str, str], action: str, message: str
) -> None:
    """Not taken for a value the caller gave (who gave none): the message leads with the file."""
    from airflow_lake_provider.lake.errors import ConfigError
    from airflow_lake_provider.lake.services.clean.executor import run_clean

    table = empty_mor(tmp_path)
    write(table, batch(["a"], 1, "x"), "insert")
    table = _with_properties(tmp_path / "t", **extra)
    before = tree_digest(tmp_path / "t")
    with pytest.raises(ConfigError) as refused:
        if action == "clean":
            run_clean(table, {})
        else:
            schedule_compaction(table, {})
    assert str(refused.value) == f"{table.storage.uri('.hoodie/hoodie.properties')}: {message}"
    assert tree_digest(tmp_path / "t") == before
    # The caller's value wins over the file's bad one.
    if action == "clean":
        run_clean(table, {"hoodie.cleaner.commits.retained": "2"})
    else:
        schedule_compaction(table, {"hoodie.compact.inline.trigger.strategy": "NUM_COMMITS"})


def test_two_options_refused_together_name_the_file_each_came_from(tmp_path: Path) -> None:
    """hoodie.properties holds hoodie.keep.min.commits=30; the caller's max of 25 is not above it:
    the refusal says which value the file gave, changing nothing."""
    table = empty_mor(tmp_path)
    write(table, batch(["a"], 1, "x"), "insert")
    table = _with_properties(tmp_path / "t", **{"hoodie.keep.min.commits": "30"})
    before = tree_digest(tmp_path / "t")
    props = table.store.storage.uri(".hoodie/hoodie.properties")
    with pytest.raises(ArchivalConfigError) as refused:
        write(table, batch(["b"], 2, "x"), "upsert", options={"hoodie.keep.max.commits": "25"})
    assert str(refused.value) == (
        f"hoodie.keep.max.commits=25 must be greater than hoodie.keep.min.commits=30 (in {props})"
    )
    assert tree_digest(tmp_path / "t") == before


def test_a_drop_and_maintain_given_in_different_places_are_named_where(tmp_path: Path) -> None:
    table = empty_mor(tmp_path)
    table = _with_properties(tmp_path / "t", **{"lake.metadata-table.maintain": "true"})
    props = table.store.storage.uri(".hoodie/hoodie.properties")
    with pytest.raises(MetadataTableConfigError) as refused:
        write(table, batch(["a"], 1, "x"), "insert", options={"hoodie.metadata.enable": "false"})
    assert str(refused.value) == (
        "hoodie.metadata.enable=false drops the metadata table, "
        f"lake.metadata-table.maintain=true (in {props}) keeps it up to date: give one of them, not both"
    )
