"""The storage seam: exact files, create-once races, the path guard, locks.

The contract tests run against both storages: ``LocalStorage`` on a temp folder and ``S3Storage`` on
a real S3 HTTP server (moto) on 127.0.0.1. What each test sees is read back around our code (the
folder itself, or boto3 for S3). Local-only behaviour (links, file: URIs, appends, file system
limits) is tested on ``LocalStorage`` alone.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from s3_helpers import s3_objects

from airflow_lake_provider.lake.errors import (
    LakeError,
    MissingExtraError,
    ObjectExistsError,
    ObjectNotFoundError,
    ServiceBusyError,
    StorageError,
    UnsafePathError,
)
from airflow_lake_provider.lake.storage import (
    CrashingStorage,
    LocalStorage,
    Storage,
    local_path,
    open_storage,
)
from airflow_lake_provider.lake.storage import local as local_module
from airflow_lake_provider.lake.storage.s3 import S3Storage


@pytest.fixture
def local(tmp_path: Path) -> LocalStorage:
    return LocalStorage(tmp_path / "t")


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def contents(storage: Storage) -> dict[str, bytes]:
    """Every file under the storage's root, read without our code."""
    if isinstance(storage, S3Storage):
        return s3_objects(os.environ["AWS_ENDPOINT_URL"], storage.bucket, storage.prefix + "/")
    return _files(Path(storage.root))


def test_write_read_ranges_sizes_and_listing(storage: Storage) -> None:
    storage.write("p=1/a.parquet", b"0123456789")
    storage.write("p=1/a.parquet", b"abcdef")  # replaces
    storage.create("p=1/q=2/b.log", b"xy")
    storage.write("top.txt", b"")
    assert contents(storage) == {"p=1/a.parquet": b"abcdef", "p=1/q=2/b.log": b"xy", "top.txt": b""}
    assert storage.read("p=1/a.parquet") == b"abcdef"
    assert storage.read_range("p=1/a.parquet", 2, 3) == b"cde"
    assert storage.read_range("p=1/a.parquet", 4, 100) == b"ef"
    assert storage.read_range("p=1/a.parquet", 6, 10) == b""  # at the end: nothing, no error
    assert storage.size("p=1/a.parquet") == 6
    assert sorted(storage.list("p=1")) == [("a.parquet", 6)]
    assert storage.list_names("p=1") == ["a.parquet"]
    assert storage.list_dir("p=1") == ([("a.parquet", 6)], ["q=2"])
    assert storage.list("missing") == [] and storage.list_dir("missing") == ([], [])
    # Sizes where the listing has them for free (S3), else None (one stat per file on a disk).
    known = 6 if isinstance(storage, S3Storage) else None
    assert storage.list_known_sizes("p=1") == [("a.parquet", known)]
    assert list(storage.walk("")) == [
        ("", [("top.txt", 0)]),
        ("p=1", [("a.parquet", 6)]),
        ("p=1/q=2", [("b.log", 2)]),
    ]
    assert list(storage.walk("", descend=lambda rel: rel != "p=1")) == [("", [("top.txt", 0)])]
    with storage.open_input("p=1/a.parquet") as fh:
        fh.seek(3)
        assert fh.read(2) == b"de"
        fh.seek(-2, 2)
        assert fh.read() == b"ef"
    assert storage.exists("p=1") and storage.exists("p=1/a.parquet") and not storage.exists("nope")
    assert storage.exists("p=1/q=2") and not storage.exists("p=") and not storage.exists("p=1/a")
    assert storage.uri("p=1/a.parquet") == f"{storage.root}/p=1/a.parquet"


