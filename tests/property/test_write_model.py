"""Random insert/upsert/delete histories: our reader, hudi-rs and an in-memory model agree exactly."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
from hudi import HudiTableBuilder
from hypothesis import given, settings
from hypothesis import strategies as st
from s3_helpers import hudi_s3_options, s3_client, s3_env

from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.writer import write

KEYS = [f"k{i}" for i in range(8)]
CITIES = ["sf", "nyc"]
Row = tuple[str, str, int, int]  # key, city, ts, value


def _latest(batch: list[Row], partitioned: bool) -> dict[tuple[str, str], Row]:
    """One row per key of a batch: the largest ts wins, later rows win ties."""
    latest: dict[tuple[str, str], Row] = {}
    for row in batch:
        ident = (row[1] if partitioned else "", row[0])
        if ident not in latest or row[2] >= latest[ident][2]:
            latest[ident] = row
    return latest


@dataclass
class Model:
    """Copy-on-write, event-time semantics: a version replaces the stored one if its ts is at least as
    large; a deleted key is gone, and a later version of it is a new row."""

    rows: dict[tuple[str, str], tuple[int, int, str]] = field(default_factory=dict)

    def apply(self, op: str, batch: list[Row], instant: str, partitioned: bool) -> None:
        for ident, (_key, _city, ts, value) in _latest(batch, partitioned).items():
            current = self.rows.get(ident)
            if current is not None and ts < current[0]:
                continue
            if op == "delete":
                self.rows.pop(ident, None)
            else:
                self.rows[ident] = (ts, value, instant)

    def expected(self) -> list[tuple[str, str, int, int, str]]:
        return sorted((p, k, ts, v, t) for (p, k), (ts, v, t) in self.rows.items())


@dataclass
class MorModel:
    """Merge-on-read as Hudi merges it: a key stays in its file group's base file (until compaction,
    which this test does not run) and later versions go to the log. The log is folded first (a version
    replaces the last one if its ts is at least as large; a delete with ts 0 is a "natural order"
    delete that beats every version before it, and a delete after it changes nothing), then the
    result meets the base row: the base row stays if its ts is strictly larger, except against a
    natural-order delete."""

    base: dict[tuple[str, str], tuple[int, int, str]] = field(default_factory=dict)
    log: dict[tuple[str, str], tuple] = field(default_factory=dict)

    def apply(self, op: str, batch: list[Row], instant: str, partitioned: bool) -> None:
        for ident, (_key, _city, ts, value) in _latest(batch, partitioned).items():
            if ident not in self.base:
                if op != "delete":  # a new key: a new base file
                    self.base[ident] = (ts, value, instant)
                continue
            if op == "delete":
                record: tuple = ("natural",) if ts == 0 else ("delete", ts)
            else:
                record = ("data", ts, value, instant)
            last = self.log.get(ident)
            if last is not None and last[0] == "natural" and record[0] == "delete":
                continue  # still deleted, in natural order
            if last is None or last[0] == "natural" or record[0] == "natural" or record[1] >= last[1]:
                self.log[ident] = record

    def expected(self) -> list[tuple[str, str, int, int, str]]:
        out = []
        for (p, k), base in self.base.items():
            last = self.log.get((p, k))
            if last is None:
                row = base
            elif last[0] == "natural":
                row = None
            elif last[0] == "delete":
                row = base if base[0] > last[1] else None
            else:
                row = base if base[0] > last[1] else last[1:]
            if row is not None:
                out.append((p, k, *row))
        return sorted(out)


# Columns derived from ``value``, so the model needs no change: a float32 column written from float64
# values (exact in float32), and nested columns with null structs and empty lists.
def _struct(floats: pa.DataType) -> pa.DataType:
    return pa.struct([("v", pa.int64()), ("half", floats)])


def _f(value: int) -> float:
    return value * 0.25


def _tags(value: int) -> list[int] | None:
    return None if value % 7 == 0 else [value] * (value % 3)


def _st(value: int) -> dict | None:
    return None if value % 5 == 0 else {"v": value, "half": value / 2}


def _observed(table: pa.Table, partitioned: bool) -> list[tuple[str, str, int, int, str]]:
    if table.num_rows == 0:
        return []
    for r in table.select(["value", "f", "tags", "st"]).to_pylist():
        assert (r["f"], r["tags"], r["st"]) == (_f(r["value"]), _tags(r["value"]), _st(r["value"])), r
    cols = table.select(
        ["_hoodie_partition_path", "_hoodie_record_key", "ts", "value", "_hoodie_commit_time"]
    )
    out = []
    for r in cols.to_pylist():
        part = r["_hoodie_partition_path"]
        part = part.split("=")[-1] if partitioned else ""
        out.append((part, r["_hoodie_record_key"], r["ts"], r["value"], r["_hoodie_commit_time"]))
    return sorted(out)


def _hudi_rs(path: Path) -> pa.Table:
    batches = HudiTableBuilder.from_base_uri(str(path)).build().read()
    return pa.Table.from_batches(batches) if batches else pa.table({})


rows_st = st.lists(
    st.tuples(st.sampled_from(KEYS), st.sampled_from(CITIES), st.integers(0, 4), st.integers(0, 1000)),
    min_size=1,
    max_size=12,
)
steps_st = st.lists(
    st.tuples(st.sampled_from(["insert", "upsert", "upsert", "delete"]), rows_st), min_size=1, max_size=6
)


@given(
    table_type=st.sampled_from(["cow", "mor"]),
    partitioned=st.booleans(),
    hive_style=st.booleans(),
    steps=steps_st,
)
def test_write_history_ours_hudi_rs_and_model_agree(
    tmp_path_factory, table_type: str, partitioned: bool, hive_style: bool, steps: list[tuple[str, list[Row]]]
) -> None:
    path = tmp_path_factory.mktemp("prop") / "t"
    _history(str(path), lambda: _hudi_rs(path), table_type, partitioned, hive_style, steps)


@settings(max_examples=25)
@given(
    table_type=st.sampled_from(["cow", "mor"]),
    partitioned=st.booleans(),
    hive_style=st.booleans(),
    steps=steps_st,
)
def test_write_history_on_s3_ours_hudi_rs_and_model_agree(
    s3_endpoint: str, table_type: str, partitioned: bool, hive_style: bool, steps: list[tuple[str, list[Row]]]
) -> None:
    """The same histories on an s3:// table (moto's S3 server on 127.0.0.1), hudi-rs reading S3."""
    uri = f"s3://{_bucket(s3_endpoint)}/{uuid.uuid4().hex}"
    with s3_env(s3_endpoint):

        def hudi() -> pa.Table:
            builder = HudiTableBuilder.from_base_uri(uri).with_storage_options(hudi_s3_options(s3_endpoint))
            batches = builder.build().read()
            return pa.Table.from_batches(batches) if batches else pa.table({})

        _history(uri, hudi, table_type, partitioned, hive_style, steps)


