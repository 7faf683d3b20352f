"""The writer on COW and MOR tables: exact rows (ours and hudi-rs), exact files, crashes, bad input."""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from hudi import HudiReadOptions, HudiTableBuilder

from airflow_lake_provider.lake.errors import (
    LakeError,
    SchemaError,
    TableNotFoundError,
    UnsupportedTableVersionError,
)
from airflow_lake_provider.lake.file_group.file_names import validate_file_id
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline.instant import InstantClock, format_instant

FROZEN = dt.datetime(2025, 6, 1, 12, 0, 0, tzinfo=dt.timezone.utc)
T1, T2, T3, T4 = (format_instant(FROZEN + dt.timedelta(milliseconds=i)) for i in range(4))
COLS = ["_hoodie_commit_time", "_hoodie_record_key", "_hoodie_partition_path", "id", "ts", "city", "v"]
TABLE_KINDS = [("cow", True), ("cow", False), ("mor", True), ("mor", False)]
KIND_IDS = ["cow-partitioned", "cow-nonpartitioned", "mor-partitioned", "mor-nonpartitioned"]


def _city(i: int) -> str:
    return "a" if i % 2 else "b"


def _batch(rows: list[tuple[int, int, str]]) -> pa.Table:
    """Rows of (id, ts, v); the city follows from the id (odd: a, even: b)."""
    return pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "ts": pa.array([r[1] for r in rows], pa.int64()),
            "city": pa.array([_city(r[0]) for r in rows], pa.string()),
            "v": pa.array([r[2] for r in rows], pa.string()),
        }
    )


INSERT = _batch([(i, 10, f"v1-{i}") for i in range(1, 7)])
UPSERT = _batch(
    [
        (1, 20, "u1"),  # larger ts: wins
        (2, 5, "u2-stale"),  # smaller ts: loses under event-time ordering
        (3, 10, "u3"),  # equal ts: the later write wins
        (4, 30, "u4-30"),  # two versions in one batch: the larger ts (30) is kept
        (4, 25, "u4-25"),
        (7, 1, "u7"),  # new key
    ]
)
DELETE = _batch([(5, 11, "x"), (6, 3, "x"), (99, 50, "x")])  # 6 loses (ts 3 < 10); 99 is absent


def _make(path: Path, kind: str, partitioned: bool) -> LakeTable:
    return LakeTable.create(
        path,
        name="orders",
        table_type=kind,
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("city",) if partitioned else (),
        hive_style=True,
        clock=InstantClock(now=lambda: FROZEN),
    )


def _expected(state: str, partitioned: bool, t2: str = T2) -> list[tuple]:
    """(commit time, key, partition, id, ts, city, v) after ``insert``, ``upsert`` or ``delete``."""

    def row(commit: str, i: int, ts: int, v: str) -> tuple:
        return (commit, str(i), f"city={_city(i)}" if partitioned else "", i, ts, _city(i), v)

    rows = {i: row(T1, i, 10, f"v1-{i}") for i in range(1, 7)}
    if state in ("upsert", "delete"):
        rows.update(
            {
                1: row(t2, 1, 20, "u1"),
                3: row(t2, 3, 10, "u3"),
                4: row(t2, 4, 30, "u4-30"),
                7: row(t2, 7, 1, "u7"),
            }
        )
    if state == "delete":
        del rows[5]
    return [rows[i] for i in sorted(rows)]


def _rows(table: pa.Table) -> list[tuple]:
    if table.num_rows == 0:
        return []
    return sorted((tuple(r[c] for c in COLS) for r in table.select(COLS).to_pylist()), key=lambda r: r[3])


def _full(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: r["id"])


def _ours(path: Path, as_of: str | None = None) -> pa.Table:
    return read_snapshot(LakeTable.open(path), as_of=as_of)


def _hudi(path: Path, as_of: str | None = None) -> pa.Table:
    hudi_table = HudiTableBuilder.from_base_uri(str(path)).build()
    options = HudiReadOptions().with_as_of_timestamp(as_of) if as_of else None
    batches = hudi_table.read(options) if options else hudi_table.read()
    return pa.Table.from_batches(batches) if batches else pa.table({})


