"""Timeline load of a v8 table whose LSM history holds 10,000 instants vs 30.

Builds two copies of a Spark-written v8 copy-on-write table (``tests/data/hudi-tables-1x/
cow_v8_nonpartitioned``: two commits) laid out as Hudi 1.x lays out a long-lived table: its two
commits and later ones archived in the LSM history under ``.hoodie/timeline/history/``,
``--instants`` (10,000) or 30 in all, then 30 completed commits in ``.hoodie/timeline/``. The later
commits carry the metadata of the table's second commit. The history is written the way Hudi's
archival writes it (batches of 10 instants, each followed by compaction and cleaning: 10 level-0
files make one level-1 file, and so on). Then times, on each, the two tables measured in turns:

- the timeline load through the table's loader (``LakeTable.open(...).timeline()``: listing and
  parsing ``.hoodie/timeline/``; the history is not read) and through ``lake timeline`` (in
  process, output discarded): target, the 10,000-instant table <= 1.5x the 30-instant one;
- ``lake timeline --archived`` (every archived instant listed: the history's time columns);
- a read as of the table's first commit (the oldest instant, only the history holds it): the
  archived commits up to it and their metadata come from the history, only its first row groups;
- a read as of the newest archived instant: the archived commits up to it come from the history;
  whether a clean removed files the read needs is decided from the file groups rewritten or
  replaced since (none here), so no archived commit's metadata is decoded (every one was before).

    PYTHONPATH=. .venv/bin/python benchmarks/timeline_history.py [--instants 10000] [--runs 7]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from airflow_lake_provider.lake.cli import main as lake  # noqa: E402
from airflow_lake_provider.lake.storage import LocalStorage  # noqa: E402
from airflow_lake_provider.lake.table.reader import read_snapshot  # noqa: E402
from airflow_lake_provider.lake.table.table import LakeTable  # noqa: E402
from airflow_lake_provider.lake.timeline.history.reader import History  # noqa: E402
from airflow_lake_provider.lake.timeline.history.records import (  # noqa: E402
    ArchivedEntry,
    ArchivedInstant,
    archived_entry,
)
from airflow_lake_provider.lake.timeline.history.writer import HistoryWriter  # noqa: E402

TEMPLATE = ROOT / "tests" / "data" / "hudi-tables-1x" / "cow_v8_nonpartitioned.zip"
TIMELINE = ".hoodie/timeline"
ACTIVE = 30
ARCHIVAL_BATCH = 10  # instants per archival run (Hudi archives from 30 down to 20 commits)


def instant_time(start: datetime, n: int, offset_ms: int = 0) -> str:
    moment = start + timedelta(seconds=n, milliseconds=offset_ms)
    return moment.strftime("%Y%m%d%H%M%S") + f"{moment.microsecond // 1000:03d}"


def unzip_template(dest: Path) -> Path:
    with zipfile.ZipFile(TEMPLATE) as zf:
        for member in zf.infolist():
            if not member.filename.startswith("__MACOSX"):
                zf.extract(member, dest)
    (table,) = [p for p in dest.iterdir() if p.is_dir() and p.name != "__MACOSX"]
    return table


def build(dest: Path, archived: int) -> tuple[Path, str, str]:
    """The table with ``archived`` commits in its history (its own two, then later ones) and 30
    active commits after them; returns its path, its first commit's time and the newest archived."""
    path = unzip_template(dest)
    storage = LocalStorage(path)
    table = LakeTable.open(path)
    timeline = table.timeline()
    own = timeline.completed_commits
    names = storage.list_names(TIMELINE)
    entries = []
    for commit in own:
        pending = {n: storage.read(f"{TIMELINE}/{n}") for n in names if n.startswith(f"{commit.timestamp}.")}
        entries.append(
            archived_entry(
                ArchivedInstant(commit.timestamp, commit.completion_time, "commit"),
                "commit",
                timeline.read_bytes(commit),
                pending.get(f"{commit.timestamp}.commit.requested"),
                pending.get(f"{commit.timestamp}.inflight"),
            )
        )
    last = timeline.read_bytes(own[-1])  # later commits rewrite the table's file group alike
    later = datetime(2025, 7, 14)
    entries += [
        ArchivedEntry(ArchivedInstant(instant_time(later, n), instant_time(later, n, 500), "commit"), last)
        for n in range(archived - len(entries))
    ]
    writer = HistoryWriter(storage, table.layout.history_folder or "")
    for at in range(0, len(entries), ARCHIVAL_BATCH):
        writer.append(entries[at : at + ARCHIVAL_BATCH])
        writer.compact()
    for commit in own:  # the completed file last, as Hudi's archiver deletes them
        for name in sorted(n for n in names if n.startswith(f"{commit.timestamp}.")):
            storage.delete(f"{TIMELINE}/{name}")
        storage.delete(f"{TIMELINE}/{table.layout.file_name(commit)}")
    for n in range(archived, archived + ACTIVE):
        t = instant_time(later, n)
        storage.write(f"{TIMELINE}/{t}.commit.requested", b"")
        storage.write(f"{TIMELINE}/{t}.inflight", b"")
        storage.write(f"{TIMELINE}/{t}_{instant_time(later, n, 500)}.commit", last)
    return path, own[0].timestamp, entries[-1].instant.instant_time


