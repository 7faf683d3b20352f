"""Random histories of inserts, upserts and deletes, with compactions and cleans between them: after
every step our reader, hudi-rs and an in-memory model agree exactly, and time travel reads every
instant a clean kept as it was. Merge-on-read compactions are also scheduled alone and executed
later, with writes (deletes and re-inserts among them) on top of their plan in between; hudi-rs,
which hides those writes until the compaction completes, is asked only when none is pending.

Tables have composite record keys (a part may be null), no, one or two partition fields (plain or
hive-style folders), and columns of many types derived from each row's ``value`` (decimal,
timestamp, date, string, float, list, struct; nulls and empty lists among them), so the model only
tracks (precombine value, value, commit time) per key and copy. A "blind" insert, written while the
partition's data files are out of sight (as Spark's ``insert``, which does not look keys up, writes),
puts a second copy of a key in a new file group: later writes reach every copy.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal

import pyarrow as pa
import pytest
from hudi import HudiReadOptions, HudiTableBuilder
from hypothesis import given, settings
from hypothesis import strategies as st
from property_support import SUMMARY, derandomized, example_dir, examples, tally
from s3_helpers import hudi_s3_options, s3_client, s3_env

from airflow_lake_provider.lake.errors import SnapshotCleanedError
from airflow_lake_provider.lake.services.clean.executor import run_clean
from airflow_lake_provider.lake.services.clean.result import Outcome as CleanOutcome
from airflow_lake_provider.lake.services.compaction.executor import execute_compaction, run_compaction
from airflow_lake_provider.lake.services.compaction.result import Outcome as CompactionOutcome
from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.table.write.writer import WriteResult

KEYS = ["k0", "k1", "k2", "k3"]
SUBS = [0, None]  # the second key field; a null part is written "__null__"
REGIONS = ["eu", "us"]
CITIES = ["sf", "nyc"]
PARTITIONINGS = [(), ("city",), ("region", "city")]
Row = tuple[str, int | None, str, str, int, int]  # key, sub, region, city, ts, value
Ident = tuple[str, str]  # partition path, record key
Copy = tuple[str, str, str]  # partition path, record key, the instant that created the copy
STATS = tally("write model")
STATS_V8 = tally("write model, table version 8")
EPOCH = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


def _record_key(key: str, sub: int | None) -> str:
    return f"key:{key},sub:{'__null__' if sub is None else sub}"


def _partition(row: Row, fields: tuple[str, ...], hive: bool) -> str:
    values = {"region": row[2], "city": row[3]}
    return "/".join(f"{f}={values[f]}" if hive else values[f] for f in fields)


def _copies(state: dict, ident: Ident) -> list[Copy]:
    """The copies of ``ident`` that ``state`` (rows, base or log) holds, oldest first."""
    return sorted(c for c in state if c[:2] == ident)


def _latest(batch: list[Row], fields: tuple[str, ...], hive: bool) -> dict[Ident, Row]:
    """One row per key of a batch: the largest ts wins, later rows win ties."""
    latest: dict[Ident, Row] = {}
    for row in batch:
        ident = (_partition(row, fields, hive), _record_key(row[0], row[1]))
        if ident not in latest or row[4] >= latest[ident][4]:
            latest[ident] = row
    return latest


@dataclass
class Model:
    """Copy-on-write, event-time semantics: a version replaces the stored one if its ts is at least as
    large; a deleted key is gone, and a later version of it is a new row. Each copy of a key (in its
    own file group) meets every write of the key on its own."""

    rows: dict[Copy, tuple[int, int, str]] = field(default_factory=dict)
    stats: Counter[str] = field(default_factory=lambda: STATS)

    def apply(self, op: str, latest: dict[Ident, Row], instant: str) -> None:
        for ident, row in latest.items():
            copies = _copies(self.rows, ident)
            if len(copies) > 1:
                self.stats["writes to a key in several file groups"] += 1
            if not copies and op != "delete":
                self.rows[(*ident, instant)] = (row[4], row[5], instant)
            for copy in copies:
                if row[4] < self.rows[copy][0]:
                    continue
                if op == "delete":
                    del self.rows[copy]
                else:
                    self.rows[copy] = (row[4], row[5], instant)

    def blind(self, latest: dict[Ident, Row], instant: str) -> None:
        """An insert that did not look its keys up: each a new row in a new file group."""
        for ident, row in latest.items():
            self.rows[(*ident, instant)] = (row[4], row[5], instant)

    def compact(self) -> None:
        """Copy-on-write has nothing to compact."""

    def expected(self) -> list[tuple[str, str, int, int, str]]:
        return _rows(self.rows)


@dataclass
class MorModel:
    """Merge-on-read as Hudi merges it: a key stays in its file group's base file until compaction and
    later versions go to the log. The log is folded first (a version replaces the last one if its ts
    is at least as large; a delete with ts 0 is a "natural order" delete that beats every version
    before it, and a delete after it changes nothing), then the result meets the base row: the base
    row stays if its ts is strictly larger, except against a natural-order delete. Compaction makes
    the merged rows the new base (deleted keys leave it) and empties the log.

    A compaction scheduled alone (``schedule``) takes the log as it is then (``frozen``); writes
    before its execution go on folding into the log, which readers merge whole, and into ``since``,
    the log of the new slice. Its execution merges the frozen log into the base and keeps ``since``
    as the log, so a key deleted before the plan and written again after it lives in the log only,
    and the key lookup must find it there (a key found in no base and no log is a new row).

    A key in several file groups (copies): a write reaches the copies in base files, or, when none
    is, those in logs (logs are searched only for keys in no base file)."""

    base: dict[Copy, tuple[int, int, str]] = field(default_factory=dict)
    log: dict[Copy, tuple] = field(default_factory=dict)
    frozen: dict[Copy, tuple] | None = None  # the log a pending compaction merges
    since: dict[Copy, tuple] = field(default_factory=dict)  # logged after it was scheduled
    stats: Counter[str] = field(default_factory=lambda: STATS)  # the tally of the test using it

    def apply(self, op: str, latest: dict[Ident, Row], instant: str) -> None:
        for ident, row in latest.items():
            copies = _copies(self.base, ident) or _copies(self.log, ident)
            if not copies and op != "delete":  # a new key: a new base file
                self.base[(*ident, instant)] = (row[4], row[5], instant)
            if len(copies) > 1:
                self.stats["writes to a key in several file groups"] += 1
            for copy in copies:
                self._apply_copy(op, copy, row, instant)

    def blind(self, latest: dict[Ident, Row], instant: str) -> None:
        """An insert that did not look its keys up: each a new base row in a new file group."""
        for ident, row in latest.items():
            self.base[(*ident, instant)] = (row[4], row[5], instant)

    def _apply_copy(self, op: str, ident: Copy, row: Row, instant: str) -> None:
        ts, value = row[4], row[5]
        if ident not in self.base:
            self.stats["writes to keys living only in logs"] += 1
        if self.frozen is not None:
            self.stats["writes while a compaction was pending"] += 1
            if op != "delete" and ident in self.frozen and _merged(self.base, self.frozen).get(ident) is None:
                self.stats["re-inserts on top of a pending compaction of their delete"] += 1
        if op == "delete":
            record: tuple = ("natural",) if ts == 0 else ("delete", ts)
        else:
            record = ("data", ts, value, instant)
        self.log[ident] = _fold(self.log.get(ident), record)
        if self.frozen is not None:
            self.since[ident] = _fold(self.since.get(ident), record)

    def schedule(self) -> None:
        self.frozen, self.since = dict(self.log), {}

    def execute(self) -> None:
        assert self.frozen is not None
        self.base, self.log = _merged(self.base, self.frozen), self.since
        self.frozen, self.since = None, {}

    def compact(self) -> None:
        self.base, self.log = _merged(self.base, self.log), {}

    def expected(self) -> list[tuple[str, str, int, int, str]]:
        return _rows(_merged(self.base, self.log))


def _fold(last: tuple | None, record: tuple) -> tuple:
    """The log's last word on a key after ``record`` (see :class:`MorModel`)."""
    if last is not None and last[0] == "natural" and record[0] == "delete":
        return last  # still deleted, in natural order
    if last is None or last[0] == "natural" or record[0] == "natural" or record[1] >= last[1]:
        return record
    return last