def _assert_reads(path: Path, expected: list[tuple], as_of: str | None = None) -> None:
    ours, theirs = _ours(path, as_of), _hudi(path, as_of)
    assert _rows(ours) == expected
    assert _rows(theirs) == expected
    assert _full(ours) == _full(theirs)
    assert ours.column_names == [
        "_hoodie_commit_time",
        "_hoodie_commit_seqno",
        "_hoodie_record_key",
        "_hoodie_partition_path",
        "_hoodie_file_name",
        "id",
        "ts",
        "city",
        "v",
    ]
    assert theirs.column_names == ours.column_names


def _data_files(path: Path) -> list[str]:
    out = []
    for dirpath, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if d != ".hoodie"]
        out += [os.path.relpath(os.path.join(dirpath, f), path) for f in files]
    return sorted(out)


def _hoodie_files(path: Path) -> list[str]:
    return sorted(f for f in os.listdir(path / ".hoodie") if (path / ".hoodie" / f).is_file())


def _tree(path: Path) -> dict[str, int]:
    out = {}
    for dirpath, dirs, files in os.walk(path):
        for d in dirs:
            out[os.path.relpath(os.path.join(dirpath, d), path) + "/"] = -1
        for f in files:
            p = os.path.join(dirpath, f)
            out[os.path.relpath(p, path)] = os.path.getsize(p)
    return out


def _commit_json(path: Path, instant: str, action: str) -> dict:
    return json.loads((path / ".hoodie" / f"{instant}.{action}").read_text())


def _stat_view(stat: dict) -> tuple:
    base = (
        stat["fileId"],
        stat["path"],
        stat["prevCommit"],
        stat["numWrites"],
        stat["numInserts"],
        stat["numUpdateWrites"],
        stat["numDeletes"],
        stat["partitionPath"],
    )
    if "logFiles" in stat:
        base += (stat["baseFile"], tuple(stat["logFiles"]), stat["logVersion"], stat["logOffset"])
    return base


