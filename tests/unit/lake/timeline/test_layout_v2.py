"""Timeline layout 2 (table versions 8 and 9): file names with completion times, the clustering
action, Avro commit metadata, and the table's timeline as a whole."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from airflow_lake_provider.lake.cli import main
from airflow_lake_provider.lake.errors import CorruptTimelineFileError, InvalidInstantError
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.timeline import layout, layout_v2
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.instant import Action, Instant, State
from airflow_lake_provider.lake.timeline.layouts import LAYOUT_V1, TimelineLayout

T, C = "20260307135840454", "20260307135840902"
MOR_V9 = "mor_avro_v9_txns_simple_nometa"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (f"{T}_{C}.deltacommit", Instant(T, State.COMPLETED, Action.DELTACOMMIT, C)),
        (f"{T}_{C}.replacecommit", Instant(T, State.COMPLETED, Action.REPLACECOMMIT, C)),
        (f"{T}_{C}.commit", Instant(T, State.COMPLETED, Action.COMMIT, C)),
        (f"{T}.inflight", Instant(T, State.INFLIGHT, Action.COMMIT)),
        (f"{T}.commit.requested", Instant(T, State.REQUESTED, Action.COMMIT)),
        (f"{T}.clustering.requested", Instant(T, State.REQUESTED, Action.CLUSTERING)),
        (f"{T}.clustering.inflight", Instant(T, State.INFLIGHT, Action.CLUSTERING)),
        (f"{T}.compaction.requested", Instant(T, State.REQUESTED, Action.COMPACTION)),
    ],
)
def test_layout_v2_parses_names_with_completion_times(name: str, expected: Instant) -> None:
    parsed = layout_v2.parse_file_name(name)
    assert parsed == expected
    assert parsed is not None and parsed.completion_time == expected.completion_time
    assert layout_v2.file_name(parsed) == name


@pytest.mark.parametrize(
    "name",
    [
        f"{T}.deltacommit",  # layout 1's completed name: layout 2 never writes it
        f"{T}_{C}.clustering",  # a clustering completes as a replacecommit
        f"{T}_{C}.compaction",
        f"{T}_{C}.deltacommit.requested",
        f"{T}_{C}.nothing",
        f"{T}_x.nothing",
        "history",
    ],
)
def test_layout_v2_ignores_names_that_are_not_its_instants(name: str) -> None:
    assert layout_v2.parse_file_name(name) is None


@pytest.mark.parametrize(
    "completion",
    [
        *("x", "", "2026040318424192X", "20261403184241921", "2026040318424"),
        *("20260307135840453", "20260307135839"),  # before the instant's own time
    ],
)
def test_a_completed_name_with_a_bad_completion_time_is_refused_not_taken_as_pending(completion: str) -> None:
    with pytest.raises(InvalidInstantError, match="a completed instant file with a bad completion time"):
        layout_v2.parse_file_name(f"{T}_{completion}.deltacommit")


@pytest.mark.parametrize("command", [["timeline"], ["timeline", "-v"], ["read"]])
def test_a_bad_completion_time_on_disk_is_one_error_line_naming_the_file(
    command: list[str],
    hudi_table_zip: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Before, the file was skipped: the deltacommit looked inflight and ``lake read`` wrote 1 row
    of the table's 4, exit 0."""
    path = hudi_table_zip("mor_avro_v9_nonpartitioned_rollback")
    folder = path / ".hoodie" / "timeline"
    bad = folder / "20260403184238571_2026040318424192X.deltacommit"
    (folder / "20260403184238571_20260403184241921.deltacommit").rename(bad)
    out = tmp_path / "out.parquet"
    argv = [command[0], str(path), *command[1:]] + (["--output", str(out)] if command[0] == "read" else [])
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert captured.err == (
        f"lake: error: {bad}: a completed instant file with a bad completion time: "
        "instant time '2026040318424192X' is not 14 or 17 digits (yyyyMMddHHmmss[SSS])\n"
    )
    assert captured.out == "" and not out.exists()
    with pytest.raises(CorruptTimelineFileError, match=str(bad)):
        LakeTable.open(path).timeline()


def test_layout_v1_unchanged_by_layout_2_names() -> None:
    """Table version 6 knows no clustering action and no completion times."""
    assert layout.parse_file_name(f"{T}.clustering.requested") is None
    assert layout.parse_file_name(f"{T}_{C}.deltacommit") is None
    assert layout.parse_file_name(f"{T}.deltacommit") == Instant(T, State.COMPLETED, Action.DELTACOMMIT)


def test_completed_layout_v2_instant_needs_its_completion_time() -> None:
    with pytest.raises(InvalidInstantError, match="needs its completion time"):
        layout_v2.file_name(Instant(T, State.COMPLETED, Action.COMMIT))
    with pytest.raises(InvalidInstantError, match="is not a valid date"):
        Instant(T, State.COMPLETED, Action.COMMIT, "20261399000000000")


def test_completion_time_takes_no_part_in_equality_or_order() -> None:
    a = Instant(T, State.COMPLETED, Action.COMMIT, C)
    assert a == Instant(T, State.COMPLETED, Action.COMMIT)
    assert repr(a) == repr(Instant(T, State.COMPLETED, Action.COMMIT))
    assert a.with_state(State.COMPLETED).completion_time is None


def test_clustering_completes_as_replacecommit() -> None:
    pending = Instant(T, State.INFLIGHT, Action.CLUSTERING)
    assert pending.with_state(State.COMPLETED).action is Action.REPLACECOMMIT