def _merged(
    base: dict[Copy, tuple[int, int, str]], log: dict[Copy, tuple]
) -> dict[Copy, tuple[int, int, str]]:
    """The rows of ``base`` merged with ``log`` (keys in the log only included)."""
    out = {}
    for ident in base.keys() | log.keys():
        row, last = base.get(ident), log.get(ident)
        if last is None:
            pass
        elif last[0] == "natural":
            row = None
        elif last[0] == "delete":
            row = row if row is not None and row[0] > last[1] else None
        else:
            row = row if row is not None and row[0] > last[1] else last[1:]
        if row is not None:
            out[ident] = row
    return out


def _rows(merged: dict[Copy, tuple[int, int, str]]) -> list[tuple[str, str, int, int, str]]:
    return sorted((p, k, *row) for (p, k, _), row in merged.items())


# -- Columns derived from ``value`` (nulls and empty lists among them) ------------------------------
AMOUNT = pa.decimal128(12, 2)
INNER = pa.struct([("v", pa.int64()), ("amount", AMOUNT), ("day", pa.date32())])


def _derived(value: int) -> dict[str, object]:
    return {
        "f": value * 0.25,  # exact in float32 (the first write makes the column float32)
        "amount": None if value % 11 == 0 else Decimal(value) / 4,
        "at": None if value % 13 == 0 else EPOCH + dt.timedelta(seconds=value, microseconds=value),
        "day": None if value % 17 == 0 else (EPOCH + dt.timedelta(days=value)).date(),
        "note": None if value % 3 == 0 else f"n{value}",
        "tags": None if value % 7 == 0 else [value] * (value % 3),
        "st": None
        if value % 5 == 0
        else {
            "v": value,
            "amount": None if value % 2 else Decimal(-value) / 8,
            "day": (EPOCH + dt.timedelta(days=value % 400)).date(),
        },
    }