def test_local_listing_keeps_the_other_files_when_one_is_deleted_while_listed(
    local: LocalStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A clean deleting a file between the directory read and its stat must not empty the listing
    (a write that saw no files would take every key for new)."""
    for name in ("a.parquet", "b.parquet", "c.parquet"):
        local.write(f"p/{name}", name.encode())
    local.write("p/sub/d.log", b"d")
    real_scandir = os.scandir

    class _DeletesB:
        def __init__(self, path: str) -> None:
            self.entries = real_scandir(path)

        def __enter__(self) -> list[os.DirEntry[str]]:
            listed = sorted(self.entries.__enter__(), key=lambda e: e.name)
            os.remove(os.path.join(local.root, "p", "b.parquet"))  # after the read, before any stat
            return listed

        def __exit__(self, *exc: object) -> None:
            self.entries.__exit__(*exc)

    monkeypatch.setattr(os, "scandir", _DeletesB)
    assert local.list("p") == [("a.parquet", 9), ("c.parquet", 9)]
    local.write("p/b.parquet", b"b.parquet")
    assert local.list_dir("p") == ([("a.parquet", 9), ("c.parquet", 9)], ["sub"])


def test_missing_files_raise_lake_errors_that_are_also_file_not_found(storage: Storage) -> None:
    for call in (
        lambda: storage.read("x"),
        lambda: storage.read_range("x", 0, 1),
        lambda: storage.size("x"),
        lambda: storage.open_input("x"),
    ):
        with pytest.raises(ObjectNotFoundError, match="/t/x does not exist") as info:
            call()
        assert isinstance(info.value, LakeError) and isinstance(info.value, FileNotFoundError)


def test_create_is_create_once_and_leaves_no_temp_files(storage: Storage) -> None:
    storage.create(".hoodie/1.commit", b"first")
    with pytest.raises(ObjectExistsError, match="already exists; not overwriting it"):
        storage.create(".hoodie/1.commit", b"second")
    assert contents(storage) == {".hoodie/1.commit": b"first"}


def test_create_in_order_creates_each_once_and_stops_at_the_first_refused(storage: Storage) -> None:
    storage.create_in_order(
        [(".hoodie/1.deltacommit.requested", b""), (".hoodie/1.deltacommit.inflight", b"i")]
    )
    storage.create(".hoodie/2.b", b"taken")
    with pytest.raises(ObjectExistsError, match="2.b already exists; not overwriting it"):
        storage.create_in_order([(".hoodie/2.a", b"a"), (".hoodie/2.b", b"b"), (".hoodie/2.c", b"c")])
    assert contents(storage) == {
        ".hoodie/1.deltacommit.requested": b"",
        ".hoodie/1.deltacommit.inflight": b"i",
        ".hoodie/2.a": b"a",
        ".hoodie/2.b": b"taken",
    }


def _fsyncs(monkeypatch: pytest.MonkeyPatch, root: Path) -> list[str]:
    """What each ``os.fsync`` flushes from now on: a folder (``dir:<rel>``) or a file's temp copy."""
    synced: list[str] = []
    fsync = os.fsync

    def counting(fd: int) -> None:
        path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        rel = path.relative_to(root).as_posix() if path != root else "."
        synced.append(f"dir:{rel}" if path.is_dir() else "file")
        fsync(fd)

    monkeypatch.setattr(os, "fsync", counting)
    return synced


def test_local_creates_sync_each_file_with_content_and_a_folder_once_per_step(
    local: LocalStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced = _fsyncs(monkeypatch, Path(local.root))
    local.create(".hoodie/1.commit", b"body")
    assert synced == ["file", "dir:.hoodie"]
    synced.clear()
    local.create(".hoodie/2.commit.requested", b"")  # nothing to flush but its name
    assert synced == ["dir:.hoodie"]
    synced.clear()
    # requested and inflight together: the folder once, after both are linked
    local.create_in_order([(".hoodie/3.commit.requested", b""), (".hoodie/3.commit.inflight", b"i")])
    assert synced == ["file", "dir:.hoodie"]
    synced.clear()
    with pytest.raises(ObjectExistsError):  # the one linked before the refusal is made durable too
        local.create_in_order([(".hoodie/4.a", b"a"), (".hoodie/1.commit", b"b")])
    assert synced == ["file", "dir:.hoodie"]
    assert local.read(".hoodie/4.a") == b"a" and local.read(".hoodie/1.commit") == b"body"


def test_a_refused_create_in_order_says_so_even_when_the_folder_cannot_be_synced(
    local: LocalStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refusal is the answer: a failing folder sync on the way out must not replace it (a
    writer would report a disk error instead of retrying at a free time). Once every file is
    linked, a failing sync is the error (the step is not durable)."""
    local.create(".hoodie/1.commit", b"body")

    def failing(folder: str) -> None:
        raise OSError(5, "Input/output error", folder)

    monkeypatch.setattr(local_module, "_fsync_dir", failing)
    with pytest.raises(ObjectExistsError, match="1.commit"):
        local.create_in_order([(".hoodie/2.a", b"a"), (".hoodie/1.commit", b"b")])
    with pytest.raises(OSError, match="Input/output error"):
        local.create_in_order([(".hoodie/3.a", b"a")])


def test_a_write_that_runs_out_of_space_names_the_file_and_leaves_no_temp_file(tmp_path: Path) -> None:
    """A real short write (the process's file size limit, as a full disk would stop it): a
    ``StorageError`` naming the file, and no partial temp file left beside it, for every way a
    file is written."""
    script = f"""
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))
from airflow_lake_provider.lake.errors import StorageError
from airflow_lake_provider.lake.storage import LocalStorage
storage = LocalStorage({str(tmp_path / "t")!r})
for how, rel in (("write", "a/w.bin"), ("create", "a/c.bin"), ("create_in_order", "a/o.bin")):
    try:
        if how == "create_in_order":
            storage.create_in_order([(rel, b"x" * 5000)])
        else:
            getattr(storage, how)(rel, b"x" * 5000)
    except StorageError as exc:
        print(how, exc)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    assert [line.split(" ", 1)[0] for line in lines] == ["write", "create", "create_in_order"], out
    for line, name in zip(lines, ("w.bin", "c.bin", "o.bin"), strict=True):
        assert f"cannot write {tmp_path / 't' / 'a' / name}: File too large" in line
    assert os.listdir(tmp_path / "t" / "a") == []


def test_concurrent_creates_of_one_file_have_exactly_one_winner(storage: Storage) -> None:
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


def test_append_on_local_disk(local: LocalStorage, tmp_path: Path) -> None:
    assert local.supports_append
    assert local.append("p/.f.log.1", b"abc") == (0, 3)
    assert local.append("p/.f.log.1", b"de") == (3, 5)
    assert _files(tmp_path / "t") == {"p/.f.log.1": b"abcde"}


def test_s3_cannot_append(s3_bucket: str) -> None:
    storage = S3Storage(f"s3://{s3_bucket}/t")
    assert not storage.supports_append
    with pytest.raises(StorageError, match=f"s3://{s3_bucket}/t/p/f.log: this storage cannot append"):
        storage.append("p/f.log", b"x")


def test_touch_and_output_streams(storage: Storage) -> None:
    storage.touch(".hoodie/.temp/1/p/f.marker.CREATE")
    storage.touch(".hoodie/.temp/1/p/f.marker.CREATE")  # idempotent
    with storage.open_output("p/base.parquet") as fh:
        fh.write(b"PAR1")
        # On S3 nothing is visible before the block ends (the local disk writes in place).
        assert isinstance(storage, LocalStorage) or not storage.exists("p/base.parquet")
    assert contents(storage) == {
        ".hoodie/.temp/1/p/f.marker.CREATE": b"",
        "p/base.parquet": b"PAR1",
    }


def test_open_output_that_fails_leaves_no_partial_file(storage: Storage) -> None:
    with pytest.raises(RuntimeError), storage.open_output("p/base.parquet") as fh:
        fh.write(b"half")
        raise RuntimeError("writer died")
    assert contents(storage) == {}


def test_delete_and_delete_tree(storage: Storage) -> None:
    storage.write("p/a", b"1")
    storage.write(".hoodie/.temp/9/p/m", b"")
    assert storage.delete("p/a") is True
    assert storage.delete("p/a") is False  # already gone
    storage.delete_tree(".hoodie/.temp/9")
    storage.delete_tree(".hoodie/.temp/9")  # nothing left: no error
    assert contents(storage) == {}
    storage.write("p/b", b"2")
    storage.write("p/c", b"3")
    assert storage.delete_many(["p/b", "p/gone", "p/c"]) == []  # gone counts as deleted
    assert contents(storage) == {}


def test_copy_publishes_a_whole_file_and_keeps_the_source(storage: Storage) -> None:
    storage.write("p/.f.parquet.inprogress", b"PAR1 new")
    storage.write("p/f.parquet", b"old")
    probe = CrashingStorage(storage)
    probe.copy("p/.f.parquet.inprogress", "p/f.parquet")  # replaces the old one
    assert probe.steps == ["copy p/f.parquet"]  # one durable step, on both storages
    assert contents(storage) == {"p/.f.parquet.inprogress": b"PAR1 new", "p/f.parquet": b"PAR1 new"}
    with pytest.raises(ObjectNotFoundError):
        storage.copy("p/missing", "p/g.parquet")
    assert contents(storage) == {"p/.f.parquet.inprogress": b"PAR1 new", "p/f.parquet": b"PAR1 new"}


def test_parent_is_the_folder_above(storage: Storage) -> None:
    above = storage.parent()
    assert above is not None and above.uri("t/x") == storage.uri("x")
    top = above
    while top.parent() is not None:
        top = top.parent()  # type: ignore[assignment]
    assert top.root in ("/", f"s3://{getattr(storage, 'bucket', '')}")


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
def test_path_guard_refuses_and_deletes_nothing(storage: Storage, rel: str, why: str) -> None:
    storage.write(".hoodie/1.commit", b"keep")
    outside = Path(storage.root).parent / "outside.parquet"
    if isinstance(storage, LocalStorage):
        outside.write_bytes(b"keep")
    with pytest.raises(UnsafePathError, match=f"refusing .*{why}"):
        storage.delete_data_file(rel)
    assert contents(storage) == {".hoodie/1.commit": b"keep"}
    assert not isinstance(storage, LocalStorage) or outside.read_bytes() == b"keep"


def test_path_guard_refuses_a_sibling_whose_name_extends_the_root(storage: Storage) -> None:
    """``<root>2/p/f.parquet`` (a sibling table ``t2``) shares the root's characters but not its
    folder: it must not map onto ``p/f.parquet`` of this table."""
    storage.write("p/f.parquet", b"keep")
    sibling = [f"{storage.root}2/p/f.parquet"]
    if isinstance(storage, LocalStorage):
        sibling.append(f"file://{storage.root}2/p/f.parquet")
    for path in sibling:
        with pytest.raises(UnsafePathError, match="refusing .*outside the table base path"):
            storage.delete_data_file(path)
    assert contents(storage) == {"p/f.parquet": b"keep"}


def test_path_guard_accepts_absolute_paths_inside_and_refuses_links_that_lead_out(
    local: LocalStorage, tmp_path: Path
) -> None:
    local.write("p/a.parquet", b"1")
    assert local.check_deletable(f"{local.root}/p/a.parquet") == "p/a.parquet"
    assert local.delete_data_file(f"{local.root}/p/a.parquet") is True
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "b.parquet").write_bytes(b"keep")
    os.symlink(tmp_path / "elsewhere", tmp_path / "t" / "linked")
    with pytest.raises(UnsafePathError, match="resolves to .*elsewhere/b.parquet, outside"):
        local.delete_data_file("linked/b.parquet")
    assert (tmp_path / "elsewhere" / "b.parquet").read_bytes() == b"keep"


def test_lock_is_exclusive_and_names_what_holds_it(storage: Storage) -> None:
    with storage.lock(".hoodie/.aux/.lake-clean.lock", "another clean is running"):
        with pytest.raises(ServiceBusyError, match=r"/t: another clean is running \(waited 0.1 s\)"):
            with storage.lock(".hoodie/.aux/.lake-clean.lock", "another clean is running", 0.1):
                pass
    with storage.lock(".hoodie/.aux/.lake-clean.lock", "x"):  # released: free again
        pass


def test_a_local_lock_names_its_file_and_refuses_odd_lock_paths_by_name(tmp_path: Path) -> None:
    """Refused with the lock file named, and nothing made outside the table: a dangling symbolic
    link (its target would be created), a folder, a FIFO, ``.aux`` that is a file."""
    local = LocalStorage(tmp_path / "t")
    lock = ".hoodie/.aux/.lake-clean.lock"
    path = tmp_path / "t" / lock
    with local.lock(lock, "another clean is running"):
        with pytest.raises(ServiceBusyError) as busy:
            with local.lock(lock, "another clean is running", 0.1):
                pass
    assert str(busy.value) == (
        f"{tmp_path / 't'}: another clean is running (waited 0.1 s); lock file {path}, held by a running "
        "process (the lock goes with it)"
    )
    path.unlink()
    os.symlink(tmp_path / "outside", path)
    with pytest.raises(StorageError, match=rf"^{path}: cannot open it as a lock file: "):
        with local.lock(lock, "x"):
            pass
    assert not (tmp_path / "outside").exists()
    path.unlink()
    path.mkdir()
    with pytest.raises(StorageError, match=rf"^{path}: cannot open it as a lock file: Is a directory$"):
        with local.lock(lock, "x"):
            pass
    path.rmdir()
    os.mkfifo(path)
    with local.lock(lock, "x"):  # a FIFO takes a lock as a file does, and nothing blocks on it
        pass
    path.unlink()
    path.parent.rmdir()
    path.parent.write_bytes(b"")
    with pytest.raises(StorageError, match=r"cannot open it as a lock file: File exists$"):
        with local.lock(lock, "x"):
            pass


def test_temporary_files_are_no_name_hudi_reads_as_a_log_or_base_file(tmp_path: Path) -> None:
    """A crashed write leaves its temporary file: ``_<name>.<hex>.tmp``, which Java's log file
    pattern (matched with ``find``, so a suffix does not stop it) and base file names never match."""
    java_log = re.compile(r"^\.(.+)_(.*)\.(log|archive)\.(\d+)(_((\d+)-(\d+)-(\d+))(.cdc)?)?")
    name = ".files-0000-0_20250121000557095010.log.4_0-0-0"
    temp = os.path.basename(local_module._temp_name(str(tmp_path / name)))
    assert re.fullmatch(rf"_{re.escape(name)}\.[0-9a-f]{{32}}\.tmp", temp)
    assert java_log.search(temp) is None and java_log.search(f".{name}.{'0' * 32}.tmp") is not None


def test_open_storage_schemes(tmp_path: Path) -> None:
    assert open_storage(tmp_path).root == str(tmp_path)
    assert open_storage(f"file://{tmp_path}/t").root == f"{tmp_path}/t"
    assert open_storage("relative/t").root == os.path.abspath("relative/t")
    assert local_path(str(tmp_path)) == tmp_path
    same = LocalStorage(tmp_path)
    assert open_storage(same) is same
    with pytest.raises(StorageError, match="'gs' is not supported"):
        open_storage("gs://bucket/t")
    s3 = open_storage("s3://bucket/tables/t/")
    assert isinstance(s3, S3Storage) and (s3.root, s3.bucket, s3.prefix) == (
        "s3://bucket/tables/t",
        "bucket",
        "tables/t",
    )
    assert open_storage("s3://bucket").root == "s3://bucket"


def test_s3_without_the_s3_extra_names_it_and_local_tables_still_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "obstore", None)  # what an install without [s3] lacks
    monkeypatch.delitem(sys.modules, "airflow_lake_provider.lake.storage.s3", raising=False)
    with pytest.raises(MissingExtraError) as caught:
        open_storage("s3://bucket/t")
    assert str(caught.value) == (
        "s3://bucket/t: a table on S3 needs obstore, which is not installed: "
        "pip install 'airflow-lake-provider[s3]'"
    )
    assert isinstance(caught.value, LakeError) and isinstance(caught.value, ImportError)
    assert open_storage(tmp_path).root == str(tmp_path)  # local tables need no extra


