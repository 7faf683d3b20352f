"""Random insert/upsert/delete histories: our reader, hudi-rs and an in-memory model agree exactly."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
from hudi import HudiTableBuilder
from hypothesis import given
from hypothesis import strategies as st

from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.writer import write

KEYS = [f"k{i}" for i in range(8)]
CITIES = ["sf", "nyc"]
Row = tuple[str, str, int, int]  # key, city, ts, value


@dataclass
class Model:
    """Event-time semantics: a version replaces the stored one if its ts is at least as large.

    Merge-on-read tables keep a deleted key in its file group's base file until compaction, so a
    later version of that key is merged after the delete: it shows only if its ts is at least the
    delete's (Hudi's payload merge), and a delete with ts 0 is Java's natural-order delete. Copy-on-
    write tables drop the key, and a later version is new.
    """

    mor: bool = False
    rows: dict[tuple[str, str], tuple[int, int, str]] = field(default_factory=dict)
    tombstones: dict[tuple[str, str], int] = field(default_factory=dict)

    def apply(self, op: str, batch: list[Row], instant: str, partitioned: bool) -> None:
        latest: dict[tuple[str, str], Row] = {}
        for row in batch:  # within a batch: largest ts wins, later rows win ties
            ident = (row[1] if partitioned else "", row[0])
            if ident not in latest or row[2] >= latest[ident][2]:
                latest[ident] = row
        for ident, (_key, _city, ts, value) in latest.items():
            current = self.rows.get(ident)
            tomb = self.tombstones.get(ident)
            # In a log, a delete with ordering value 0 is Java's "natural order" delete: it beats
            # every version before it, whatever their ordering.
            natural = self.mor and op == "delete" and ts == 0
            if not natural and current is not None and ts < current[0]:
                continue
            if not natural and current is None and tomb is not None and ts < tomb:
                continue  # merged after a newer delete: it loses
            if op == "delete":
                if current is not None or tomb is not None:
                    self.rows.pop(ident, None)
                    if self.mor:
                        self.tombstones[ident] = ts
            else:
                self.rows[ident] = (ts, value, instant)
                self.tombstones.pop(ident, None)

    def expected(self) -> list[tuple[str, str, int, int, str]]:
        return sorted((p, k, ts, v, t) for (p, k), (ts, v, t) in self.rows.items())


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
    table = LakeTable.create(
        path,
        name="prop",
        table_type=table_type,
        record_key_fields=("key",),
        precombine_field="ts",
        partition_fields=("city",) if partitioned else (),
        hive_style=hive_style,
    )
    model = Model(mor=table_type == "mor")
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
        assert _observed(_hudi_rs(path), partitioned) == expected, f"hudi-rs after {op} at {result.instant}"
        history.append((result.instant, expected))
    assert table.arrow_schema().field("f").type == pa.float32()
    # Time travel: every earlier instant still reads exactly as it did right after its commit.
    for instant, expected in history:
        assert _observed(read_snapshot(table, as_of=instant), partitioned) == expected, f"as of {instant}"