# -- insert, upsert, delete -----------------------------------------------------------------------
@pytest.mark.parametrize(("kind", "partitioned"), TABLE_KINDS, ids=KIND_IDS)
def test_writer_insert_upsert_delete_exact_rows_files_and_commits(
    tmp_path: Path, kind: str, partitioned: bool
) -> None:
    path = tmp_path / "orders"
    table = _make(path, kind, partitioned)
    action = "deltacommit" if kind == "mor" else "commit"
    pa_, pb_ = ("city=a/", "city=b/") if partitioned else ("", "")
    part_a, part_b = pa_.rstrip("/"), pb_.rstrip("/")

    r1 = write(table, INSERT, "insert")
    assert (r1.instant, r1.action, r1.inserted, r1.updated, r1.deleted) == (T1, action, 6, 0, 0)
    stats1 = r1.metadata.partition_to_write_stats
    if partitioned:
        assert sorted(stats1) == ["city=a", "city=b"]
        fa, fb = stats1["city=a"][0].file_id, stats1["city=b"][0].file_id
    else:
        assert list(stats1) == [""]
        fa = fb = stats1[""][0].file_id
    validate_file_id(fa)
    _assert_reads(path, _expected("insert", partitioned))

    r2 = write(table, UPSERT, "upsert")
    # 1, 3 and 4 updated; 2 lost; 7 inserted. MOR logs every version, the losing one of 2 too: the
    # merge of reads and compaction decides (Hudi's payloads), so the writer never reads the logs.
    updated = 3 if kind == "cow" else 4
    assert (r2.instant, r2.inserted, r2.updated, r2.deleted) == (T2, 1, updated, 0)
    new_in_a = [s for s in r2.metadata.partition_to_write_stats[part_a] if s.prev_commit == "null"]
    assert len(new_in_a) == 1
    f7 = new_in_a[0].file_id
    assert f7 not in (fa, fb)
    _assert_reads(path, _expected("upsert", partitioned))

    r3 = write(table, DELETE, "delete")
    deleted = 1 if kind == "cow" else 2  # MOR logs the losing delete of 6 too; the merge ignores it
    assert (r3.instant, r3.inserted, r3.updated, r3.deleted) == (T3, 0, 0, deleted)
    _assert_reads(path, _expected("delete", partitioned))

    # Time travel: each earlier state, in our reader and in hudi-rs.
    _assert_reads(path, _expected("insert", partitioned), as_of=T1)
    _assert_reads(path, _expected("upsert", partitioned), as_of=T2)
    _assert_reads(path, _expected("delete", partitioned), as_of=T3)

    # Files on disk.
    meta_files = (
        [f"{pa_}.hoodie_partition_metadata", f"{pb_}.hoodie_partition_metadata"]
        if partitioned
        else [".hoodie_partition_metadata"]
    )
    if kind == "cow":
        if partitioned:
            data = [
                f"{pa_}{fa}_1-1-0_{T1}.parquet",
                f"{pa_}{f7}_1-1-0_{T2}.parquet",
                f"{pa_}{fa}_2-1-0_{T2}.parquet",
                f"{pa_}{fa}_1-1-0_{T3}.parquet",
                f"{pb_}{fb}_2-1-0_{T1}.parquet",
                f"{pb_}{fb}_3-1-0_{T2}.parquet",
            ]
        else:
            data = [
                f"{fa}_1-1-0_{T1}.parquet",
                f"{f7}_1-1-0_{T2}.parquet",
                f"{fa}_2-1-0_{T2}.parquet",
                f"{fa}_1-1-0_{T3}.parquet",
            ]
    else:
        if partitioned:  # the losing delete of 6 is logged too (b's second log file)
            data = [
                f"{pa_}{fa}_1-1-0_{T1}.parquet",
                f"{pa_}{f7}_1-1-0_{T2}.parquet",
                f"{pa_}.{fa}_{T1}.log.1_2-1-0",
                f"{pa_}.{fa}_{T1}.log.2_1-1-0",
                f"{pb_}{fb}_2-1-0_{T1}.parquet",
                f"{pb_}.{fb}_{T1}.log.1_3-1-0",
                f"{pb_}.{fb}_{T1}.log.2_2-1-0",
            ]
        else:
            data = [
                f"{fa}_1-1-0_{T1}.parquet",
                f"{f7}_1-1-0_{T2}.parquet",
                f".{fa}_{T1}.log.1_2-1-0",
                f".{fa}_{T1}.log.2_1-1-0",
            ]
    assert _data_files(path) == sorted(data + meta_files)
    inflight = "inflight" if kind == "cow" else "deltacommit.inflight"
    assert _hoodie_files(path) == sorted(
        [f"{t}.{action}" for t in (T1, T2, T3)]
        + [f"{t}.{action}.requested" for t in (T1, T2, T3)]
        + [f"{t}.{inflight}" for t in (T1, T2, T3)]
        + ["hoodie.properties"]
    )
    assert os.listdir(path / ".hoodie" / ".temp") == []  # every instant's markers were removed
    part_meta = (path / meta_files[0]).read_text().splitlines()
    assert part_meta[2:] == [f"commitTime={T1}", f"partitionDepth={1 if partitioned else 0}"]

    # Commit JSON of the upsert: write stats and the schema.
    body = _commit_json(path, T2, action)
    assert body["operationType"] == "UPSERT"
    assert body["compacted"] is False
    schema = json.loads(body["extraMetadata"]["schema"])
    assert schema["type"] == "record"
    assert [f["name"] for f in schema["fields"]] == ["id", "ts", "city", "v"]
    stats = {p: sorted(_stat_view(s) for s in ss) for p, ss in body["partitionToWriteStats"].items()}
    insert7 = (f7, f"{pa_}{f7}_1-1-0_{T2}.parquet", "null", 1, 1, 0, 0, part_a)
    if kind == "cow":
        upd_a = (fa, f"{pa_}{fa}_2-1-0_{T2}.parquet", T1, 3, 0, 2, 0, part_a)
        upd_b = (fb, f"{pb_}{fb}_3-1-0_{T2}.parquet", T1, 3, 0, 1, 0, part_b)
        if not partitioned:
            upd_a = (fa, f"{fa}_2-1-0_{T2}.parquet", T1, 6, 0, 3, 0, "")
    else:
        log_a = f".{fa}_{T1}.log.1_2-1-0"
        upd_a = (fa, f"{pa_}{log_a}", T1, 2, 0, 2, 0, part_a, f"{fa}_1-1-0_{T1}.parquet", (log_a,), 1, 0)
        log_b = f".{fb}_{T1}.log.1_3-1-0"
        # 2 and 4 in b: the losing version of 2 is logged too.
        upd_b = (fb, f"{pb_}{log_b}", T1, 2, 0, 2, 0, part_b, f"{fb}_2-1-0_{T1}.parquet", (log_b,), 1, 0)
        if not partitioned:
            upd_a = (fa, log_a, T1, 4, 0, 4, 0, "", f"{fa}_1-1-0_{T1}.parquet", (log_a,), 1, 0)
    if partitioned:
        assert stats == {"city=a": sorted([insert7, upd_a]), "city=b": [upd_b]}
    else:
        assert stats == {"": sorted([insert7, upd_a])}
    for ss in body["partitionToWriteStats"].values():
        for s in ss:
            assert s["fileSizeInBytes"] == (path / s["path"]).stat().st_size

    # The delete commit.
    body3 = _commit_json(path, T3, action)
    assert body3["operationType"] == "DELETE"
    stats3 = sorted(
        (s["fileId"], s["numDeletes"], s["prevCommit"])
        for ss in body3["partitionToWriteStats"].values()
        for s in ss
    )
    if kind == "cow":
        assert stats3 == [(fa, 1, T2)]
    elif partitioned:  # 5 in a; the losing delete of 6 in b
        assert stats3 == sorted([(fa, 1, T1), (fb, 1, T1)])
    else:
        assert stats3 == [(fa, 2, T1)]


