"""The storage seam on the local disk: exact files, create-once races, the path guard, locks."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from airflow_lake_provider.lake.errors import (
    LakeError,
    ObjectExistsError,
    ObjectNotFoundError,
    ServiceBusyError,
    StorageError,
    UnsafePathError,
)
from airflow_lake_provider.lake.storage import LocalStorage, local_path, open_storage


@pytest.fixture
def storage(tmp_path: Path) -> LocalStorage:
    return LocalStorage(tmp_path / "t")


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_write_read_ranges_sizes_and_listing(storage: LocalStorage, tmp_path: Path) -> None:
    storage.write("p=1/a.parquet", b"0123456789")
    storage.write("p=1/a.parquet", b"abcdef")  # replaces
    storage.create("p=1/q=2/b.log", b"xy")
    storage.write("top.txt", b"")
    assert _files(tmp_path / "t") == {"p=1/a.parquet": b"abcdef", "p=1/q=2/b.log": b"xy", "top.txt": b""}
    assert storage.read("p=1/a.parquet") == b"abcdef"
    assert storage.read_range("p=1/a.parquet", 2, 3) == b"cde"
    assert storage.read_range("p=1/a.parquet", 4, 100) == b"ef"
    assert storage.size("p=1/a.parquet") == 6
    assert sorted(storage.list("p=1")) == [("a.parquet", 6)]
    assert storage.list_names("p=1") == ["a.parquet"]
    assert storage.list_dir("p=1") == ([("a.parquet", 6)], ["q=2"])
    assert storage.list("missing") == [] and storage.list_dir("missing") == ([], [])
    assert list(storage.walk("")) == [
        ("", [("top.txt", 0)]),
        ("p=1", [("a.parquet", 6)]),
        ("p=1/q=2", [("b.log", 2)]),
    ]
    assert list(storage.walk("", descend=lambda rel: rel != "p=1")) == [("", [("top.txt", 0)])]
    with storage.open_input("p=1/a.parquet") as fh:
        fh.seek(3)
        assert fh.read(2) == b"de"
    assert storage.exists("p=1") and storage.exists("p=1/a.parquet") and not storage.exists("nope")
    assert storage.uri("p=1/a.parquet") == f"{tmp_path}/t/p=1/a.parquet"


def test_missing_files_raise_lake_errors_that_are_also_file_not_found(storage: LocalStorage) -> None:
    for call in (
        lambda: storage.read("x"),
        lambda: storage.read_range("x", 0, 1),
        lambda: storage.size("x"),
        lambda: storage.open_input("x"),
    ):
        with pytest.raises(ObjectNotFoundError, match="/t/x does not exist") as info:
            call()
        assert isinstance(info.value, LakeError) and isinstance(info.value, FileNotFoundError)


def test_create_is_create_once_and_leaves_no_temp_files(storage: LocalStorage, tmp_path: Path) -> None:
    storage.create(".hoodie/1.commit", b"first")
    with pytest.raises(ObjectExistsError, match="already exists; not overwriting it"):
        storage.create(".hoodie/1.commit", b"second")
    assert _files(tmp_path / "t") == {".hoodie/1.commit": b"first"}


def test_concurrent_creates_of_one_file_have_exactly_one_winner(storage: LocalStorage) -> None:
    winners: list[int] = []
    losers: list[int] = []
    start = threading.Barrier(8)

    def race(i: int) -> None:
        start.wait()
        try:
            storage.create("race", str(i).encode())
            winners.append(i)
        except ObjectExistsError:
            losers.append(i)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1 and len(losers) == 7
    assert storage.read("race") == str(winners[0]).encode()
    assert storage.list("") == [("race", 1)]


def test_append_touch_and_output_streams(storage: LocalStorage, tmp_path: Path) -> None:
    assert storage.append("p/.f.log.1", b"abc") == (0, 3)
    assert storage.append("p/.f.log.1", b"de") == (3, 5)
    storage.touch(".hoodie/.temp/1/p/f.marker.CREATE")
    storage.touch(".hoodie/.temp/1/p/f.marker.CREATE")  # idempotent
    with storage.open_output("p/base.parquet") as fh:
        fh.write(b"PAR1")
    assert _files(tmp_path / "t") == {
        "p/.f.log.1": b"abcde",
        ".hoodie/.temp/1/p/f.marker.CREATE": b"",
        "p/base.parquet": b"PAR1",
    }


def test_open_output_that_fails_leaves_no_partial_file(storage: LocalStorage, tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), storage.open_output("p/base.parquet") as fh:
        fh.write(b"half")
        raise RuntimeError("writer died")
    assert _files(tmp_path / "t") == {}


def test_delete_and_delete_tree(storage: LocalStorage, tmp_path: Path) -> None:
    storage.write("p/a", b"1")
    storage.write(".hoodie/.temp/9/p/m", b"")
    assert storage.delete("p/a") is True
    assert storage.delete("p/a") is False  # already gone
    storage.delete_tree(".hoodie/.temp/9")
    storage.delete_tree(".hoodie/.temp/9")  # nothing left: no error
    assert _files(tmp_path / "t") == {}
    assert (tmp_path / "t" / ".hoodie" / ".temp").is_dir()


@pytest.mark.parametrize(
    ("rel", "why"),
    [
        ("../outside.parquet", "outside the table base path"),
        ("p/../../outside.parquet", "outside the table base path"),
        ("/etc/passwd", "outside the table base path"),
        ("", "the table root or under .hoodie/"),
        (".", "the table root or under .hoodie/"),
        (".hoodie/1.commit", "the table root or under .hoodie/"),
        ("./.hoodie/hoodie.properties", "the table root or under .hoodie/"),
    ],
)
def test_path_guard_refuses_and_deletes_nothing(
    storage: LocalStorage, tmp_path: Path, rel: str, why: str
) -> None:
    (tmp_path / "outside.parquet").write_bytes(b"keep")
    storage.write(".hoodie/1.commit", b"keep")
    before = _files(tmp_path)
    with pytest.raises(UnsafePathError, match=f"refusing .*{why}"):
        storage.delete_data_file(rel)
    assert _files(tmp_path) == before


def test_path_guard_accepts_absolute_paths_inside_and_refuses_links_that_lead_out(
    storage: LocalStorage, tmp_path: Path
) -> None:
    storage.write("p/a.parquet", b"1")
    assert storage.check_deletable(f"{storage.root}/p/a.parquet") == "p/a.parquet"
    assert storage.delete_data_file(f"{storage.root}/p/a.parquet") is True
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "b.parquet").write_bytes(b"keep")
    os.symlink(tmp_path / "elsewhere", tmp_path / "t" / "linked")
    with pytest.raises(UnsafePathError, match="resolves to .*elsewhere/b.parquet, outside"):
        storage.delete_data_file("linked/b.parquet")
    assert (tmp_path / "elsewhere" / "b.parquet").read_bytes() == b"keep"


def test_lock_is_exclusive_and_names_what_holds_it(storage: LocalStorage) -> None:
    with storage.lock(".hoodie/.aux/.lake-clean.lock", "another clean is running"):
        with pytest.raises(ServiceBusyError, match=r"/t: another clean is running \(waited 0.1 s\)"):
            with storage.lock(".hoodie/.aux/.lake-clean.lock", "another clean is running", 0.1):
                pass
    with storage.lock(".hoodie/.aux/.lake-clean.lock", "x"):  # released: free again
        pass


def test_open_storage_schemes(tmp_path: Path) -> None:
    assert open_storage(tmp_path).root == str(tmp_path)
    assert open_storage(f"file://{tmp_path}/t").root == f"{tmp_path}/t"
    assert open_storage("relative/t").root == os.path.abspath("relative/t")
    assert local_path(str(tmp_path)) == tmp_path
    same = LocalStorage(tmp_path)
    assert open_storage(same) is same
    with pytest.raises(StorageError, match="'gs' is not supported"):
        open_storage("gs://bucket/t")


def test_child_is_rooted_below_and_cannot_escape(storage: LocalStorage) -> None:
    storage.write("tables/a/x", b"1")
    child = storage.child("tables/a")
    assert child.read("x") == b"1"
    with pytest.raises(UnsafePathError):
        storage.child("../elsewhere")


def test_check_path_refuses_what_the_file_system_cannot_hold(storage: LocalStorage, tmp_path: Path) -> None:
    root_bytes = len(os.fsencode(storage.root)) + 1  # the root and the "/" after it
    storage.check_path("p=1/" + "n" * 255)  # the longest name fits
    storage.check_path("/".join(["d" * 200] * 20)[: 4095 - root_bytes])  # so does the longest path
    with pytest.raises(StorageError, match=r"'a\\x00b': a path cannot hold a NUL byte"):
        storage.check_path("a\x00b", what="'a\\x00b'")
    with pytest.raises(StorageError, match=f"'{'n' * 256}' is longer than 255 bytes"):
        storage.check_path("p=1/" + "n" * 256)
    with pytest.raises(StorageError, match="a path of 4096 bytes, where at most 4095 fit$"):
        storage.check_path("/".join(["d" * 200] * 21)[: 4096 - root_bytes])
    assert not (tmp_path / "t").exists()  # checking creates nothing


def test_path_guard_judges_links_by_where_they_lead_not_their_names(
    storage: LocalStorage, tmp_path: Path
) -> None:
    storage.write(".hoodie/hoodie.properties", b"keep")
    storage.write("a/f.parquet", b"1")
    os.symlink(tmp_path / "t" / ".hoodie", tmp_path / "t" / "sneaky")
    os.symlink("../.hoodie", tmp_path / "t" / "a" / "h")
    for rel in (
        "sneaky/hoodie.properties",
        "a/h/hoodie.properties",
        f"{storage.root}/sneaky/hoodie.properties",
    ):
        with pytest.raises(
            UnsafePathError, match=r"resolves to .*/\.hoodie/hoodie\.properties, under \.hoodie/"
        ):
            storage.delete_data_file(rel)
    with pytest.raises(UnsafePathError, match="NUL byte"):
        storage.delete_data_file("a/f\x00.parquet")
    assert storage.read(".hoodie/hoodie.properties") == b"keep"


def test_absolute_paths_through_a_link_to_the_table_are_inside(tmp_path: Path) -> None:
    real = LocalStorage(tmp_path / "real")
    real.write("a/f.parquet", b"1")
    os.symlink(tmp_path / "real", tmp_path / "link")
    via_link = LocalStorage(tmp_path / "link")
    # A plan written through the real path, finished through the link (and the other way round).
    assert via_link.check_deletable(f"{tmp_path}/real/a/f.parquet") == "a/f.parquet"
    assert real.check_deletable(f"{tmp_path}/link/a/f.parquet") == "a/f.parquet"
    assert via_link.delete_data_file(f"{tmp_path}/real/a/f.parquet") is True
    with pytest.raises(UnsafePathError, match="outside the table base path"):
        via_link.check_deletable(f"{tmp_path}/elsewhere/a/f.parquet")


@pytest.mark.parametrize(
    ("uri", "path"),
    [
        ("file:///data/t", "/data/t"),
        ("FILE:///data/t", "/data/t"),
        ("file://localhost/data/t", "/data/t"),
        ("file:/data/t", "/data/t"),
        ("file:///data/t%203", "/data/t 3"),
        ("relative:name/t", None),  # a plain relative path with a colon
    ],
)
def test_file_uris(uri: str, path: str | None) -> None:
    assert open_storage(uri).root == (path or os.path.abspath(uri))


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("file://otherhost/data/t", "another host"),
        ("file://", "absolute path"),
        ("", "cannot be empty"),
        ("s3://bucket/t", "'s3' is not supported"),
    ],
)
def test_bad_locations_are_refused(uri: str, message: str) -> None:
    with pytest.raises(StorageError, match=message):
        open_storage(uri)
