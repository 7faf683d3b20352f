"""File slicing of table versions 8 and 9: a log file is named after the deltacommit that wrote it
and belongs to the slice with the greatest base instant not after that deltacommit's completion."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from write_support import hudi_rows, log_only_group, our_rows

from airflow_lake_provider.lake.file_group.builder import slot_for_log
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable

MOR_V9 = "mor_avro_v9_txns_simple_nometa"
APAC_GROUP = ("region=apac", "9c6ed25b-6c9d-4793-ad27-1c8518086b6a-0")
APAC_LOG = ".9c6ed25b-6c9d-4793-ad27-1c8518086b6a-0_20260307135835748.log.1_0-38-83"
FIRST_BASE, COMPACTION = "20260307135827749", "20260307135839895"
DELTA = "20260307135835748"  # wrote APAC_LOG; completed at 20260307135836076, before the compaction


def _slices(path: Path, key: tuple[str, str]) -> list[tuple[str, str | None, list[str]]]:
    table = LakeTable.open(path)
    group = table.file_system_view().groups[key]
    return [
        (s.base_instant, s.base_file.file_name if s.base_file else None, [f.file_name for f in s.log_files])
        for s in group.slices
    ]


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("20260101000000000", "own"),
        ("20260102000000000", "b1"),
        ("20260102500000000", "b1"),
        ("20260103", "b2"),
    ],
)
def test_slot_for_log_greatest_base_not_after_completion(completion: str, expected: str) -> None:
    bases = ["20260102000000000", "20260103000000000"]
    named = {"own": "20251231000000000", "b1": bases[0], "b2": bases[1]}
    assert slot_for_log(bases, completion.ljust(17, "0"), named["own"]) == named[expected]


def test_log_belongs_to_the_slice_before_a_compaction_it_completed_before(
    hudi_table_zip: Callable[[str], Path],
) -> None:
    path = hudi_table_zip(MOR_V9)
    assert [(at, logs) for at, _, logs in _slices(path, APAC_GROUP)] == [
        (FIRST_BASE, [APAC_LOG]),
        (COMPACTION, []),
    ]


def test_log_completed_after_a_compaction_was_requested_belongs_to_its_slice(
    hudi_table_zip: Callable[[str], Path],
) -> None:
    """Same log file name, later completion: the slice changes (layout 1's naming rule would keep it
    with the base instant its name carries)."""
    path = hudi_table_zip(MOR_V9)
    timeline = path / ".hoodie" / "timeline"
    (timeline / f"{DELTA}_20260307135836076.deltacommit").rename(
        timeline / f"{DELTA}_20260307135839900.deltacommit"
    )
    assert [(at, logs) for at, _, logs in _slices(path, APAC_GROUP)] == [
        (FIRST_BASE, []),
        (COMPACTION, [APAC_LOG]),
    ]


def test_as_of_a_log_completed_after_a_later_base_nothing_is_missing(
    hudi_table_zip: Callable[[str], Path],
) -> None:
    """As of the deltacommit that wrote APAC_LOG, completed after the compaction was requested: the
    log belongs to the compaction's slice (after the instant, not read as of it), so the slice read
    as of it, the first base's, lacks nothing (placed among the first base alone, it would)."""
    path = hudi_table_zip(MOR_V9)
    timeline = path / ".hoodie" / "timeline"
    (timeline / f"{DELTA}_20260307135836076.deltacommit").rename(
        timeline / f"{DELTA}_20260307135839900.deltacommit"
    )
    assert LakeTable.open(path).file_system_view().missing_slices(DELTA) == []


def test_logs_of_one_deltacommit_in_version_order_past_nine(hudi_table_zip: Callable[[str], Path]) -> None:
    """A deltacommit whose log rolled over (versions 2 to 10): its logs are read by version as a
    number (10 last), not by name, where ``.log.10_`` sorts before ``.log.2_``; also by
    ``snapshot_logs``, which takes them from the slice index as they were slotted."""
    path = hudi_table_zip(MOR_V9)
    eu, group = "region=eu", "c06fe141-9f11-46fb-aa70-d7f9d2dcca2f-0"
    logs = [f".{group}_20260307135833781.log.1_0-24-53", f".{group}_20260307135834808.log.1_0-31-68"]
    rolled = [logs[1].replace(".log.1_", f".log.{v}_") for v in (2, 10)]
    for name in rolled:
        (path / eu / name).write_bytes((path / eu / logs[1]).read_bytes())
    base = f"{group}_0-3-6_{FIRST_BASE}.parquet"
    assert _slices(path, (eu, group)) == [(FIRST_BASE, base, [*logs, *rolled])]
    view = LakeTable.open(path).file_system_view()
    assert view.snapshot_logs(eu, group) == [f"{eu}/{name}" for name in [*logs, *rolled]]


