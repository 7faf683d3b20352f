"""``CrashingStorage``: the tests' crash injector, a storage around another. What it counts as a durable
step on each storage, that a table's children and parent share one count, and that the crash comes
right after the step (the step done), on a local disk and on S3."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_lake_provider.lake.storage import (
    CrashingStorage,
    LocalStorage,
    SimulatedCrash,
    Storage,
    local_path,
)


def test_every_durable_step_is_counted_once_and_reads_are_not(storage: Storage) -> None:
    probe = CrashingStorage(storage)
    probe.write("p/a", b"1")
    probe.touch("p/m")
    probe.copy("p/a", "p/b")
    assert (probe.read("p/b"), probe.exists("p/m"), sorted(probe.list_names("p"))) == (
        b"1",
        True,
        ["a", "b", "m"],
    )
    assert probe.delete_data_file("p/b") is True
    assert probe.delete_data_file("p/b") is False  # already gone: no step
    probe.write("q/x", b"")
    probe.delete_tree("q")
    probe.delete_tree("q")  # nothing there: no step
    bulk = probe.delete_many(["p/a", "p/m"])
    assert bulk == [] and probe.list_names("p") == []
    common = ["write p/a", "create p/m", "copy p/b", "delete p/b", "write q/x"]
    if storage.supports_bulk_delete:  # S3: a bulk delete is one request and no step
        assert probe.steps == common
    else:  # a local disk deletes, and counts, file by file
        assert probe.steps == [*common, "delete q", "delete p/a", "delete p/m"]


def test_a_step_counts_once_it_is_done_and_the_crash_comes_right_after(storage: Storage) -> None:
    probe = CrashingStorage(storage)
    probe.write("a", b"1")
    probe.create("b", b"2")
    with probe.open_output("c") as fh:
        fh.write(b"3")
    probe.delete("a")
    probe.delete("a")  # already gone: no step
    assert probe.steps == ["write a", "create b", "create c", "delete a"]
    with pytest.raises(SimulatedCrash):
        CrashingStorage(storage, after=1).write("d", b"4")
    assert storage.read("d") == b"4"  # the crash comes right after the durable step


def test_children_and_parent_share_the_count_and_the_crash(storage: Storage) -> None:
    probe = CrashingStorage(storage, after=3)
    child = probe.child("sub")
    parent = probe.parent()
    assert parent is not None and (child.root, parent.root) == (
        storage.child("sub").root,
        storage.parent().root,
    )
    child.write("a", b"1")
    parent.write("t/b", b"2")
    with pytest.raises(SimulatedCrash, match="crash after step 3: create c"):
        with probe.open_output("c") as fh:
            fh.write(b"3")
    assert probe.steps == ["write a", "write t/b", "create c"]
    assert storage.read("c") == b"3" and storage.read("sub/a") == b"1"  # each step done before the crash


def test_a_local_disk_stays_local_through_the_wrapper(tmp_path: Path) -> None:
    wrapped = CrashingStorage(LocalStorage(tmp_path / "t"))
    assert local_path(wrapped) == tmp_path / "t"
    assert wrapped.supports_append and wrapped.append("log", b"ab") == (0, 2)
    assert wrapped.steps == ["append log"]
