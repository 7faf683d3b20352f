"""What a write plans (``table.write.plan``): one part per file group it touches, numbered for the
write tokens and commit sequence numbers, and a context and parts that reach a Spark executor whole
(pickled) and write there exactly what they write here."""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from pathlib import Path

import pytest
from write_support import T1, T2, batch, hudi_rows, our_rows, table

from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import (
    FileGroupResult,
    FileGroupWrite,
    GroupKind,
    Operation,
    WriteContext,
    write,
    write_file_group,
)


@pytest.mark.parametrize(("kind", "update"), [("cow", GroupKind.MERGE), ("mor", GroupKind.APPEND)])
def test_an_upsert_plans_a_new_group_for_a_new_key_and_a_part_of_the_group_holding_the_old_one(
    tmp_path: Path, kind: str, update: GroupKind
) -> None:
    path = tmp_path / "t"
    t = table(path, kind)
    [old] = write(t, batch([1, 2]), "insert").files
    old_id = old.split("_", 1)[0]
    planned: list[tuple[WriteContext, list[FileGroupWrite]]] = []

    def runner(
        there: LakeTable, context: WriteContext, units: Sequence[FileGroupWrite]
    ) -> list[FileGroupResult]:
        planned.append((context, list(units)))
        shipped, parts = pickle.loads(pickle.dumps((context, list(units))))  # as Spark ships them
        return [write_file_group(there, shipped, part) for part in parts]

    done = write(t, batch([2, 3], ts=2, v="y"), "upsert", runner=runner)
    [(context, (new, held))] = planned
    assert (context.instant, context.operation) == (T2, Operation.UPSERT)
    assert context.timeline.last_completed_commit.timestamp == T1
    # The new key: a new file group, written first, its partition's metadata file with it.
    assert (new.index, new.kind, new.partition, new.seqno_start, new.first_in_partition) == (
        1,
        GroupKind.INSERT,
        "",
        0,
        True,
    )
    assert new.file_id != old_id and new.merged is None and new.newest is None
    assert new.rows.column("id").to_pylist() == [3]
    # The updated key: the group that holds it, merged (COW) or logged (MOR) over its latest slice.
    assert (held.index, held.kind, held.file_id, held.seqno_start, held.first_in_partition) == (
        2,
        update,
        old_id,
        1,
        False,
    )
    assert held.rows.column("id").to_pylist() == [2]
    assert held.merged is not None and held.merged.file_id == old_id
    assert (held.newest is not None) == (kind == "mor")
    # The write tokens carry each part's index: what the executor wrote is what the plan named.
    tokens = sorted(_write_token(f.rsplit("/", 1)[-1]) for f in done.files)
    assert tokens == ["1-1-0", "2-1-0"]
    assert (done.inserted, done.updated) == (1, 1)
    assert our_rows(path, "id", "v") == hudi_rows(path, "id", "v") == [(1, "x1"), (2, "y2"), (3, "y3")]


def _write_token(name: str) -> str:
    """``<file id>_<token>_<instant>.parquet`` or ``.<file id>_<instant>.log.<version>_<token>``."""
    return name.split("_")[1] if name.endswith(".parquet") else name.rsplit("_", 1)[1]