def test_logs_of_a_slice_in_deltacommit_order_and_uncommitted_logs_left_out(
    hudi_table_zip: Callable[[str], Path],
) -> None:
    path = hudi_table_zip(MOR_V9)
    eu = "region=eu"
    group = "c06fe141-9f11-46fb-aa70-d7f9d2dcca2f-0"
    # A failed write's log (its deltacommit only requested/inflight) and a stray log of no instant.
    pending = "20260307135841500"
    (path / ".hoodie" / "timeline" / f"{pending}.deltacommit.requested").write_bytes(b"")
    (path / ".hoodie" / "timeline" / f"{pending}.deltacommit.inflight").write_bytes(b"")
    (path / eu / f".{group}_{pending}.log.1_0-1-1").write_bytes(b"#HUDI#")
    (path / eu / f".{group}_20260307135841600.log.1_0-1-1").write_bytes(b"#HUDI#")
    assert _slices(path, (eu, group)) == [
        (
            FIRST_BASE,
            f"{group}_0-3-6_{FIRST_BASE}.parquet",
            [f".{group}_20260307135833781.log.1_0-24-53", f".{group}_20260307135834808.log.1_0-31-68"],
        )
    ]
    # The uncommitted files change no read (a later instant exists, so the stray one is not archived).
    assert read_snapshot(LakeTable.open(path)).num_rows == 12


def test_a_log_written_while_a_compaction_is_pending_is_no_missing_slice(tmp_path: Path) -> None:
    """A log that completed after a compaction was scheduled belongs to the slice that compaction
    opens, which has no base file yet: ``missing_slices`` (the check of time travel and savepoints)
    reported the slice before it missing that log, and refused the read."""
    import datetime as dt

    import pyarrow as pa

    from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction
    from airflow_lake_provider.lake.table.write import write
    from airflow_lake_provider.lake.timeline.instant import InstantClock

    ticks = iter(range(100))
    table = LakeTable.create(
        tmp_path / "t",
        table_version=8,
        name="t",
        table_type="mor",
        record_key_fields=("id",),
        precombine_field="ts",
        clock=InstantClock(now=lambda: dt.datetime(2025, 3, 1) + dt.timedelta(seconds=next(ticks))),
    )

    def upsert(ts: int) -> str:
        return write(table, pa.table({"id": ["a"], "ts": pa.array([ts], pa.int64())}), "upsert").instant

    upsert(1)
    upsert(2)
    compaction = schedule_compaction(table, force=True).instant
    after = upsert(3)
    view = table.file_system_view()
    ((_, slots),) = view.slice_index.items()
    assert max(slots) == compaction and slots[compaction][0] is None  # the pending slice: logs only
    assert view.missing_slices(after) == []
    assert read_snapshot(table, as_of=after).column("ts").to_pylist() == [3]


def test_a_group_whose_logs_all_belong_after_the_instant_does_not_end_the_check(tmp_path: Path) -> None:
    """A group of logs only, every one completed after a compaction of it was requested: as of an
    instant before that compaction none of its files is read, and the groups after it are still
    checked (here one whose base file is gone, as a clean would leave it)."""
    import datetime as dt

    from write_support import batch

    from airflow_lake_provider.lake.services.compaction.executor import execute_compaction
    from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction
    from airflow_lake_provider.lake.table.write import write
    from airflow_lake_provider.lake.timeline.instant import format_instant, instant_to_datetime

    path = tmp_path / "t"
    table, deltas, _ = log_only_group(path, 8)
    later = write(table, batch([9]), "upsert").instant  # a new group with a base file
    compaction = schedule_compaction(table, force=True).instant
    execute_compaction(table)
    folder = path / ".hoodie" / "timeline"
    for i, delta in enumerate(deltas):
        (done,) = folder.glob(f"{delta}_*.deltacommit")
        late = format_instant(instant_to_datetime(compaction) + dt.timedelta(seconds=1, milliseconds=i))
        done.rename(folder / f"{delta}_{late}.deltacommit")
    (gone,) = path.glob(f"*_{later}.parquet")
    gone.unlink()
    view = LakeTable.open(path).file_system_view()
    assert view.missing_slices(later) == [("", gone.name.split("_")[0], later)]


@pytest.mark.parametrize("version", [8, 9])
def test_a_group_of_log_files_only_is_one_slice_read_whole(tmp_path: Path, version: int) -> None:
    """Flink and Spark's bucket index write inserts into log files: a group without a base file.
    Java's file group opens a slice at its first log's instant and puts every later log in it; one
    slice per log made every read take the newest log alone (row 1's update of the first log lost)."""
    path = tmp_path / "t"
    table, instants, logs = log_only_group(path, version)
    ((key, group),) = table.file_system_view().groups.items()
    assert [(s.base_instant, s.base_file, [f.file_name for f in s.log_files]) for s in group.slices] == [
        (instants[0], None, logs)
    ]
    assert our_rows(path, "id", "ts", "v") == hudi_rows(path, "id", "ts", "v") == [(1, 4, "u1"), (2, 3, "u2")]
    middle = read_snapshot(table, as_of=instants[1]).select(["id", "ts"]).to_pylist()
    assert sorted((r["id"], r["ts"]) for r in middle) == [(1, 2), (2, 3)]


@pytest.mark.parametrize("version", [8, 9])
def test_the_latest_pair_of_a_group_of_log_files_only_is_its_one_slice_twice(
    tmp_path: Path, version: int
) -> None:
    """A write's lookup of a group without a base file, from the index: the one slice is both the
    slice read and the newest (no pending compaction to fold; a view built whole says the same)."""
    table, instants, logs = log_only_group(tmp_path / "t", version)
    ((key, group),) = table.file_system_view().groups.items()
    pair = table.file_system_view(table.timeline(), [key[0]], sizes=False).latest_pair(*key)
    assert pair is not None
    merged, newest = pair
    assert merged == newest
    assert (merged.base_instant, merged.base_file) == (instants[0], None)
    assert [f.file_name for f in merged.log_files] == logs
    assert pair == (group.latest_slice, group.latest_slice)