def test_layout_from_properties() -> None:
    assert TimelineLayout.from_properties({"hoodie.timeline.layout.version": "1"}) is LAYOUT_V1
    v2 = TimelineLayout.from_properties(
        {
            "hoodie.timeline.layout.version": "2",
            "hoodie.timeline.path": "tl",
            "hoodie.timeline.history.path": "h",
        }
    )
    assert (v2.version, v2.folder, v2.history_folder) == (2, ".hoodie/tl", ".hoodie/tl/h")
    assert (
        TimelineLayout.from_properties({"hoodie.timeline.layout.version": "2"}).folder == ".hoodie/timeline"
    )


def test_timeline_of_v9_table(hudi_table_zip: Callable[[str], Path]) -> None:
    path = hudi_table_zip(MOR_V9)
    timeline = LakeTable.open(path).timeline()
    assert timeline.layout.version == 2
    # Detected from hoodie.properties when no layout is given (e.g. the compaction trigger).
    assert Timeline.load(path).instants == timeline.instants
    completed = [(i.timestamp, i.action.value, i.completion_time) for i in timeline.completed_commits]
    assert completed[-4:] == [
        ("20260307135839205", "deltacommit", "20260307135839403"),
        ("20260307135839895", "commit", "20260307135840408"),
        (T, "replacecommit", C),
        ("20260307135840975", "deltacommit", "20260307135841179"),
    ]
    assert len(completed) == 13 and timeline.pending == []
    assert timeline.compaction_times == {"20260307135839895"}
    assert timeline.completion_time(T) == C
    assert timeline.latest_time == "20260307135841179"  # completion times count
    # Clustering: its requested plan is a clustering instant, its completed one a replacecommit.
    clustering = timeline.get(T)
    assert clustering is not None and clustering.action is Action.REPLACECOMMIT


def test_avro_commit_metadata_decoded(hudi_table_zip: Callable[[str], Path]) -> None:
    timeline = LakeTable.open(hudi_table_zip(MOR_V9)).timeline()
    clustering = timeline.get(T)
    assert clustering is not None
    meta = timeline.commit_metadata(clustering)
    assert meta.operation_type == "CLUSTER"
    assert {p: sorted(ids) for p, ids in (meta.partition_to_replace_file_ids or {}).items()} == {
        "region=apac": ["6c49c37a-faf6-4ab2-a4a7-d66e4ea05a2f-0", "9c6ed25b-6c9d-4793-ad27-1c8518086b6a-0"],
        "region=eu": ["7a277c43-3eaf-43af-ac23-8b8fd5af50be-0"],
        "region=us": ["8fbe3fc8-a15f-4ffe-aac5-20024bdc863d-0", "db2fca8f-03b7-4da7-b042-4b617ab79b9d-0"],
    }
    assert sorted(s.path for s in meta.write_stats()) == [
        "region=apac/db3ba9f9-d2c3-4bf4-a2e7-03ea74dd032f-0_0-66-139_20260307135840454.parquet",
        "region=eu/b151ed41-bdc8-4b95-a733-69266ed89edd-0_1-66-140_20260307135840454.parquet",
        "region=us/4625f1ea-a436-4846-a24a-1328e1c036a6-0_2-66-141_20260307135840454.parquet",
    ]
    assert meta.schema is not None and '"name":"txn_id"' in meta.schema
    delta = timeline.commit_metadata(timeline.completed_commits[1])
    assert [(s.file_id, s.log_files) for s in delta.write_stats()] == [
        (
            "db2fca8f-03b7-4da7-b042-4b617ab79b9d-0",
            (".db2fca8f-03b7-4da7-b042-4b617ab79b9d-0_20260307135830801.log.1_0-10-23",),
        )
    ]


def test_avro_inflight_commit_metadata_decoded(hudi_table_zip: Callable[[str], Path]) -> None:
    """Inflight files hold the workload profile Hudi planned: partitions and counts, no paths yet."""
    timeline = LakeTable.open(hudi_table_zip(MOR_V9)).timeline()
    meta = timeline.inflight_commit_metadata(Instant("20260307135830801", State.INFLIGHT, Action.DELTACOMMIT))
    assert meta is not None and meta.operation_type == "UPSERT_PREPPED"
    assert [(s.file_id, s.partition_path) for s in meta.write_stats()] == [
        ("", "region=us"),
        ("db2fca8f-03b7-4da7-b042-4b617ab79b9d-0", "region=us"),
    ]
    cow = LakeTable.open(hudi_table_zip("cow_v9_txns_simple_nometa")).timeline()
    first = cow.completed_commits[0]
    planned = cow.inflight_commit_metadata(Instant(first.timestamp, State.INFLIGHT, Action.COMMIT))
    assert planned is not None and planned.operation_type == "INSERT"
    assert {s.partition_path: s.num_inserts for s in planned.write_stats()} == {
        "region=eu": 3,
        "region=us": 3,
        "region=apac": 2,
    }


def test_garbage_avro_commit_metadata_named(hudi_table_zip: Callable[[str], Path]) -> None:
    path = hudi_table_zip(MOR_V9)
    target = path / ".hoodie" / "timeline" / f"{T}_{C}.replacecommit"
    target.write_bytes(b"{}")
    timeline = LakeTable.open(path).timeline()
    with pytest.raises(CorruptTimelineFileError, match=str(target)):
        timeline.commit_metadata(timeline.get(T))  # type: ignore[arg-type]
    # A plan's Avro file where commit metadata belongs: named, not misread.
    plan = path / ".hoodie" / "timeline" / f"{T}.clustering.requested"
    target.write_bytes(plan.read_bytes())
    with pytest.raises(
        CorruptTimelineFileError, match="HoodieRequestedReplaceMetadata record, not commit metadata"
    ):
        timeline.commit_metadata(timeline.get(T))  # type: ignore[arg-type]
