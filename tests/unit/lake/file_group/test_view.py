"""The file system view's index answers for the key lookup (``snapshot_bases``) exactly what the
groups it builds answer (``merged_latest_slice``): pending compactions folded, replaced groups left
out, groups with only log files kept."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_lake_provider.lake.errors import ObjectNotFoundError
from airflow_lake_provider.lake.file_group.view import FileSystemView
from airflow_lake_provider.lake.services.compaction.executor import run_compaction
from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction
from airflow_lake_provider.lake.services.partition_commit.merge import merge_small_files
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write


def _rows(keys: list[str], partition: str, ts: int = 0) -> pa.Table:
    return pa.table(
        {
            "id": keys,
            "ts": pa.array([ts] * len(keys), pa.int64()),
            "p": [partition] * len(keys),
            "v": list(range(len(keys))),
        }
    )


def _mor(path: Path) -> LakeTable:
    return LakeTable.create(
        path,
        name="t",
        table_type="mor",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",),
    )


def _from_groups(view: FileSystemView) -> dict[str, list[tuple[str, tuple[str, int] | None, bool]]]:
    """What the built groups say, for every partition of ``view``."""
    out: dict[str, list[tuple[str, tuple[str, int] | None, bool]]] = {}
    for partition in view.partitions:
        for group in view.file_groups(partition):
            merged = None if view.is_replaced(group) else view.merged_latest_slice(group)
            if merged is not None:
                base = merged.base_file
                entry = (group.file_id, (base.file_name, base.size) if base else None, bool(merged.log_files))
                out.setdefault(partition, []).append(entry)
    return out


def test_snapshot_bases_fold_a_pending_compaction_and_leave_out_replaced_groups(tmp_path: Path) -> None:
    table = _mor(tmp_path / "t")
    first = write(table, pa.concat_tables([_rows(["a1", "a2"], "x"), _rows(["b1"], "y")]), "insert")
    write(table, _rows(["a3"], "x"), "insert")
    write(table, _rows(["a4"], "x"), "insert")
    write(table, _rows(["a1"], "x", 1), "upsert")
    compaction = schedule_compaction(table, force=True).instant
    assert compaction is not None
    write(table, _rows(["a1"], "x", 2), "upsert")  # a log file against the pending compaction
    merged = merge_small_files(table, "x", 10**9)  # replaces the groups of a3 and a4
    assert merged.instant is not None and len(merged.replaced) == 2

    view = table.file_system_view()
    sizes = {n: (tmp_path / "t" / n).stat().st_size for n in first.files + merged.written}
    a1_base = next(f for f in first.files if f.startswith("x/"))
    b1_base = next(f for f in first.files if f.startswith("y/"))
    written = merged.written[0]
    x = sorted(
        [
            (a1_base[2:].split("_")[0], (a1_base[2:], sizes[a1_base]), True),
            (written[2:].split("_")[0], (written[2:], sizes[written]), False),
        ]
    )
    assert view.snapshot_bases("x") == x
    assert view.snapshot_bases("y") == [(b1_base[2:].split("_")[0], (b1_base[2:], sizes[b1_base]), False)]
    assert view.snapshot_bases("nowhere") == []
    assert _from_groups(view) == {"x": x, "y": view.snapshot_bases("y")}
    # A view whose groups are already built (not the lazy index) answers the same.
    built = dataclasses.replace(view, groups=dict(view.groups.items()))
    assert built.snapshot_bases("x") == x


def test_snapshot_bases_keep_a_group_of_log_files_only(tmp_path: Path) -> None:
    """Java writers may leave a group whose slice has log files and no base file yet."""
    table = _mor(tmp_path / "t")
    done = write(table, _rows(["a1"], "x"), "insert")
    log_only = f".logonly-0_{done.instant}.log.1_0-0-0"
    uncommitted = ".other-0_20991231000000000.log.1_0-0-0"

    def lister(partitions: object) -> dict[str, list[tuple[str, int]]]:
        return {"x": [*table.storage.list("x"), (log_only, 10), (uncommitted, 10)]}

    view = table.file_system_view(partitions=["x"], lister=lister)
    bases = view.snapshot_bases("x")
    assert ("logonly-0", None, True) in bases and len(bases) == 2
    assert ("x", "other-0") not in view.groups  # its instant is not committed
    assert bases == _from_groups(view)["x"]


def test_latest_pair_and_snapshot_logs_answer_as_the_built_groups_without_touching_older_slices(
    tmp_path: Path,
) -> None:
    """The write's slices of one group (the merged latest and the newest) and the log files its key
    lookup searches, from the index: the same as the built group says, a pending compaction's slice
    folded into the one before; an older slice's files are neither read nor sized, so their removal
    (a clean running beside the write) changes nothing."""
    table = _mor(tmp_path / "t")
    first = write(table, _rows(["a1", "a2"], "x"), "insert")
    fid = first.files[0][2:].split("_")[0]
    older_log = write(table, _rows(["a1"], "x", 1), "upsert").files[0]
    run_compaction(table, force=True)  # slice 2: the compacted base
    write(table, _rows(["a1"], "x", 2), "upsert")
    planned = schedule_compaction(table, force=True).instant  # slice 3: pending
    assert planned is not None
    on_plan = write(table, _rows(["a2"], "x", 3), "upsert").files[0]
    view = table.file_system_view(partitions=["x"], sizes=False)
    group = view.groups[("x", fid)]
    assert [s.base_instant for s in group.slices] == [first.instant, group.slices[1].base_instant, planned]
    merged, newest = view.merged_latest_slice(group), group.latest_slice
    assert merged is not None and len(merged.log_files) == 2 and newest.base_instant == planned
    assert [f.relative_path for f in newest.log_files] == [on_plan]
    before = table.file_system_view(table.timeline(), ["x"], sizes=False)  # listed, nothing sized
    for removed in (first.files[0], older_log):  # the oldest slice: what a clean deletes meanwhile
        (tmp_path / "t" / removed).unlink()
    assert before.latest_pair("x", fid) == (merged, newest)
    assert before.snapshot_logs("x", fid) == [f.relative_path for f in merged.log_files]
    with pytest.raises(ObjectNotFoundError, match=first.files[0]):
        before.groups[("x", fid)]  # the whole group sizes every slice's files
    fresh = table.file_system_view(table.timeline(), ["x"], sizes=False)
    assert fresh.latest_pair("x", fid) == (merged, newest)
    built = dataclasses.replace(fresh, groups=dict(fresh.groups.items()))
    assert built.latest_pair("x", fid) == (merged, newest)
    assert built.snapshot_logs("x", fid) == fresh.snapshot_logs("x", fid)


def test_snapshot_logs_of_a_non_partitioned_table_are_the_log_names(tmp_path: Path) -> None:
    """No partition folder: the log paths are the bare file names, from the index and from built
    groups alike."""
    table = LakeTable.create(
        tmp_path / "t", name="t", table_type="mor", record_key_fields=("id",), precombine_field="ts"
    )
    rows = pa.table({"id": ["a1"], "ts": pa.array([0], pa.int64()), "v": [0]})
    fid = write(table, rows, "insert").files[0].split("_")[0]
    log = write(table, rows, "upsert").files[0]
    assert "/" not in log
    view = table.file_system_view(sizes=False)
    assert view.snapshot_logs("", fid) == [log]
    built = dataclasses.replace(view, groups=dict(view.groups.items()))
    assert built.snapshot_logs("", fid) == [log]
