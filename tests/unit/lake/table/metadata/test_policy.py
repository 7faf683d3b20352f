"""Tables with Hudi's metadata table (MDT): every mutating ``lake`` command refuses before it writes
anything (one error line, the tree byte-identical), read-only ones keep working, and the opt-in drop
(``hoodie.metadata.enable=false`` or ``lake metadata-table --drop``) does what Hudi's writers do, with
a crash at every durable step leaving a table that the next run finishes.

The tables are copies of every Spark-written table of ``tests/data/hudi-tables`` with an MDT added
(``hoodie.table.metadata.partitions=files`` and ``.hoodie/metadata/``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from crash_support import crashing, steps_of
from hudi import HudiTableBuilder
from lake_processes import lake_all
from metadata_table_support import MDT_FILES, SPARK_TABLES, add_metadata_table, tree_digest
from s3_helpers import hudi_s3_options, s3_client, s3_objects

from airflow_lake_provider.lake.cli import main
from airflow_lake_provider.lake.errors import TableConfigError
from airflow_lake_provider.lake.format.properties import parse_properties, table_checksum
from airflow_lake_provider.lake.services.clean.executor import run_clean
from airflow_lake_provider.lake.services.compaction.executor import run_compaction
from airflow_lake_provider.lake.storage import SimulatedCrash
from airflow_lake_provider.lake.table.archival.executor import run_archival
from airflow_lake_provider.lake.table.metadata.policy import (
    MetadataTablePolicy,
    detect,
    drop_metadata_table,
    guard_mutation,
    maintain_asked,
)
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable

REPO_ROOT = Path(__file__).resolve().parents[5]
MOR = "morparquet_v6_simplekeygen_nonhivestyle"


def _mdt_table(hudi_table_zip: Callable[[str], Path], name: str, **kwargs: object) -> Path:
    path = hudi_table_zip(name)
    add_metadata_table(path, **kwargs)  # type: ignore[arg-type]
    return path


def _ours(location: str | Path) -> list[dict]:
    table = read_snapshot(LakeTable.open(location))
    return sorted(table.to_pylist(), key=lambda r: (r["_hoodie_partition_path"], r["_hoodie_record_key"]))


def _hudi_rs(uri: str, options: dict[str, str] | None = None) -> list[dict]:
    builder = HudiTableBuilder.from_base_uri(uri)
    if options:
        builder = builder.with_storage_options(options)
    batches = builder.build().read()
    rows = pa.Table.from_batches(batches).to_pylist() if batches else []
    return sorted(rows, key=lambda r: (r["_hoodie_partition_path"], r["_hoodie_record_key"]))


def _same_rows(ours: list[dict], theirs: list[dict]) -> None:
    assert [{k: r[k] for k in sorted(r)} for r in ours] == [{k: r[k] for k in sorted(r)} for r in theirs]


# -- refusal through the CLI ----------------------------------------------------------------------
def _mutating_commands(t: str, data: str) -> dict[str, list[str]]:
    return {
        "write (insert)": ["write", t, "--input", data, "--operation", "insert"],
        "write (upsert)": ["write", t, "--input", data, "--operation", "upsert"],
        "write (delete)": ["write", t, "--input", data, "--operation", "delete"],
        "compaction schedule": ["compact", t, "--mode", "schedule", "--force"],
        "compaction execute": ["compact", t, "--mode", "execute"],
        "clean": ["clean", t, "--policy", "KEEP_LATEST_FILE_VERSIONS", "--retained", "1"],
        "rollback": ["rollback", t],
        "restore": ["restore", t, "--savepoint", "20240101000000000"],
        "archival": [
            "archive",
            t,
            "--option",
            "hoodie.keep.min.commits=1",
            "--option",
            "hoodie.keep.max.commits=2",
        ],
        "partition commit (merge-small-files)": [
            "partition-commit",
            t,
            "--partition",
            "10",
            "--policy",
            "merge-small-files",
        ],
    }


@pytest.mark.parametrize("name", SPARK_TABLES)
def test_every_mutating_command_refuses_with_one_line_and_changes_nothing(
    hudi_table_zip: Callable[[str], Path], tmp_path: Path, name: str
) -> None:
    path = _mdt_table(hudi_table_zip, name)
    t = str(path)
    data = str(tmp_path / "in.parquet")
    pq.write_table(pa.table({"id": [1]}), data)
    mor = "morparquet" in name or "moravro" in name
    commands = _mutating_commands(t, data)
    if not mor:  # compaction scheduling of a copy-on-write table is NO_WORK (nothing to write)
        commands.pop("compaction schedule")
    before = tree_digest(path)
    results = lake_all(*commands.values())
    assert tree_digest(path) == before
    for action, result in zip(commands, results, strict=True):
        assert result.returncode == 1, (action, result.stdout, result.stderr)
        assert result.stdout == ""
        lines = result.stderr.splitlines()
        assert len(lines) == 1, (action, result.stderr)
        if name == "cow_v6_timebasedkeygen_nonhivestyle" and action.startswith("write"):
            # Refused one check earlier: our writer cannot derive this key generator's keys.
            assert "TimestampBasedKeyGenerator is not supported by this writer" in lines[0]
            continue
        # The stand-in is no MDT of this table (its properties name no table version): refused as the
        # default cannot keep it, before any lock file.
        assert lines[0].startswith(
            f"lake: error: {action} refused: {t} has Hudi's metadata table "
            "(partitions [files], folder .hoodie/metadata/), which this engine keeps up to date by "
            f"default, but cannot for this action: {t}/.hoodie/metadata/.hoodie/hoodie.properties: not the "
            "metadata table of this table: table version (none), not its data table's 6; the action would "
        ), lines[0]
        assert "run with option hoodie.metadata.enable=false" in lines[0]
        assert f"'lake metadata-table {t} --drop'" in lines[0]


def test_read_only_commands_still_work_on_a_table_with_a_metadata_table(
    hudi_table_zip: Callable[[str], Path], tmp_path: Path
) -> None:
    path = _mdt_table(hudi_table_zip, MOR)
    t = str(path)
    before = tree_digest(path)
    out = str(tmp_path / "out.parquet")
    read, timeline, clean, compact, show = lake_all(
        ["read", t, "--output", out],
        ["timeline", t],
        ["clean", t, "--policy", "KEEP_LATEST_FILE_VERSIONS", "--retained", "1", "--dry-run"],
        ["compact", t, "--mode", "schedule", "--force", "--dry-run"],
        ["metadata-table", t],
    )
    # Read-only and dry-run commands write nothing at all (a dry run takes no lock either).
    assert tree_digest(path) == before
    for result in (read, timeline, clean, compact, show):
        assert (result.returncode, result.stderr) == (0, "")
    assert pq.read_table(out).num_rows == len(_hudi_rs(t))
    assert timeline.stdout.splitlines() == [
        "20250121000547796  deltacommit    COMPLETED",
        "20250121000557095  deltacommit    COMPLETED",
    ]
    assert '"outcome": "NO_WORK"' in clean.stdout  # only the compaction would make a version to clean
    assert '"outcome": "PLANNED"' in compact.stdout  # a dry run's outcome
    assert show.stdout.splitlines() == [
        "partitions: files",
        "inflight partitions: -",
        f"folder {t}/.hoodie/metadata: present",
        "metadata instants: 4",
        "  00000000000000010.deltacommit",
        "  20250101000000000.deltacommit",
        "  20250101000000000.deltacommit.inflight",
        "  20250101000000000.deltacommit.requested",
        "latest metadata instant: 20250101000000000",
        "latest data instant: 20250121000557095",
    ]


def test_detection_by_inflight_partitions_or_folder_alone(hudi_table_zip: Callable[[str], Path]) -> None:
    inflight = hudi_table_zip("cow_v6_nonpartitioned")
    props = inflight / ".hoodie" / "hoodie.properties"
    props.write_text(props.read_text() + "hoodie.table.metadata.partitions.inflight=files,column_stats\n")
    state = detect(LakeTable.open(inflight))
    assert (state.partitions, state.inflight_partitions, state.folder_exists) == (
        (),
        ("files", "column_stats"),
        False,
    )
    folder = hudi_table_zip("morparquet_v6_nonpartitioned")
    (folder / ".hoodie" / "metadata").mkdir()
    state = detect(LakeTable.open(folder))
    assert (state.partitions, state.inflight_partitions, state.folder_exists) == ((), (), True)
    for path in (inflight, folder):
        table = LakeTable.open(path)
        before = tree_digest(path)
        with pytest.raises(TableConfigError, match="clean refused"):
            run_clean(table, {"hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS"})
        assert tree_digest(path) == before


def test_archival_never_runs_while_a_metadata_table_exists(hudi_table_zip: Callable[[str], Path]) -> None:
    path = _mdt_table(hudi_table_zip, "cow_v6_nonpartitioned")
    before = tree_digest(path)
    with pytest.raises(TableConfigError, match="^archival refused: "):
        run_archival(LakeTable.open(path), {"hoodie.keep.min.commits": "1", "hoodie.keep.max.commits": "2"})
    assert tree_digest(path) == before


def test_policy_is_decided_by_hoodie_metadata_enable_then_maintain() -> None:
    # Maintain is the default; lake.metadata-table.maintain=false refuses; enable=false drops.
    assert MetadataTablePolicy.from_options({}) is MetadataTablePolicy.MAINTAIN
    assert (
        MetadataTablePolicy.from_options({"hoodie.metadata.enable": "true"}) is MetadataTablePolicy.MAINTAIN
    )
    assert MetadataTablePolicy.from_options({"hoodie.metadata.enable": "FALSE"}) is MetadataTablePolicy.DROP
    off = {"lake.metadata-table.maintain": "false"}
    assert MetadataTablePolicy.from_options(off) is MetadataTablePolicy.REFUSE
    assert MetadataTablePolicy.from_options(off, {"lake.metadata-table.maintain": "TRUE"}) is (
        MetadataTablePolicy.MAINTAIN
    )
    assert (
        MetadataTablePolicy.from_options({**off, "hoodie.metadata.enable": "false"})
        is MetadataTablePolicy.DROP
    )
    assert (
        MetadataTablePolicy.from_options(
            {"hoodie.metadata.enable": "false"}, {"hoodie.metadata.enable": "true"}
        )
        is MetadataTablePolicy.MAINTAIN
    )
    assert (
        maintain_asked({}),
        maintain_asked({}, off),
        maintain_asked({"lake.metadata-table.maintain": " "}),
    ) == (
        False,
        True,
        False,
    )
    with pytest.raises(TableConfigError, match=r"hoodie.metadata.enable='off' is not true or false"):
        MetadataTablePolicy.from_options({"hoodie.metadata.enable": "off"})


CONTRADICTION = (
    "hoodie.metadata.enable=false drops the metadata table, lake.metadata-table.maintain=true keeps it up "
    "to date: give one of them, not both"
)


def test_a_drop_with_maintain_given_true_is_refused_in_any_layers() -> None:
    """The drop deletes what maintain=true asks to keep: neither wins silently, wherever each is set
    (a connection's extra, the operator's options). maintain=false, or unset, with the drop drops."""
    drop, keep = {"hoodie.metadata.enable": "false"}, {"lake.metadata-table.maintain": "true"}
    for layers in ([{**drop, **keep}], [keep, drop], [drop, keep], [{}, keep, {}, drop]):
        with pytest.raises(TableConfigError) as raised:
            MetadataTablePolicy.from_options(*layers)
        assert str(raised.value) == CONTRADICTION
    assert MetadataTablePolicy.from_options(drop, {"lake.metadata-table.maintain": "false"}) is (
        MetadataTablePolicy.DROP
    )
    assert MetadataTablePolicy.from_options(keep, {"hoodie.metadata.enable": "true"}) is (
        MetadataTablePolicy.MAINTAIN
    )


def test_cli_write_asked_to_drop_and_maintain_refuses_with_one_line_and_changes_nothing(
    hudi_table_zip: Callable[[str], Path], tmp_path: Path
) -> None:
    path = _mdt_table(hudi_table_zip, MOR)
    existing = read_snapshot(LakeTable.open(path))
    one = existing.filter(pa.compute.equal(existing.column("id"), 1))
    data = str(tmp_path / "in.parquet")
    pq.write_table(one.drop_columns([c for c in one.column_names if c.startswith("_hoodie_")]), data)
    before = tree_digest(path)
    both = ["--option", "hoodie.metadata.enable=false", "--option", "lake.metadata-table.maintain=true"]
    (result,) = lake_all(["write", str(path), "--input", data, "--operation", "upsert", *both])
    assert (result.returncode, result.stderr) == (1, f"lake: error: {CONTRADICTION}\n")
    assert tree_digest(path) == before


# -- the drop ---------------------------------------------------------------------------------------
def _expected_props(original: dict[str, str]) -> dict[str, str]:
    want = {
        **original,
        "hoodie.table.metadata.partitions": "",
        "hoodie.table.metadata.partitions.inflight": "",
    }
    want["hoodie.table.checksum"] = str(table_checksum(want))
    return want


def test_option_drops_the_metadata_table_as_hudi_does_then_the_clean_runs(
    hudi_table_zip: Callable[[str], Path],
) -> None:
    path = hudi_table_zip("cow_v6_simplekeygen_nonhivestyle")
    original = parse_properties((path / ".hoodie" / "hoodie.properties").read_text())
    add_metadata_table(path)
    rows = _ours(path)
    table = LakeTable.open(path)
    result = run_clean(
        table,
        {
            "hoodie.metadata.enable": "false",
            "hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS",
            "hoodie.cleaner.fileversions.retained": "1",
        },
    )
    props = parse_properties((path / ".hoodie" / "hoodie.properties").read_text())
    assert props == _expected_props(original)
    assert props["hoodie.table.checksum"] == original["hoodie.table.checksum"]  # name-only checksum
    assert not (path / ".hoodie" / "metadata").exists()
    assert not (path / ".hoodie" / "hoodie.properties.backup").exists()
    assert result.outcome.value == "CLEANED"
    assert result.deleted_files == 1
    assert table.config.properties["hoodie.table.metadata.partitions"] == ""
    assert _ours(path) == rows
    _same_rows(_ours(path), _hudi_rs(str(path)))


def test_compaction_with_the_option_drops_then_compacts(hudi_table_zip: Callable[[str], Path]) -> None:
    path = _mdt_table(hudi_table_zip, MOR)
    rows = _ours(path)
    options = {"hoodie.metadata.enable": "false", "hoodie.compact.inline.max.delta.commits": "1"}
    _, executed = run_compaction(LakeTable.open(path), options)
    assert executed.outcome.value == "COMPLETED"
    assert not (path / ".hoodie" / "metadata").exists()
    assert executed.files[0].rpartition("/")[2] in {r["_hoodie_file_name"] for r in _ours(path)}

    def data(table_rows: list[dict]) -> list[dict]:
        return [{k: v for k, v in r.items() if k != "_hoodie_file_name"} for r in table_rows]

    assert data(_ours(path)) == data(rows)
    _same_rows(_ours(path), _hudi_rs(str(path)))


def test_cli_drop_prints_what_it_dropped_and_the_jvm_writers_notice(
    hudi_table_zip: Callable[[str], Path],
) -> None:
    path = _mdt_table(hudi_table_zip, "cow_v6_nonpartitioned")
    t = str(path)
    (drop,) = lake_all(["metadata-table", t, "--drop"])
    assert drop.returncode == 0, drop.stderr
    assert drop.stdout == (
        f"dropped Hudi's metadata table of {t} (partitions [files], folder .hoodie/metadata/) as "
        "hoodie.metadata.enable=false asks; Spark/Flink writers of this table must run with "
        "hoodie.metadata.enable=false too, or their next commit rebuilds the metadata table from a "
        "full listing\n"
    )
    again, show = lake_all(["metadata-table", t, "--drop"], ["metadata-table", t])
    assert again.stdout == f"{t} has no metadata table; nothing to drop\n"
    assert show.stdout == f"{t}: no metadata table\n"


def test_drop_waits_for_no_live_writer(hudi_table_zip: Callable[[str], Path]) -> None:
    """A pending write whose heartbeat is fresh belongs to a running writer: the drop refuses, and
    nothing changes; once its heartbeat expires (or for a write without one) the drop proceeds."""
    path = _mdt_table(hudi_table_zip, "cow_v6_nonpartitioned")
    (path / ".hoodie" / "20250101000000000.commit.requested").write_bytes(b"")
    (path / ".hoodie" / ".heartbeat").mkdir()
    beat = path / ".hoodie" / ".heartbeat" / "20250101000000000"
    import time

    beat.write_text(str(time.time_ns() // 1_000_000))
    before = tree_digest(path)
    with pytest.raises(TableConfigError, match=r"20250101000000000\.commit\.requested"):
        drop_metadata_table(LakeTable.open(path))
    after = tree_digest(path)
    # The locks' (empty) files are the only trace.
    assert {k: v for k, v in after.items() if not k.endswith(".lock")} == before
    beat.unlink()
    assert drop_metadata_table(LakeTable.open(path)) is not None
    assert not (path / ".hoodie" / "metadata").exists()


def test_guard_dry_run_and_tables_without_a_metadata_table_do_nothing(
    hudi_table_zip: Callable[[str], Path],
) -> None:
    plain = hudi_table_zip("cow_v6_nonpartitioned")
    assert guard_mutation(LakeTable.open(plain), "clean") is None
    path = _mdt_table(hudi_table_zip, MOR)
    before = tree_digest(path)
    assert (
        guard_mutation(LakeTable.open(path), "clean", {"hoodie.metadata.enable": "false"}, dry_run=True)
        is None
    )
    assert tree_digest(path) == before


# -- hoodie.properties backup recovery ------------------------------------------------------------
def test_open_reads_the_backup_when_hoodie_properties_is_missing(
    hudi_table_zip: Callable[[str], Path],
) -> None:
    path = hudi_table_zip("cow_v6_nonpartitioned")
    props = path / ".hoodie" / "hoodie.properties"
    text = props.read_text().replace("hoodie.table.name=", "hoodie.table.name=from_backup_")
    props.unlink()
    (path / ".hoodie" / "hoodie.properties.backup").write_text(text)
    table = LakeTable.open(path)
    assert table.config.name.startswith("from_backup_")
    assert table.config.properties == parse_properties(text)
    assert len(read_snapshot(table).to_pylist()) == 4
    assert not props.exists()  # a reader never writes


def test_hoodie_properties_wins_over_a_leftover_backup(hudi_table_zip: Callable[[str], Path]) -> None:
    path = hudi_table_zip("cow_v6_nonpartitioned")
    (path / ".hoodie" / "hoodie.properties.backup").write_text("hoodie.table.name=stale\n")
    assert LakeTable.open(path).config.name == "v6_nonpartitioned"


# -- crash at every durable step of the drop ------------------------------------------------------
def _drop_steps(path: Path) -> list[str]:
    counter = crashing(LakeTable.open(path))
    drop_metadata_table(counter)
    return steps_of(counter)


def test_drop_steps_follow_hudis_protocol(hudi_table_zip: Callable[[str], Path]) -> None:
    steps = _drop_steps(_mdt_table(hudi_table_zip, MOR))
    mdt_files = [f".hoodie/metadata/{rel}" for rel in MDT_FILES]
    assert steps[:3] == [
        "write .hoodie/hoodie.properties.backup",
        "write .hoodie/hoodie.properties",
        "delete .hoodie/hoodie.properties.backup",
    ]
    assert sorted(steps[3:-1]) == sorted(f"delete {rel}" for rel in mdt_files)
    assert steps[-1] == "delete .hoodie/metadata"


def _check_after_crash(location: str, rows: list[dict], hudi_options: dict | None) -> None:
    _same_rows(_ours(location), rows)
    _same_rows(_hudi_rs(location, hudi_options), rows)


def test_crash_at_every_durable_step_of_the_drop_on_local_disk(
    hudi_table_zip: Callable[[str], Path], tmp_path: Path
) -> None:
    template = _mdt_table(hudi_table_zip, MOR)
    original = parse_properties((template / ".hoodie" / "hoodie.properties").read_text())
    rows = _ours(template)
    _same_rows(rows, _hudi_rs(str(template)))
    steps = _drop_steps(_copy(template, tmp_path / "count"))
    assert len(steps) == 3 + len(MDT_FILES) + 1
    for step in range(1, len(steps) + 1):
        path = _copy(template, tmp_path / f"crash{step}")
        with pytest.raises(SimulatedCrash):
            drop_metadata_table(crashing(LakeTable.open(path), step))
        assert (path / ".hoodie" / "hoodie.properties").exists()  # replaced atomically, never deleted
        _check_after_crash(str(path), rows, None)
        left = (path / ".hoodie" / "metadata").exists()
        assert left == (step < len(steps))  # the last step removed the (emptied) folder itself
        if left:
            before = tree_digest(path)
            with pytest.raises(TableConfigError, match="clean refused"):  # still refused until dropped
                run_clean(LakeTable.open(path), {"hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS"})
            assert tree_digest(path) == before
        dropped = drop_metadata_table(LakeTable.open(path))  # the rerun finishes the drop
        assert (dropped is not None) == left
        assert not (path / ".hoodie" / "metadata").exists()
        assert not (path / ".hoodie" / "hoodie.properties.backup").exists()
        props = parse_properties((path / ".hoodie" / "hoodie.properties").read_text())
        assert props == _expected_props(original), step
        _same_rows(_ours(path), rows)
        _same_rows(_hudi_rs(str(path)), rows)


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def _upload(path: Path, endpoint: str, bucket: str, prefix: str) -> str:
    client = s3_client(endpoint)
    for folder, _dirs, files in os.walk(path):
        for name in files:
            full = Path(folder) / name
            client.put_object(Bucket=bucket, Key=f"{prefix}/{full.relative_to(path)}", Body=full.read_bytes())
    return f"s3://{bucket}/{prefix}"


def test_crash_at_every_durable_step_of_the_drop_on_s3(
    hudi_table_zip: Callable[[str], Path], s3_endpoint: str, s3_bucket: str
) -> None:
    template = _mdt_table(hudi_table_zip, MOR)
    original = parse_properties((template / ".hoodie" / "hoodie.properties").read_text())
    rows = _ours(template)
    options = hudi_s3_options(s3_endpoint)
    count_uri = _upload(template, s3_endpoint, s3_bucket, "count")
    counter = crashing(LakeTable.open(count_uri))
    drop_metadata_table(counter)
    steps = steps_of(counter)
    assert steps[:3] == [
        "write .hoodie/hoodie.properties.backup",
        "write .hoodie/hoodie.properties",
        "delete .hoodie/hoodie.properties.backup",
    ]
    assert len(steps) == 3 + len(MDT_FILES)  # S3 has no folders: nothing left to delete after the files
    for step in range(1, len(steps) + 1):
        prefix = f"crash{step}"
        uri = _upload(template, s3_endpoint, s3_bucket, prefix)
        with pytest.raises(SimulatedCrash):
            drop_metadata_table(crashing(LakeTable.open(uri), step))
        objects = s3_objects(s3_endpoint, s3_bucket, prefix + "/")
        assert ".hoodie/hoodie.properties" in objects  # replaced atomically, never deleted
        _check_after_crash(uri, rows, options)
        left = any(k.startswith(".hoodie/metadata/") for k in objects)
        assert left == (step < len(steps))
        assert (drop_metadata_table(LakeTable.open(uri)) is not None) == left
        objects = s3_objects(s3_endpoint, s3_bucket, prefix + "/")
        assert not [k for k in objects if k.startswith(".hoodie/metadata/") or k.endswith(".backup")]
        assert parse_properties(objects[".hoodie/hoodie.properties"].decode()) == _expected_props(original)
        _same_rows(_ours(uri), rows)
        _same_rows(_hudi_rs(uri, options), rows)


def test_cli_write_with_the_option_drops_then_writes_and_logs_the_notice(
    hudi_table_zip: Callable[[str], Path], tmp_path: Path
) -> None:
    path = _mdt_table(hudi_table_zip, MOR)
    t = str(path)
    existing = read_snapshot(LakeTable.open(path))
    one = existing.filter(pa.compute.equal(existing.column("id"), 1))
    one = one.drop_columns([c for c in one.column_names if c.startswith("_hoodie_")])
    data = str(tmp_path / "in.parquet")
    pq.write_table(one.set_column(one.schema.get_field_index("name"), "name", pa.array(["Zed"])), data)
    (result,) = lake_all(
        ["write", t, "--input", data, "--operation", "upsert", "--option", "hoodie.metadata.enable=false"]
    )
    assert result.returncode == 0, result.stderr
    [instant] = result.stdout.split()
    assert LakeTable.open(path).timeline().last_completed_commit.timestamp == instant
    [warning] = result.stderr.splitlines()
    assert warning.endswith(
        f"WARNING airflow_lake_provider.lake.table.metadata.policy: dropped Hudi's metadata table of {t} "
        "(partitions [files], folder .hoodie/metadata/) as hoodie.metadata.enable=false asks; Spark/Flink "
        "writers of this table must run with hoodie.metadata.enable=false too, or their next commit "
        "rebuilds the metadata table from a full listing"
    )
    assert not (path / ".hoodie" / "metadata").exists()
    names = {r["id"]: r["name"] for r in _ours(path)}
    assert names == {**{r["id"]: r["name"] for r in existing.to_pylist()}, 1: "Zed"}
    _same_rows(_ours(path), _hudi_rs(t))


def test_the_drop_holds_every_lock_a_service_takes() -> None:
    """Every ``store.exclusive(...)`` in the code names a lock the drop takes (a new service lock
    must join ``ALL_SERVICE_LOCKS``), except the instant-time lock held only while a file is created."""
    import re

    from airflow_lake_provider.lake.services.compaction.executor import EXECUTE_LOCK
    from airflow_lake_provider.lake.services.compaction.scheduler import SCHEDULE_LOCK
    from airflow_lake_provider.lake.services.partition_commit.target import LOCK
    from airflow_lake_provider.lake.table.metadata.policy import ALL_SERVICE_LOCKS
    from airflow_lake_provider.lake.timeline.store import WRITE_LOCK

    names = {
        "WRITE_LOCK": WRITE_LOCK,
        "SCHEDULE_LOCK": SCHEDULE_LOCK,
        "EXECUTE_LOCK": EXECUTE_LOCK,
        "LOCK": LOCK,
    }
    used = set()
    for source in (REPO_ROOT / "airflow_lake_provider").rglob("*.py"):
        text = source.read_text()
        # ``.exclusive(...)`` and compaction's ``service_lock(table, X, dry_run)`` (no lock for a dry run).
        args = re.findall(r"\.exclusive\(([^,)]+)", text)
        args += re.findall(r"\bservice_lock\(table, ([^,)]+)", text)
        for arg in args:
            # the drop's loop; the instant-time lock; service_lock's parameter
            if arg in ("name", '"instant"', "service"):
                continue
            used.add(names[arg] if arg in names else arg.strip('"'))
    assert used == set(ALL_SERVICE_LOCKS)


# -- adversarial MDT shapes ---------------------------------------------------------------------------
def test_drop_of_a_linked_metadata_folder_deletes_the_link_never_what_it_points_to(
    hudi_table_zip: Callable[[str], Path], tmp_path: Path
) -> None:
    """``.hoodie/metadata`` a symbolic link to a folder outside the table: the drop removes the link
    (as Hadoop's local file system deletes a link), and every file outside the table stays."""
    path = _mdt_table(hudi_table_zip, MOR, files=False)
    (path / ".hoodie" / "metadata" / "files").rmdir()
    (path / ".hoodie" / "metadata").rmdir()
    outside = tmp_path / "outside"
    (outside / "files").mkdir(parents=True)
    (outside / "files" / "precious.hfile").write_bytes(b"not the table's")
    (outside / "top.txt").write_bytes(b"not the table's either")
    (path / ".hoodie" / "metadata").symlink_to(outside, target_is_directory=True)
    kept = tree_digest(outside)
    rows = _ours(path)
    (drop,) = lake_all(["metadata-table", str(path), "--drop"])
    assert drop.returncode == 0, drop.stderr
    assert tree_digest(outside) == kept
    assert not os.path.lexists(path / ".hoodie" / "metadata")
    assert not detect(LakeTable.open(path)).present
    _same_rows(_ours(path), rows)
    _same_rows(_hudi_rs(str(path)), rows)


def test_drop_of_a_metadata_file_in_place_of_the_folder_removes_it(
    hudi_table_zip: Callable[[str], Path],
) -> None:
    """A file named ``.hoodie/metadata`` is detected as an MDT: the drop must remove it, not report a
    drop that left it there (every later action would be refused or "drop" it again)."""
    path = _mdt_table(hudi_table_zip, MOR, files=False)
    (path / ".hoodie" / "metadata" / "files").rmdir()
    (path / ".hoodie" / "metadata").rmdir()
    (path / ".hoodie" / "metadata").write_bytes(b"stray")
    (drop,) = lake_all(["metadata-table", str(path), "--drop"])
    assert drop.returncode == 0, drop.stderr
    assert drop.stdout.startswith(f"dropped Hudi's metadata table of {path} (partitions [files], folder")
    assert not os.path.lexists(path / ".hoodie" / "metadata")
    (show,) = lake_all(["metadata-table", str(path)])
    assert show.stdout == f"{path}: no metadata table\n"


def test_a_bad_hoodie_metadata_enable_fails_alike_with_or_without_a_metadata_table(
    hudi_table_zip: Callable[[str], Path],
) -> None:
    """``hoodie.metadata.enable=0`` is refused on a table with an MDT; the same DAG must not pass on a
    table without one (and start failing the day a Spark writer adds one)."""
    for path in (hudi_table_zip("cow_v6_nonpartitioned"), _mdt_table(hudi_table_zip, MOR)):
        before = tree_digest(path)
        for value in ("0", "no", "off"):
            with pytest.raises(
                TableConfigError, match=rf"^hoodie.metadata.enable='{value}' is not true or false$"
            ):
                run_clean(
                    LakeTable.open(path),
                    {"hoodie.metadata.enable": value, "hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS"},
                )
        assert tree_digest(path) == before


def test_drop_on_s3_deletes_an_object_named_like_the_metadata_folder(
    hudi_table_zip: Callable[[str], Path], s3_endpoint: str, s3_bucket: str
) -> None:
    """On S3 an object ``.hoodie/metadata`` (no folder) is detected as an MDT like a folder is: the
    drop deletes it with the folder's objects, not only the keys under ``.hoodie/metadata/``."""
    template = _mdt_table(hudi_table_zip, MOR)
    rows = _ours(template)
    uri = _upload(template, s3_endpoint, s3_bucket, "named")
    s3_client(s3_endpoint).put_object(Bucket=s3_bucket, Key="named/.hoodie/metadata", Body=b"stray")
    assert drop_metadata_table(LakeTable.open(uri)) is not None
    objects = s3_objects(s3_endpoint, s3_bucket, "named/")
    assert [k for k in objects if k.startswith(".hoodie/metadata")] == []
    assert not detect(LakeTable.open(uri)).present
    _same_rows(_hudi_rs(uri, hudi_s3_options(s3_endpoint)), rows)


def test_cli_json_results_say_the_metadata_table_was_dropped(
    hudi_table_zip: Callable[[str], Path],
) -> None:
    """The JSON a ``lake`` command prints (what a script keeps) names the drop and the notice, not
    only a log line on stderr."""
    import json

    template = hudi_table_zip(MOR)
    option = ["--option", "hoodie.metadata.enable=false"]
    commands = {
        "clean": ["clean", "--policy", "KEEP_LATEST_FILE_VERSIONS", "--retained", "1", *option],
        "compact": ["compact", "--mode", "run", "--force", *option],
        "archive": ["archive", *option],
        "partition-commit": [
            "partition-commit",
            "--partition",
            "10",
            "--policy",
            "merge-small-files",
            *option,
        ],
    }
    paths = {name: _copy(template, template.parent / name) for name in commands}
    for path in paths.values():
        add_metadata_table(path)
    results = lake_all(*([argv[0], str(paths[name]), *argv[1:]] for name, argv in commands.items()))
    for name, result in zip(commands, results, strict=True):
        assert result.returncode == 0, (name, result.stderr)
        t = str(paths[name])
        assert json.loads(result.stdout)["metadata_table_dropped"] == {
            "table": t,
            "partitions": ["files"],
            "inflight_partitions": [],
            "notice": f"dropped Hudi's metadata table of {t} (partitions [files], folder .hoodie/metadata/) "
            "as hoodie.metadata.enable=false asks; Spark/Flink writers of this table must run with "
            "hoodie.metadata.enable=false too, or their next commit rebuilds the metadata table from a "
            "full listing",
        }, name
        assert not (paths[name] / ".hoodie" / "metadata").exists()


def test_drop_rewrites_hoodie_properties_as_java_reads_it_non_ascii_and_backslashes(
    hudi_table_zip: Callable[[str], Path],
) -> None:
    """Java's ``Properties.load`` decodes hoodie.properties as ISO-8859-1 and undoes backslash escapes:
    the rewritten file must give Java the values it had (a database name with a non-ASCII letter,
    a schema doc with an escaped quote), or Java's checksum check fails and it cannot open the table.
    (Checked by hand with ``java.util.Properties`` on JDK 17: checksum ok, schema JSON intact.)"""
    path = _mdt_table(hudi_table_zip, "cow_v6_nonpartitioned")
    props_file = path / ".hoodie" / "hoodie.properties"
    java = parse_properties(props_file.read_text())
    java["hoodie.database.name"] = "d\u00e9p\U0001f600t"
    java["hoodie.table.create.schema"] = (
        '{"type":"record","name":"r","fields":[],"doc":"say \\"hi\\" \\\\ ok"}'
    )
    java["hoodie.table.checksum"] = str(table_checksum(java))
    # As Java's Properties.store writes them: \uXXXX (UTF-16 units) and doubled backslashes.
    props_file.write_text(
        "".join(
            f"{k}={v}\n"
            for k, v in java.items()
            if k not in ("hoodie.database.name", "hoodie.table.create.schema")
        )
        + "hoodie.database.name=d\\u00E9p\\uD83D\\uDE00t\n"
        + 'hoodie.table.create.schema={"type"\\:"record","name"\\:"r","fields"\\:[],'
        + '"doc"\\:"say \\\\"hi\\\\" \\\\\\\\ ok"}\n',
        encoding="latin-1",
    )
    assert parse_properties(props_file.read_bytes().decode("latin-1")) == java
    rows = _ours(path)
    assert drop_metadata_table(LakeTable.open(path)) is not None
    raw = props_file.read_bytes()
    assert raw.isascii()
    as_java_reads_it = parse_properties(raw.decode("latin-1"))
    assert as_java_reads_it == _expected_props(java)
    assert as_java_reads_it["hoodie.table.checksum"] == java["hoodie.table.checksum"]
    assert "hoodie.database.name=d\\u00E9p\\uD83D\\uDE00t\n" in raw.decode()
    _same_rows(_ours(path), rows)
    _same_rows(_hudi_rs(str(path)), rows)


def test_a_crashed_inflight_compaction_does_not_lock_the_drop_out_for_good(
    hudi_table_zip: Callable[[str], Path],
) -> None:
    """A compaction left inflight by a crash blocks the drop (it has no heartbeat to expire), and both
    ways to end it (execute, rollback) are refused while the MDT exists: the error names the way out,
    ``--drop --force``, which then drops, and the compaction completes."""
    from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction

    path = hudi_table_zip(MOR)
    t = str(path)
    scheduled = schedule_compaction(LakeTable.open(path), {}, force=True)
    inflight = path / ".hoodie" / f"{scheduled.instant}.compaction.inflight"
    inflight.write_bytes(b"")  # what a run killed after starting the compaction leaves
    add_metadata_table(path)
    rows = _ours(path)
    before = tree_digest(path)
    drop, execute = lake_all(
        ["metadata-table", t, "--drop"],
        ["compact", t, "--mode", "execute", "--option", "hoodie.metadata.enable=false"],
    )
    for result in (drop, execute):
        assert result.returncode == 1
        assert result.stderr == (
            f"lake: error: {t}: not dropping Hudi's metadata table while instant(s) of another writer are "
            f"pending ({inflight.name}): it would keep writing to it. Let that writer finish (or its "
            "heartbeat expire), then run again; a table service that crashed stays inflight for good (a "
            "heartbeat never expires for it, and finishing or rolling it back is refused while the metadata "
            f"table exists): if no other engine is running it, run 'lake metadata-table {t} --drop "
            "--force'; nothing was changed\n"
        )
    assert {k: v for k, v in tree_digest(path).items() if not k.endswith(".lock")} == {
        k: v for k, v in before.items() if not k.endswith(".lock")
    }
    (forced,) = lake_all(["metadata-table", t, "--drop", "--force"])
    assert forced.returncode == 0, forced.stderr
    assert not (path / ".hoodie" / "metadata").exists()
    (execute,) = lake_all(["compact", t, "--mode", "execute"])
    assert execute.returncode == 0, execute.stderr
    assert LakeTable.open(path).timeline().get(scheduled.instant).is_completed

    def data(table_rows: list[dict]) -> list[dict]:
        return [{k: v for k, v in r.items() if k != "_hoodie_file_name"} for r in table_rows]

    assert data(_ours(path)) == data(rows)
    _same_rows(_ours(path), _hudi_rs(t))


def test_show_lists_the_mdt_timeline_of_a_layout_2_table(hudi_table_zip, capsys) -> None:
    """Table versions 8 and 9 keep the MDT's timeline in ``.hoodie/timeline/``, completed instants
    named ``<time>_<completion time>.<action>`` (found by an adversarial run: it showed none)."""
    path = hudi_table_zip("cow_v9_txns_simple_meta")
    capsys.readouterr()
    assert main(["metadata-table", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    timeline = path / ".hoodie/metadata/.hoodie/timeline"
    names = sorted(p.name for p in timeline.iterdir() if p.is_file())
    assert lines[3] == f"metadata instants: {len(names)}" and len(names) == 57
    assert lines[4:-2] == [f"  {n}" for n in names]
    assert lines[-2:] == [
        "latest metadata instant: 20260307162457540",
        "latest data instant: 20260307162458438",
    ]