def test_child_is_rooted_below_and_cannot_escape(storage: Storage) -> None:
    storage.write("tables/a/x", b"1")
    child = storage.child("tables/a")
    assert child.read("x") == b"1"
    with pytest.raises(UnsafePathError):
        storage.child("../elsewhere")


def test_check_path_refuses_what_the_file_system_cannot_hold(local: LocalStorage, tmp_path: Path) -> None:
    root_bytes = len(os.fsencode(local.root)) + 1  # the root and the "/" after it
    local.check_path("p=1/" + "n" * 255)  # the longest name fits
    local.check_path("/".join(["d" * 200] * 20)[: 4095 - root_bytes])  # so does the longest path
    with pytest.raises(StorageError, match=r"'a\\x00b': a path cannot hold a NUL byte"):
        local.check_path("a\x00b", what="'a\\x00b'")
    with pytest.raises(StorageError, match=f"'{'n' * 256}' is longer than 255 bytes"):
        local.check_path("p=1/" + "n" * 256)
    with pytest.raises(StorageError, match="a path of 4096 bytes, where at most 4095 fit$"):
        local.check_path("/".join(["d" * 200] * 21)[: 4096 - root_bytes])
    assert not (tmp_path / "t").exists()  # checking creates nothing


def test_path_guard_judges_links_by_where_they_lead_not_their_names(
    local: LocalStorage, tmp_path: Path
) -> None:
    local.write(".hoodie/hoodie.properties", b"keep")
    local.write("a/f.parquet", b"1")
    os.symlink(tmp_path / "t" / ".hoodie", tmp_path / "t" / "sneaky")
    os.symlink("../.hoodie", tmp_path / "t" / "a" / "h")
    for rel in (
        "sneaky/hoodie.properties",
        "a/h/hoodie.properties",
        f"{local.root}/sneaky/hoodie.properties",
    ):
        with pytest.raises(
            UnsafePathError, match=r"resolves to .*/\.hoodie/hoodie\.properties, under \.hoodie/"
        ):
            local.delete_data_file(rel)
    with pytest.raises(UnsafePathError, match="NUL byte"):
        local.delete_data_file("a/f\x00.parquet")
    assert local.read(".hoodie/hoodie.properties") == b"keep"


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
    ],
)
def test_bad_locations_are_refused(uri: str, message: str) -> None:
    with pytest.raises(StorageError, match=message):
        open_storage(uri)