def _columns(batch: list[Row], floats: pa.DataType) -> dict[str, pa.Array]:
    derived = [_derived(r[5]) for r in batch]
    return {
        "f": pa.array([d["f"] for d in derived], floats),
        "amount": pa.array([d["amount"] for d in derived], AMOUNT),
        "at": pa.array([d["at"] for d in derived], pa.timestamp("us", tz="UTC")),
        "day": pa.array([d["day"] for d in derived], pa.date32()),
        "note": pa.array([d["note"] for d in derived], pa.string()),
        "tags": pa.array([d["tags"] for d in derived], pa.list_(pa.int64())),
        "st": pa.array([d["st"] for d in derived], INNER),
    }


def _normal(value: object) -> object:
    """One spelling for what readers may type differently (a timestamp with or without its zone)."""
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=dt.timezone.utc) if value.tzinfo is None else value
    return value


def _observed(table: pa.Table) -> list[tuple[str, str, int, int, str]]:
    if table.num_rows == 0:
        return []
    derived = ["value", *_derived(0)]
    for r in table.select(derived).to_pylist():
        got = {k: _normal(v) for k, v in r.items() if k != "value"}
        assert got == _derived(r["value"]), r
    cols = table.select(
        ["_hoodie_partition_path", "_hoodie_record_key", "ts", "value", "_hoodie_commit_time"]
    )
    return sorted(tuple(r.values()) for r in cols.to_pylist())


def _read_hudi(uri: str, options: dict[str, str], as_of: str | None = None) -> pa.Table:
    hudi = HudiTableBuilder.from_base_uri(uri).with_storage_options(options).build()
    batches = hudi.read(HudiReadOptions().with_as_of_timestamp(as_of)) if as_of else hudi.read()
    return pa.Table.from_batches(batches) if batches else pa.table({})


row_st = st.tuples(
    st.sampled_from(KEYS),
    st.sampled_from(SUBS),
    st.sampled_from(REGIONS),
    st.sampled_from(CITIES),
    st.integers(0, 4),
    st.integers(0, 1000),
)
write_st = st.tuples(
    # One write in nine a blind insert (no more writes: the history test's time stays the same).
    st.sampled_from(["insert", "upsert", "upsert", "delete"] * 2 + ["blind"]),
    st.lists(row_st, min_size=1, max_size=10),
)
service_st = st.one_of(
    st.just(("compact", 0)),  # executes a pending compaction, else schedules and executes one
    st.just(("compact", 0)),
    st.tuples(st.just("clean"), st.integers(1, 3)),  # commits retained
    st.just(("clean", 0)),  # KEEP_LATEST_FILE_VERSIONS, one version
)