@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_writer_duplicate_keys_in_one_batch_keep_largest_ts(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "t"
    table = _make(path, kind, True)
    batch = _batch(
        [(1, 5, "a5"), (1, 9, "a9"), (1, 7, "a7"), (2, 3, "b-first"), (2, 3, "b-second"), (3, 1, "c")]
    )
    r = write(table, batch, "insert")
    assert r.inserted == 3
    expected = [
        (T1, "1", "city=a", 1, 9, "a", "a9"),
        (T1, "2", "city=b", 2, 3, "b", "b-second"),
        (T1, "3", "city=a", 3, 1, "a", "c"),
    ]
    _assert_reads(path, expected)
    # The same within an upsert onto existing rows: 1 gets ts 12 over the stored 9, 2's duplicates both lose.
    write(table, _batch([(1, 12, "a12"), (1, 11, "a11"), (2, 1, "b1"), (2, 2, "b2")]), "upsert")
    _assert_reads(path, [(T2, "1", "city=a", 1, 12, "a", "a12"), expected[1], expected[2]])


@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_writer_delete_all_then_reinsert_exact_rows(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "t"
    table = _make(path, kind, False)
    write(table, _batch([(1, 10, "a"), (2, 10, "b")]), "insert")
    write(table, _batch([(1, 10, "x"), (2, 10, "x")]), "delete")
    _assert_reads(path, [])
    write(table, _batch([(2, 11, "again")]), "upsert")
    _assert_reads(path, [(T3, "2", "", 2, 11, "b", "again")])


@pytest.mark.parametrize(
    ("base_ts", "deletes", "reinsert_ts", "expected_ts"),
    [
        (0, (0, 1), 0, 0),  # natural-order delete, then a delete with ts 1: ts 1 does not carry over
        (5, (0, 1), 0, 5),  # ... so the base row (ts 5) beats the re-insert (ts 0)
        (5, (0, 1), 3, 5),
        (0, (1, 2), 1, None),  # ordered deletes: the ts 2 delete beats the ts 1 re-insert
        (0, (0,), 0, 0),
    ],
)
def test_mor_deletes_after_a_natural_order_delete_as_hudi_rs_merges_them(
    tmp_path: Path, base_ts: int, deletes: tuple[int, ...], reinsert_ts: int, expected_ts: int | None
) -> None:
    """A MOR key deleted in natural order (ordering value 0, as Hudi writes it) stays deleted by a
    later delete, whose ordering value then decides nothing: a re-insert logged after it meets the
    base row alone. Ours and hudi-rs read the same row."""
    path = tmp_path / "t"
    table = LakeTable.create(
        path,
        name="t",
        table_type="mor",
        record_key_fields=("key",),
        precombine_field="ts",
        partition_fields=(),
    )

    def one(ts: int) -> pa.Table:
        return pa.table({"key": ["k0"], "ts": pa.array([ts], pa.int64())})

    write(table, one(base_ts), "insert")
    for ts in deletes:
        write(table, one(ts), "delete")
    write(table, one(reinsert_ts), "insert")
    ours = read_snapshot(table).select(["key", "ts"]).to_pylist()
    theirs = pa.Table.from_batches(HudiTableBuilder.from_base_uri(str(path)).build().read())
    expected = [] if expected_ts is None else [{"key": "k0", "ts": expected_ts}]
    assert ours == theirs.select(["key", "ts"]).to_pylist() == expected


# -- crash injection ------------------------------------------------------------------------------
class _Crash(BaseException):  # noqa: N818
    """A crash, not an error: the writer's in-process rollback must not see it (a killed process
    runs no code); the next writer rolls the instant back (policy EAGER)."""


def _crash_at(point: str) -> Callable[[str], None]:
    def fault(where: str) -> None:
        if where == point:
            raise _Crash(where)

    return fault


@pytest.mark.parametrize("point", ["requested", "inflight", "file", "commit"])
@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_writer_crash_leaves_pre_crash_rows_and_next_write_succeeds(
    tmp_path: Path, kind: str, point: str
) -> None:
    path = tmp_path / "t"
    table = _make(path, kind, True)
    action = "deltacommit" if kind == "mor" else "commit"
    write(table, INSERT, "insert")
    before_rows = _full(_ours(path))
    with pytest.raises(_Crash):
        write(table, UPSERT, "upsert", fault=_crash_at(point))
    # Nothing of the crashed instant is visible, to us or to hudi-rs.
    _assert_reads(path, _expected("insert", True))
    assert _full(_ours(path)) == before_rows
    pending = [f for f in _hoodie_files(path) if f.startswith(T2)]
    inflight = f"{T2}.inflight" if kind == "cow" else f"{T2}.deltacommit.inflight"
    assert pending == (
        [f"{T2}.{action}.requested"]
        if point == "requested"
        else sorted([f"{T2}.{action}.requested", inflight])
    )
    assert not (path / ".hoodie" / f"{T2}.{action}").exists()
    # Time travel past the crash also shows the pre-crash rows.
    _assert_reads(path, _expected("insert", True), as_of=T2)

    # A following write (a fresh LakeTable, as a new process would open it) first rolls the crashed
    # instant back (T3 is the rollback), then succeeds.
    again = LakeTable.open(path, clock=InstantClock(now=lambda: FROZEN))
    r = write(again, UPSERT, "upsert")
    assert r.instant == T4
    assert [f for f in _hoodie_files(path) if f.startswith((T2, T3))] == [
        f"{T3}.rollback",
        f"{T3}.rollback.inflight",
        f"{T3}.rollback.requested",
    ]
    _assert_reads(path, _expected("upsert", True, t2=T4))
    write(again, DELETE, "delete")
    _assert_reads(path, _expected("delete", True, t2=T4))
    _assert_reads(path, _expected("upsert", True, t2=T4), as_of=T4)


@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_writer_two_crashes_in_a_row_then_success(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "t"
    table = _make(path, kind, True)
    write(table, INSERT, "insert")
    for point in ("file", "commit"):
        with pytest.raises(_Crash):
            write(table, UPSERT, "upsert", fault=_crash_at(point))
    _assert_reads(path, _expected("insert", True))
    t6 = format_instant(FROZEN + dt.timedelta(milliseconds=5))  # T4, T5: the two rollbacks
    assert write(table, UPSERT, "upsert").instant == t6
    _assert_reads(path, _expected("upsert", True, t2=t6))


# -- bad input ------------------------------------------------------------------------------------
def _without(batch: pa.Table, column: str) -> pa.Table:
    return batch.drop_columns([column])


BAD_BATCHES = {
    "missing-record-key": (
        lambda: _without(UPSERT, "id"),
        SchemaError,
        r"missing required column\(s\) \['id'\]",
    ),
    "missing-precombine": (
        lambda: _without(UPSERT, "ts"),
        SchemaError,
        r"missing required column\(s\) \['ts'\]",
    ),
    "missing-partition": (lambda: _without(UPSERT, "city"), SchemaError, r"\['city'\]"),
    "null-precombine": (
        lambda: UPSERT.set_column(1, "ts", pa.array([1, None, 3, 4, 5, 6], pa.int64())),
        SchemaError,
        "precombine field 'ts' has null values",
    ),
    "null-record-key": (
        lambda: UPSERT.set_column(0, "id", pa.array([1, None, 3, 4, 5, 6], pa.int64())),
        SchemaError,
        "record key field 'id' has null values",
    ),
    "string-into-long": (
        lambda: UPSERT.set_column(1, "ts", pa.array(["1", "2", "3", "4", "5", "6"])),
        SchemaError,
        "column 'ts' has type string, the table stores int64",
    ),
    "long-into-string": (
        lambda: UPSERT.set_column(3, "v", pa.array([1, 2, 3, 4, 5, 6], pa.int64())),
        SchemaError,
        "column 'v' has type int64, the table stores string",
    ),
    "uint64-into-long": (
        lambda: UPSERT.set_column(1, "ts", pa.array([2**63] * 6, pa.uint64())),
        SchemaError,
        "column 'ts' has type uint64, the table stores int64",
    ),
    "unknown-extra-column": (
        lambda: UPSERT.append_column("extra", pa.array([1] * 6)),
        SchemaError,
        r"unknown column\(s\) \['extra'\]",
    ),
    "missing-data-column": (lambda: _without(UPSERT, "v"), SchemaError, r"missing column\(s\) \['v'\]"),
    "partition-value-with-slash": (
        lambda: UPSERT.set_column(2, "city", pa.array(["a/b"] * 6)),
        SchemaError,
        "cannot be a directory name",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_BATCHES))
@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_writer_bad_batch_raises_and_changes_nothing(tmp_path: Path, kind: str, case: str) -> None:
    path = tmp_path / "t"
    table = _make(path, kind, True)
    write(table, INSERT, "insert")
    make_batch, error, message = BAD_BATCHES[case]
    before = _tree(path)
    for operation in ("insert", "upsert"):
        with pytest.raises(error, match=message) as info:
            write(table, make_batch(), operation)
        assert isinstance(info.value, LakeError)
        assert _tree(path) == before
    _assert_reads(path, _expected("insert", True))


def test_writer_open_path_not_a_table_raises_and_creates_nothing(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "data.parquet").write_bytes(b"x")
    before = _tree(tmp_path)
    for target in (tmp_path / "plain", tmp_path / "missing"):
        with pytest.raises(TableNotFoundError, match=str(target)) as info:
            LakeTable.open(target)
        assert isinstance(info.value, LakeError)
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("version", ["5", "7"])
def test_writer_table_version_not_6_refused_and_changes_nothing(tmp_path: Path, version: str) -> None:
    path = tmp_path / "t"
    table = _make(path, "cow", True)
    write(table, INSERT, "insert")
    props = path / ".hoodie" / "hoodie.properties"
    text = props.read_text()
    assert "hoodie.table.version=6\n" in text
    props.write_text(text.replace("hoodie.table.version=6\n", f"hoodie.table.version={version}\n"))
    before = _tree(path)
    with pytest.raises(
        UnsupportedTableVersionError, match=f"hoodie.table.version={version} is not supported"
    ):
        LakeTable.open(path)
    assert _tree(path) == before
