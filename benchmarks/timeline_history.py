"""Timeline load of a v8-layout table whose LSM history holds 10,000 instants vs 30.

Builds two tables laid out as Hudi 1.x lays them out (timeline layout 2): 30 completed
deltacommits in ``.hoodie/timeline/`` (requested, inflight and ``<requested>_<completion>`` files)
and an LSM history under ``.hoodie/timeline/history/`` holding ``--instants`` (10,000) or 30
archived deltacommits, written the way Hudi's archival writes it (batches of 10 instants, each
followed by compaction and cleaning: 10 level-0 files make one level-1 file, and so on). Then
times, on each:

- the timeline load: listing and parsing ``.hoodie/timeline/`` and opening the history, which
  reads nothing until an instant older than the active timeline is asked for (target: the
  10,000-instant table <= 1.5x the 30-instant one);
- the as-of lookup of an old instant: its completion time and metadata, read from the history
  (``_version_``, the manifest, then only the parquet file whose name range holds it);
- listing every archived instant (all files, three columns).

    PYTHONPATH=. .venv/bin/python benchmarks/timeline_history.py [--instants 10000] [--runs 7]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from airflow_lake_provider.lake.storage import LocalStorage, Storage  # noqa: E402
from airflow_lake_provider.lake.timeline.history.reader import History  # noqa: E402
from airflow_lake_provider.lake.timeline.history.records import ArchivedEntry, ArchivedInstant  # noqa: E402
from airflow_lake_provider.lake.timeline.history.writer import HistoryWriter  # noqa: E402

TIMELINE = ".hoodie/timeline"
ACTIVE = 30
ARCHIVAL_BATCH = 10  # instants per archival run (Hudi archives from 30 down to 20 commits)
START = datetime(2025, 1, 1)
# A completed instant of layout 2 (<requested>_<completion>.<action>) or a pending one.
_NAME_RE = re.compile(r"^(\d{17})(?:_(\d{17}))?\.(\w+)(?:\.(requested|inflight))?$")
METADATA = (
    b'{"partitionToWriteStats":{"":[{"fileId":"%08d-0000-0000-0000-000000000000-0"}]},' + b" " * 400 + b"}"
)


def instant_time(n: int, offset_ms: int = 0) -> str:
    moment = START + timedelta(seconds=n, milliseconds=offset_ms)
    return moment.strftime("%Y%m%d%H%M%S") + f"{moment.microsecond // 1000:03d}"


def build(root: Path, archived: int) -> LocalStorage:
    storage = LocalStorage(root)
    storage.write(".hoodie/hoodie.properties", b"hoodie.table.version=8\nhoodie.timeline.layout.version=2\n")
    writer = HistoryWriter(storage)
    for first in range(0, archived, ARCHIVAL_BATCH):
        batch = [
            ArchivedEntry(
                ArchivedInstant(instant_time(n), instant_time(n, 500), "deltacommit"),
                METADATA % n,
                None,
            )
            for n in range(first, min(first + ARCHIVAL_BATCH, archived))
        ]
        writer.append(batch)
        writer.compact()
    for n in range(archived, archived + ACTIVE):
        t = instant_time(n)
        storage.write(f"{TIMELINE}/{t}.deltacommit.requested", b"")
        storage.write(f"{TIMELINE}/{t}.deltacommit.inflight", b"")
        storage.write(f"{TIMELINE}/{t}_{instant_time(n, 500)}.deltacommit", METADATA % n)
    return storage


def load_timeline(storage: Storage) -> tuple[list[tuple[str, str | None, str]], History]:
    """What opening a layout-2 timeline costs: list and parse ``.hoodie/timeline/`` (the history is
    a sub-folder, not listed into) and open the history, which reads nothing yet."""
    latest: dict[str, tuple[str, str | None, str]] = {}
    for name in storage.list_names(TIMELINE):
        match = _NAME_RE.match(name)
        if match and (match[4] is None or match[1] not in latest):
            latest[match[1]] = (match[1], match[2], match[3])
    return sorted(latest.values()), History(storage)


def timed(fn: Callable[[], object], runs: int) -> float:
    fn()
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def lookup(storage: Storage, t: str) -> None:
    found = History(storage).entry(t)
    assert found is not None and found.metadata is not None, t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instants", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="timeline_history_") as tmp:
        started = time.perf_counter()
        long = build(Path(tmp) / "long", args.instants)
        built = time.perf_counter() - started
        short = build(Path(tmp) / "short", ACTIVE)
        files = sorted(f.name for f in History(long).snapshot.files)
        print(
            f"archived {args.instants:,} instants in {built:.1f} s ({args.instants // ARCHIVAL_BATCH} runs)"
        )
        print(f"history files of the long table: {files}")
        rows = []
        for label, measure in (
            ("timeline load", lambda s: load_timeline(s)),
            ("as-of lookup of an old instant", lambda s: lookup(s, instant_time(3))),
            ("list every archived instant", lambda s: History(s).instants()),
        ):
            few = timed(lambda m=measure: m(short), args.runs)
            rows.append((label, few, timed(lambda m=measure: m(long), args.runs)))
        print(f"{'measure':<34}{'30 archived':>14}{args.instants:>12,} archived{'ratio':>8}")
        for label, few, many in rows:
            print(f"{label:<34}{few * 1000:>12.2f}ms{many * 1000:>19.2f}ms{many / few:>8.2f}")
        print(f"timeline load ratio: {rows[0][2] / rows[0][1]:.2f} (target <= 1.5)")


if __name__ == "__main__":
    main()