def timed_pair(fns: tuple[Callable[[], object], Callable[[], object]], runs: int) -> tuple[float, float]:
    """Median seconds of each of two calls, measured in turns (the machine's load hits both alike)."""
    samples: tuple[list[float], list[float]] = ([], [])
    for fn in fns:
        fn()
    for _ in range(runs):
        for fn, found in zip(fns, samples, strict=True):
            started = time.perf_counter()
            fn()
            found.append(time.perf_counter() - started)
    return statistics.median(samples[0]), statistics.median(samples[1])


def cli(*argv: str) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        assert lake(list(argv)) == 0, argv


def load(path: Path) -> None:
    assert len(LakeTable.open(path).timeline().instants) == ACTIVE


def read_as_of(path: Path, as_of: str, rows: int) -> None:
    assert read_snapshot(LakeTable.open(path), as_of).num_rows == rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instants", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="timeline_history_") as tmp:
        started = time.perf_counter()
        long, first, newest = build(Path(tmp) / "long", args.instants)
        built = time.perf_counter() - started
        short, _, newest_short = build(Path(tmp) / "short", ACTIVE)
        files = sorted(f.name for f in History(LocalStorage(long), f"{TIMELINE}/history").snapshot.files)
        print(f"archived {args.instants:,} instants in {built:.1f} s (history files: {files})")
        rows = []
        for label, short_fn, long_fn, runs in (
            ("timeline load (LakeTable loader)", lambda: load(short), lambda: load(long), args.runs * 3),
            (
                "lake timeline",
                lambda: cli("timeline", str(short)),
                lambda: cli("timeline", str(long)),
                args.runs * 3,
            ),
            (
                "lake timeline --archived",
                lambda: cli("timeline", str(short), "--archived"),
                lambda: cli("timeline", str(long), "--archived"),
                args.runs,
            ),
            (
                f"read as of the oldest instant {first}",
                lambda: read_as_of(short, first, 3),
                lambda: read_as_of(long, first, 3),
                args.runs,
            ),
            (
                "read as of the newest archived instant",
                lambda: read_as_of(short, newest_short, 4),
                lambda: read_as_of(long, newest, 4),
                args.runs,
            ),
        ):
            few, many = timed_pair((short_fn, long_fn), runs)
            rows.append((label, few, many))
        print(f"{'measure':<44}{ACTIVE:>10} archived{args.instants:>12,} archived{'ratio':>8}")
        for label, few, many in rows:
            print(f"{label:<44}{few * 1000:>16.2f}ms{many * 1000:>19.2f}ms{many / few:>8.2f}")
        print(f"timeline load ratio: {rows[0][2] / rows[0][1]:.2f} (target <= 1.5)")
        print(f"lake timeline ratio: {rows[1][2] / rows[1][1]:.2f} (target <= 1.5)")


if __name__ == "__main__":
    main()