def _rewritten(rows: list[Row], draw: st.DrawFn) -> list[Row]:
    """The same keys with new ts and values."""
    return [(*r[:4], draw(st.integers(0, 4)), draw(st.integers(0, 1000))) for r in rows]


@st.composite
def steps_st(draw: st.DrawFn) -> list[tuple]:
    """Rounds of 1-3 writes, each round mostly followed by a compaction or a clean; or a compaction
    scheduled alone, 1-3 writes on top of its plan, then mostly its execution."""
    steps: list[tuple] = []
    for _ in range(draw(st.integers(1, 4))):
        if draw(st.integers(0, 3)) == 0:
            # Mostly keys deleted just before the plan and written again on top of it: once the
            # compaction ran, they live in its new slice's log only (the key lookup must find them).
            again = draw(st.lists(row_st, min_size=1, max_size=4)) if draw(st.integers(0, 2)) else []
            steps += [("delete", again)] if again else []
            steps.append(("schedule", 0))
            steps += [("upsert", _rewritten(again, draw))] if again else []
            steps += draw(st.lists(write_st, min_size=0 if again else 1, max_size=2))
            if draw(st.integers(0, 3)) > 0:
                steps.append(("compact", 0))  # executes the pending compaction
                if again and draw(st.booleans()):
                    steps.append((draw(st.sampled_from(["upsert", "delete"])), _rewritten(again, draw)))
            continue
        steps += draw(st.lists(write_st, min_size=1, max_size=3))
        if draw(st.integers(0, 4)) > 0:
            steps.append(draw(service_st))
    return steps


@settings(max_examples=examples(50), derandomize=derandomized())
@given(
    table_type=st.sampled_from(["cow", "mor"]),
    partitioning=st.sampled_from(PARTITIONINGS),
    hive_style=st.booleans(),
    steps=steps_st(),
)
def test_write_history_ours_hudi_rs_and_model_agree(
    tmp_path_factory, table_type: str, partitioning: tuple[str, ...], hive_style: bool, steps: list[tuple]
) -> None:
    path = str(example_dir(tmp_path_factory, "prop") / "t")
    _history(path, {}, table_type, partitioning, hive_style, steps)


@settings(max_examples=examples(30), derandomize=derandomized())
@given(
    table_type=st.sampled_from(["cow", "mor"]),
    partitioning=st.sampled_from(PARTITIONINGS),
    hive_style=st.booleans(),
    steps=steps_st(),
)
def test_write_history_on_v8_ours_hudi_rs_and_model_agree(
    tmp_path_factory, table_type: str, partitioning: tuple[str, ...], hive_style: bool, steps: list[tuple]
) -> None:
    """The same histories on table version 8 (timeline layout 2, one log file per deltacommit,
    slicing by completion time), compactions (scheduled alone too, with writes on top of their plan)
    and cleans among them, as on version 6."""
    path = str(example_dir(tmp_path_factory, "prop8") / "t")
    _history(path, {}, table_type, partitioning, hive_style, steps, table_version=8, stats=STATS_V8)


@settings(max_examples=examples(8))
@given(
    table_type=st.sampled_from(["cow", "mor"]),
    partitioning=st.sampled_from(PARTITIONINGS),
    hive_style=st.booleans(),
    steps=steps_st(),
)
def test_write_history_on_s3_ours_hudi_rs_and_model_agree(
    s3_endpoint: str, table_type: str, partitioning: tuple[str, ...], hive_style: bool, steps: list[tuple]
) -> None:
    """The same histories on an s3:// table (moto's S3 server on 127.0.0.1), hudi-rs reading S3."""
    uri = f"s3://{_bucket(s3_endpoint)}/{uuid.uuid4().hex}"
    with s3_env(s3_endpoint):
        _history(uri, hudi_s3_options(s3_endpoint), table_type, partitioning, hive_style, steps)


_BUCKETS: dict[str, str] = {}


def _bucket(endpoint: str) -> str:
    """One bucket per S3 server for all examples (tables go under distinct prefixes)."""
    if endpoint not in _BUCKETS:
        _BUCKETS[endpoint] = f"prop-{uuid.uuid4().hex[:12]}"
        s3_client(endpoint).create_bucket(Bucket=_BUCKETS[endpoint])
    return _BUCKETS[endpoint]


