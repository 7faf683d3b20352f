"""Clean of Hudi's metadata table (MDT) under ``lake.metadata-table.maintain``: Java's rule (not
until 3 MDT instants follow its last compaction) and plan (``KEEP_LATEST_COMMITS``, min(data table's
retained commits, 20)): every MDT file group keeps its latest slice and the one current at the
earliest retained commit; older slices' files go. Readers only read latest slices: hudi-rs and our
reader read the same rows after it, and after a crash at any step of it; the next run finishes it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from crash_support import crashing, steps_of
from mdt_tables import keep_files_partition_only

from airflow_lake_provider.lake.storage import SimulatedCrash, open_storage
from airflow_lake_provider.lake.table.metadata import clean as mcl
from airflow_lake_provider.lake.table.metadata.policy import kept_metadata_table
from airflow_lake_provider.lake.table.metadata.services import run_metadata_table_services
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.avro import CLEAN_METADATA, write_avro
from airflow_lake_provider.lake.timeline.instant import Action, Instant, State
from airflow_lake_provider.lake.timeline.layouts import LAYOUT_V1
from tests.unit.lake.table.metadata.test_commit import (
    INDEXES,
    MAINTAIN,
    _rows,
    assert_consistent,
    assert_index_consistent,
)
from tests.unit.lake.table.metadata.test_compaction import _upserts

NAME = "mor_avro_v9_txns_simple_meta"
NO_COMPACTION = {**MAINTAIN, "hoodie.metadata.compact.max.delta.commits": "1000"}
GROUPS = {
    "column_stats": ("col-stats-0000-0", "col-stats-0001-0"),
    "files": ("files-0000-0",),
    "partition_stats": ("partition-stats-0000-0",),
}


def _mdt_files(path: Path) -> set[str]:
    root = path / ".hoodie/metadata"
    return {
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and not str(p.relative_to(root)).startswith(".hoodie/")
    }


def _cleans(path: Path) -> list:
    timeline = kept_metadata_table(LakeTable.open(path)).timeline()  # type: ignore[union-attr]
    return [(i, timeline.avro_record(i)) for i in timeline.filter([Action.CLEAN])]


def test_maintained_writes_clean_the_mdt_as_java_would(hudi_table_zip) -> None:
    """Compacting every third deltacommit and retaining 3 commits, each MDT clean (Java's order:
    before the compaction check) deletes the slice the previous compaction replaced, once three
    instants follow it: its base files and the logs of the writes between the two compactions."""
    path = keep_files_partition_only(hudi_table_zip(NAME), INDEXES)
    options = {
        **MAINTAIN,
        "hoodie.metadata.compact.max.delta.commits": "3",
        "hoodie.cleaner.commits.retained": "3",
    }
    before = _rows(assert_consistent(path))
    w = _upserts(path, 8, options)
    c1, c2, c3 = (w[0].metadata_compaction, w[3].metadata_compaction, w[6].metadata_compaction)
    assert [r.metadata_compaction for r in w] == [c1, None, None, c2, None, None, c3, None]
    cleans = _cleans(path)
    assert [i.state for i, _ in cleans] == [State.COMPLETED] * 3
    # Each clean runs in the services after a compacting write, before its compaction.
    for (clean, _), r in zip(cleans, (w[0], w[3], w[6]), strict=True):
        assert r.instant < clean.timestamp < r.metadata_compaction
    clean, metadata = cleans[2]
    assert metadata["earliestCommitToRetain"] == w[4].instant  # the 3rd newest: w5, w6, w7
    deleted = {p: sorted(m["successDeleteFiles"]) for p, m in metadata["partitionMetadata"].items()}
    expected: dict[str, list[str]] = {}
    for partition, groups in sorted(GROUPS.items()):
        for group in groups:
            logs = [f".{group}_{r.instant}.log.1_0-0-0" for r in w[1:4]]
            expected.setdefault(partition, []).extend(logs)
    ops = [(p, g) for p in sorted(GROUPS) for g in GROUPS[p]]
    for i, (partition, group) in enumerate(ops):
        expected[partition].append(f"{group}_{i}-0-0_{c1}.hfile")
    assert deleted == {p: sorted(names) for p, names in expected.items()}
    assert not any(c1 in f or any(r.instant in f for r in w[1:4]) for f in _mdt_files(path))
    assert len(assert_consistent(path)) == len(before)  # upserts of existing keys
    assert_index_consistent(path)


def test_nothing_to_delete_no_clean_instant(hudi_table_zip) -> None:
    """Java's test table: the slice its compaction replaced is still the one current at the
    earliest retained commit (10 of them), so there is nothing to clean and no instant."""
    path = keep_files_partition_only(hudi_table_zip(NAME), INDEXES)
    mdt = kept_metadata_table(LakeTable.open(path))
    assert mdt is not None
    assert mcl.why_not_due(mdt.timeline()) is None
    assert mcl.plan_clean(mdt.storage, mdt.timeline(), 10) is None
    files = _mdt_files(path)
    run_metadata_table_services(LakeTable.open(path), NO_COMPACTION)
    assert _cleans(path) == [] and _mdt_files(path) == files


@pytest.mark.parametrize(("every", "retained"), [(4, 6), (8, 4), (8, 5), (6, 9)])
def test_a_clean_planned_off_the_timeline_finds_what_a_listing_finds(
    hudi_table_zip, monkeypatch: pytest.MonkeyPatch, every: int, retained: int
) -> None:
    """Every MDT clean the services plan in a history of compactions and cleans: where the timeline
    says the last clean left nothing (no listing), a listing of the MDT finds nothing either, and
    after the first clean it says so every time the listing would find nothing. The histories
    retain from a compaction itself (8, 4) and see the retained commit pass a compaction before
    the next one (8, 5)."""
    path = keep_files_partition_only(hudi_table_zip(NAME), INDEXES)
    options = {
        **MAINTAIN,
        "hoodie.metadata.compact.max.delta.commits": str(every),
        "hoodie.cleaner.commits.retained": str(retained),
    }
    plan_clean, left_nothing = mcl.plan_clean, mcl._left_nothing
    seen: list[tuple[bool, bool]] = []  # (planned off the timeline, the listing's plan is None)
    differ: list[str] = []  # (collected: the services log an error and go on)

    def compared(storage, timeline, kept):  # type: ignore[no-untyped-def]
        skipped: list[bool] = []
        monkeypatch.setattr(mcl, "_left_nothing", lambda *a: skipped.append(left_nothing(*a)) or skipped[-1])
        planned = plan_clean(storage, timeline, kept)
        monkeypatch.setattr(mcl, "_left_nothing", lambda *_: False)
        listed = plan_clean(storage, timeline, kept)
        if planned != listed:
            differ.append(f"after {timeline.instants[-1]}: {planned} != {listed}")
        seen.append((skipped == [True], listed is None))
        return planned

    monkeypatch.setattr(mcl, "plan_clean", compared)
    _upserts(path, 16, options)
    assert differ == []
    assert (True, True) in seen and (False, False) in seen  # skipped; and listed, finding files
    # Once a clean ran, the timeline tells every time: no listing that finds nothing.
    first = seen.index((False, False))
    assert (False, True) not in seen[first:]


def _timeline_with(tmp_path: Path, files: dict[str, str | None]) -> Timeline:
    """A layout-1 timeline of these files (name -> a clean's earliest commit to retain, or None)."""
    hoodie = tmp_path / ".hoodie"
    hoodie.mkdir(parents=True)
    for name, retained in files.items():
        body = b""
        if retained is not None:
            plan = mcl.MetadataCleanPlan(Instant(retained, State.COMPLETED, Action.COMMIT), retained, {})
            body = write_avro(CLEAN_METADATA, mcl._metadata(plan, name.split(".")[0], 0.0))
        (hoodie / name).write_bytes(body)
    return Timeline.load(open_storage(tmp_path), LAYOUT_V1)


def test_the_timeline_says_the_last_clean_left_nothing_until_the_retained_commit_passes_a_compaction(
    tmp_path: Path,
) -> None:
    """A clean that retained from compaction 2 (its latest slice) kept the slice before it: that
    slice is due again once the retained commit passes 2, not before; one retained from 3 kept
    slice 2 alone. A compaction still pending counts as one; with no completed clean, only a
    listing tells."""
    done = {f"{t}.deltacommit": None for t in ("20240101000001", "20240101000003", "20240101000004")}
    compaction = {"20240101000002.compaction.requested": None, "20240101000002.commit": None}
    clean_at_2 = _timeline_with(
        tmp_path / "a", {**done, **compaction, "20240101000005.clean": "20240101000002"}
    )
    assert mcl._left_nothing(clean_at_2, "20240101000002") is True
    assert mcl._left_nothing(clean_at_2, "20240101000003") is False
    clean_at_3 = _timeline_with(
        tmp_path / "b", {**done, **compaction, "20240101000005.clean": "20240101000003"}
    )
    assert mcl._left_nothing(clean_at_3, "20240101000004") is True
    pending = _timeline_with(
        tmp_path / "c",
        {**done, "20240101000005.clean": "20240101000001", "20240101000002.compaction.requested": None},
    )
    assert mcl._left_nothing(pending, "20240101000002") is True
    assert mcl._left_nothing(pending, "20240101000003") is False
    assert (
        mcl._left_nothing(_timeline_with(tmp_path / "d", {**done, **compaction}), "20240101000002") is False
    )


def test_no_clean_until_three_instants_follow_the_last_compaction(hudi_table_zip) -> None:
    path = keep_files_partition_only(hudi_table_zip(NAME), INDEXES)
    (first,) = _upserts(path, 1, {**MAINTAIN, "hoodie.metadata.compact.max.delta.commits": "1"})
    c = first.metadata_compaction
    assert c is not None
    timeline = kept_metadata_table(LakeTable.open(path)).timeline()  # type: ignore[union-attr]
    cleans = timeline.filter([Action.CLEAN])
    assert mcl.why_not_due(timeline) == f"0 completed instants since its last compaction {c} (fewer than 3)"
    _upserts(path, 2, NO_COMPACTION)
    timeline = kept_metadata_table(LakeTable.open(path)).timeline()  # type: ignore[union-attr]
    assert mcl.why_not_due(timeline) == f"2 completed instants since its last compaction {c} (fewer than 3)"
    assert timeline.filter([Action.CLEAN]) == cleans


def test_crash_at_every_durable_step_of_an_mdt_clean(hudi_table_zip, tmp_path: Path) -> None:
    template = keep_files_partition_only(hudi_table_zip(NAME), INDEXES)
    options = {**NO_COMPACTION, "hoodie.cleaner.commits.retained": "3"}
    before = _rows(assert_consistent(template))
    counting = crashing(LakeTable.open(shutil.copytree(template, tmp_path / "count")))
    run_metadata_table_services(counting, options)
    steps = steps_of(counting)
    ((_, metadata),) = _cleans(tmp_path / "count")
    gone = {f"{p}/{n}" for p, m in metadata["partitionMetadata"].items() for n in m["successDeleteFiles"]}
    assert len(gone) > 20 and len(steps) == 2 + len(gone) + 1  # requested, inflight, deletes, done
    files = _mdt_files(template)
    for step in range(1, len(steps) + 1):
        path = shutil.copytree(template, tmp_path / f"crash{step}")
        with pytest.raises(SimulatedCrash):
            run_metadata_table_services(crashing(LakeTable.open(path), step), options)
        assert _rows(assert_consistent(path)) == before, (step, steps[step - 1])
        assert_index_consistent(path)
        crashed = [i.timestamp for i, _ in _cleans(path)]
        run_metadata_table_services(LakeTable.open(path), options)
        ((clean, _),) = _cleans(path)
        assert clean.state is State.COMPLETED, (step, steps[step - 1])
        assert crashed in ([], [clean.timestamp])  # a pending one is finished at its own time
        assert _mdt_files(path) == files - gone
        assert _rows(assert_consistent(path)) == before