_BUCKETS: dict[str, str] = {}


def _bucket(endpoint: str) -> str:
    """One bucket per S3 server for all examples (tables go under distinct prefixes)."""
    if endpoint not in _BUCKETS:
        _BUCKETS[endpoint] = f"prop-{uuid.uuid4().hex[:12]}"
        s3_client(endpoint).create_bucket(Bucket=_BUCKETS[endpoint])
    return _BUCKETS[endpoint]


def _history(
    location: str,
    hudi: Callable[[], pa.Table],
    table_type: str,
    partitioned: bool,
    hive_style: bool,
    steps: list[tuple[str, list[Row]]],
) -> None:
    table = LakeTable.create(
        location,
        name="prop",
        table_type=table_type,
        record_key_fields=("key",),
        precombine_field="ts",
        partition_fields=("city",) if partitioned else (),
        hive_style=hive_style,
    )
    model: Model | MorModel = MorModel() if table_type == "mor" else Model()
    history: list[tuple[str, list]] = []
    for step, (op, batch) in enumerate(steps):
        # The first write makes the float columns float32; later ones send float64 that must fit.
        floats = pa.float32() if step == 0 else pa.float64()
        data = pa.table(
            {
                "key": [r[0] for r in batch],
                "city": [r[1] for r in batch],
                "ts": pa.array([r[2] for r in batch], pa.int64()),
                "value": pa.array([r[3] for r in batch], pa.int64()),
                "f": pa.array([_f(r[3]) for r in batch], floats),
                "tags": pa.array([_tags(r[3]) for r in batch], pa.list_(pa.int64())),
                "st": pa.array([_st(r[3]) for r in batch], _struct(floats)),
            }
        )
        result = write(table, data, op)
        model.apply(op, batch, result.instant, partitioned)
        expected = model.expected()
        assert _observed(read_snapshot(table), partitioned) == expected, (
            f"ours after {op} at {result.instant}"
        )
        assert _observed(hudi(), partitioned) == expected, f"hudi-rs after {op} at {result.instant}"
        history.append((result.instant, expected))
    assert table.arrow_schema().field("f").type == pa.float32()
    # Time travel: every earlier instant still reads exactly as it did right after its commit.
    for instant, expected in history:
        assert _observed(read_snapshot(table, as_of=instant), partitioned) == expected, f"as of {instant}"