def _history(
    location: str,
    hudi_options: dict[str, str],
    table_type: str,
    partitioning: tuple[str, ...],
    hive_style: bool,
    steps: list[tuple],
    table_version: int = 6,
    stats: Counter[str] = STATS,
) -> None:
    table = LakeTable.create(
        location,
        name="prop",
        table_type=table_type,
        record_key_fields=("key", "sub"),
        precombine_field="ts",
        partition_fields=partitioning,
        hive_style=hive_style,
        table_version=table_version,
    )
    model: Model | MorModel = MorModel(stats=stats) if table_type == "mor" else Model(stats=stats)
    history: list[tuple[str, list]] = []
    floor = ""  # instants before it may have lost files to a clean: time travel may refuse them
    pending: str | None = None  # a compaction scheduled alone, not executed yet
    planned_base: dict = {}  # the model's base when it was scheduled
    # History entries written while it was pending: index -> the model's base and ``since`` then.
    window: dict[int, tuple[dict, dict]] = {}

    def check(what: str) -> None:
        expected = model.expected()
        assert _observed(read_snapshot(table)) == expected, f"ours after {what}"
        # On v6 hudi-rs hides the logs written on top of a pending compaction; on v8 (slices by
        # completion time) it reads them.
        if pending is None or table_version != 6:
            assert _observed(_read_hudi(location, hudi_options)) == expected, f"hudi-rs after {what}"

    def execute_pending() -> None:
        nonlocal pending
        assert isinstance(model, MorModel) and pending is not None and model.frozen is not None
        done = execute_compaction(table, pending)
        assert done.outcome is CompactionOutcome.COMPLETED, done
        # A read as of a write on top of the plan now takes the compaction's slice (its instant is
        # older than the write): the new base, then the logs written since the plan, up to then.
        for index, (base, since) in window.items():
            history[index] = (history[index][0], _rows(_merged(_merged(base, model.frozen), since)))
        stats[
            "compactions scheduled alone, executed" + (" after writes on their plan" if window else "")
        ] += 1
        # As of the compaction's own (older) instant: its new base, without the writes after it.
        history.append((pending, _rows(_merged(planned_base, model.frozen))))
        history.sort(key=lambda entry: entry[0])
        model.execute()
        instant, pending = pending, None
        window.clear()
        check(f"execution of compaction {instant}")

    for op, arg in steps:
        if op == "schedule":
            if table_type != "mor" or pending is not None:
                continue
            planned = schedule_compaction(table, force=True)
            if planned.outcome is not CompactionOutcome.SCHEDULED:
                continue  # no log to compact
            assert isinstance(model, MorModel)
            pending, planned_base = planned.instant, dict(model.base)
            model.schedule()
            check(f"schedule of compaction {pending}")
        elif op == "compact":
            if table_type != "mor":
                continue
            if pending is not None:
                execute_pending()
                continue
            scheduled, done = run_compaction(table, force=True)
            stats["compactions tried"] += 1
            if done.outcome is not CompactionOutcome.COMPLETED:
                continue
            model.compact()
            stats["compactions"] += 1
            check(f"compaction {scheduled.instant}")
            history.append((scheduled.instant, model.expected()))
        elif op == "clean":
            options = (
                {"hoodie.cleaner.commits.retained": str(arg)}
                if arg
                else {
                    "hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS",
                    "hoodie.cleaner.fileversions.retained": "1",
                }
            )
            result = run_clean(table, options)
            stats[
                "cleans" + (" that deleted files" if result.deleted_files else " that deleted nothing")
            ] += 1
            if result.outcome is CleanOutcome.CLEANED:
                commits = [t for t, _ in history]
                keep = commits[-arg] if arg and len(commits) >= arg else commits[-1]
                floor = max(floor, keep)
            check(f"clean {result.instant}")
        else:
            if op == "blind" and pending is not None:
                continue  # the pending plan names file groups a blind insert would hide
            batch = arg
            # The first write makes the float column float32; later ones send float64 that must fit.
            floats = pa.float32() if not history else pa.float64()
            data = pa.table(
                {
                    "key": [r[0] for r in batch],
                    "sub": pa.array([r[1] for r in batch], pa.int64()),
                    "region": [r[2] for r in batch],
                    "city": [r[3] for r in batch],
                    "ts": pa.array([r[4] for r in batch], pa.int64()),
                    "value": pa.array([r[5] for r in batch], pa.int64()),
                    **_columns(batch, floats),
                }
            )
            if op == "blind":
                partitions = {_partition(r, partitioning, hive_style) for r in batch}
                result = _blind_insert(table, data, partitions)
                model.blind(_latest(batch, partitioning, hive_style), result.instant)
                stats["blind inserts"] += 1
            else:
                result = write(table, data, op)
                model.apply(op, _latest(batch, partitioning, hive_style), result.instant)
                stats[f"{op}s"] += 1
            check(f"{op} at {result.instant}")
            if pending is not None:
                assert isinstance(model, MorModel)
                window[len(history)] = (dict(model.base), dict(model.since))
            history.append((result.instant, model.expected()))
    if pending is not None:
        execute_pending()  # hudi-rs reads the time travel below only of completed compactions
    if history:
        assert table.arrow_schema().field("f").type == pa.float32()
    # Time travel: every instant a clean kept reads exactly as it did right after its commit; an
    # older one reads the same or is refused.
    for instant, expected in history:
        try:
            ours = _observed(read_snapshot(table, as_of=instant))
        except SnapshotCleanedError:
            assert instant < floor, f"as of {instant}: refused, but no clean reached it"
            stats["time travel refused after a clean"] += 1
            continue
        assert ours == expected, f"ours as of {instant}"
        if instant >= floor:
            assert _observed(_read_hudi(location, hudi_options, instant)) == expected, (
                f"hudi-rs as of {instant}"
            )


def _blind_insert(table: LakeTable, data: pa.Table, partitions: set[str]) -> WriteResult:
    """Insert ``data`` while the data files of its partitions are out of sight, so that no key is
    found: a key the table holds gets a second copy in a new file group, as Spark's ``insert`` (which
    does not look keys up) writes one."""
    storage = table.storage
    hidden = {
        rel: storage.read(rel)
        for partition in sorted(partitions)
        for name in storage.list_names(partition)
        if name.endswith(".parquet") or ".log." in name
        for rel in [f"{partition}/{name}" if partition else name]
    }
    for rel in hidden:
        storage.delete(rel)
    try:
        return write(table, data, "insert")
    finally:
        for rel, body in hidden.items():
            storage.write(rel, body)


def test_write_histories_exercised_what_they_claim() -> None:
    """Runs after the local history test: compactions ran (some scheduled alone, with writes, deletes
    and re-inserts on top of their plan before they ran, and keys left living in logs only), cleans
    deleted files and time travel was refused after them."""
    if STATS["inserts"] + STATS["upserts"] + STATS["deletes"] < 40:  # blind inserts not counted
        pytest.skip("the history test did not run (or ran too few examples) in this session")
    for what in (
        "compactions",
        "cleans that deleted files",
        "time travel refused after a clean",
        "compactions scheduled alone, executed after writes on their plan",
        "writes while a compaction was pending",
        "re-inserts on top of a pending compaction of their delete",
        "writes to keys living only in logs",
        "writes to a key in several file groups",
    ):
        SUMMARY.append(f"write model: {what}: {STATS[what]}")
        assert STATS[what], f"never happened: {what}"


def test_write_histories_on_v8_exercised_compaction_and_clean() -> None:
    """Runs after the version 8 history test: compactions ran on version 8, some scheduled alone and
    executed after writes on top of their plan, and cleans deleted files."""
    if STATS_V8["inserts"] + STATS_V8["upserts"] + STATS_V8["deletes"] < 40:
        pytest.skip("the version 8 history test did not run (or ran too few examples) in this session")
    for what in (
        "compactions",
        "compactions scheduled alone, executed after writes on their plan",
        "writes while a compaction was pending",
        "cleans that deleted files",
        "time travel refused after a clean",
        "writes to a key in several file groups",
    ):
        SUMMARY.append(f"write model, table version 8: {what}: {STATS_V8[what]}")
        assert STATS_V8[what], f"never happened on table version 8: {what}"
