"""Random histories of writes (some killed half way), compactions, savepoints made and deleted, and
cleans (some killed half way) under every policy: a clean never changes what a retained instant or a
savepoint reads (ours and hudi-rs), deletes only what a plan named, never touches ``.hoodie/`` or
anything outside the table, and every savepoint refusal is justified.

The expectations come from oracles computed here, not from the code under test: which commits a
clean must retain (from the ``.hoodie/`` file names, the policy and "now"), which files a snapshot
reads (from the data file names on disk right after each commit; on version 8 a log's slice also from
its deltacommit's completion time in the timeline's file names and from compaction plans), and
whether a savepoint's files are gone (from the disk). The last test of the module checks, from the
statistics the histories collected, that they exercised what they claim (printed at the end of the
run).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import itertools
import os
import re
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import fastavro
import pyarrow as pa
import pytest
from crash_support import crashing
from hudi import HudiReadOptions, HudiTableBuilder
from hypothesis import event, given, settings
from hypothesis import strategies as st
from property_support import SUMMARY, derandomized, example_dir, examples, fixed_seed, ratio, tally

from airflow_lake_provider.lake.errors import SavepointError
from airflow_lake_provider.lake.services.clean.executor import run_clean
from airflow_lake_provider.lake.services.clean.planner import CleanPolicy
from airflow_lake_provider.lake.services.compaction.executor import execute_compaction, run_compaction
from airflow_lake_provider.lake.services.compaction.result import Outcome as CompactionOutcome
from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction
from airflow_lake_provider.lake.services.savepoint import create_savepoint, delete_savepoint
from airflow_lake_provider.lake.storage import SimulatedCrash
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.rollback.executor import rollback
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline.instant import InstantClock, instant_to_datetime

KEYS = [f"k{i}" for i in range(6)]
CITIES = ["a", "b", "c"]
# A write's precombine value is 10 x its number minus a lag: a lagging version loses to a stored one.
LAGS = [0, 0, 0, 0, 5, 15, 35]
START = dt.datetime(2025, 6, 1, tzinfo=dt.timezone.utc)
TICK = dt.timedelta(minutes=10)  # the table's clock: every instant is 10 minutes after the last
HOURS_RETAINED = 1
POLICIES = [
    CleanPolicy.KEEP_LATEST_COMMITS,
    CleanPolicy.KEEP_LATEST_FILE_VERSIONS,
    CleanPolicy.KEEP_LATEST_BY_HOURS,
]
STATS = tally("clean")
# The fixed example sequences (CI profile) must not depend on which tests ran before (see the fixture).
pytestmark = pytest.mark.usefixtures("no_local_constants")
STATS_V8 = tally("clean v8")


def _rows(table: pa.Table) -> list[tuple]:
    if table.num_rows == 0:
        return []
    cols = [
        table.column(c).to_pylist() for c in ("_hoodie_partition_path", "_hoodie_record_key", "ts", "value")
    ]
    return sorted(zip(*cols, strict=True))


def _hudi_rs(path: Path | str, as_of: str, storage_options: dict[str, str] | None = None) -> list[tuple]:
    builder = HudiTableBuilder.from_base_uri(str(path)).with_storage_options(storage_options or {})
    batches = builder.build().read(HudiReadOptions().with_as_of_timestamp(as_of))
    return _rows(pa.Table.from_batches(batches)) if batches else []


def _tree(root: Path) -> dict[str, bytes]:
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            full = Path(dirpath) / name
            out[str(full.relative_to(root))] = full.read_bytes()
    return out


def _digest(files: dict[str, bytes]) -> dict[str, str]:
    return {k: hashlib.sha256(v).hexdigest() for k, v in files.items()}


def _is_data_file(rel: str) -> bool:
    name = rel.rsplit("/", 1)[-1]
    return not rel.startswith(".hoodie/") and (name.endswith(".parquet") or ".log." in name)


# -- Oracles: from file names, never from the code under test ----------------------------------------
_BASE = re.compile(r"^(?P<fid>.+)_(?P<token>[^_]+)_(?P<at>\d{17})\.parquet$")
_LOG = re.compile(r"^\.(?P<fid>.+)_(?P<at>\d{17})\.log\.\d+(_.*)?$")
# Layout 2 (versions 8 and 9) names a completed instant "<requested>_<completion>.<action>".
_TIMELINE = re.compile(r"^(?P<t>\d{17})(?:_(?P<c>\d{17}))?\.(?P<rest>[a-z.]+)$")
_COMPLETED_COMMIT = {"commit", "deltacommit", "replacecommit"}
# Requested/inflight files of writes and compactions (layout 1: an inflight commit is "<t>.inflight").
_PENDING_WRITE = {
    "commit.requested",
    "inflight",
    "deltacommit.requested",
    "deltacommit.inflight",
    "replacecommit.requested",
    "replacecommit.inflight",
}
_PENDING_COMPACTION = {"compaction.requested", "compaction.inflight"}


def _slice_of(rel: str) -> tuple[tuple[str, str], str, bool] | None:
    """((partition, file id), slice instant, is base file) of a data file, from its name."""
    partition, _, name = rel.rpartition("/")
    m = _BASE.match(name)
    if m:
        return (partition, m["fid"]), m["at"], True
    m = _LOG.match(name)
    if m:
        return (partition, m["fid"]), m["at"], False
    return None


def _files_read(
    listing: frozenset[str],
    instant: str,
    slice_of: Callable[[str], tuple[tuple[str, str], str, bool] | None] = _slice_of,
) -> frozenset[str]:
    """The files a snapshot as of ``instant`` reads: per file group, the newest slice with a base file
    (at or before ``instant``) and every log file after it (logs written against a pending compaction
    are merged into the slice being compacted). ``slice_of``: how a file's slice is known (version 8:
    :meth:`_History.slice_of`)."""
    groups: dict[tuple[str, str], list[tuple[str, bool, str]]] = {}
    for rel in listing:
        parsed = slice_of(rel)
        if parsed is not None and parsed[1] <= instant:
            groups.setdefault(parsed[0], []).append((parsed[1], parsed[2], rel))
    out = set()
    for files in groups.values():
        bases = [at for at, is_base, _ in files if is_base]
        floor = max(bases) if bases else ""
        out |= {rel for at, _, rel in files if at >= floor}
    return frozenset(out)


@dataclass(frozen=True)
class _Timeline:
    """What the ``.hoodie/`` file names say, read without the code under test."""

    commits: list[str]  # completed commits, deltacommits, replacecommits and compactions
    pending_writes: list[str]
    pending_compactions: list[str]
    cleans: dict[str, set[str]]  # clean instant -> states present ("requested", "inflight", "")
    savepoints: list[str]
    files: dict[tuple[str, str], str] = field(default_factory=dict)  # (time, rest) -> file name
    # Layout 2: requested time -> completion time of every completed commit and deltacommit.
    completions: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, names: list[str]) -> _Timeline:
        matches = [m for n in names if (m := _TIMELINE.match(n))]
        parsed = [(m["t"], m["rest"]) for m in matches]
        done = {t for t, rest in parsed if rest in _COMPLETED_COMMIT}
        cleans: dict[str, set[str]] = {}
        for t, rest in parsed:
            if rest.startswith("clean"):
                cleans.setdefault(t, set()).add(rest.removeprefix("clean").lstrip("."))
        return cls(
            commits=sorted(done),
            pending_writes=sorted({t for t, r in parsed if r in _PENDING_WRITE} - done),
            pending_compactions=sorted({t for t, r in parsed if r in _PENDING_COMPACTION} - done),
            cleans=cleans,
            savepoints=sorted(t for t, r in parsed if r == "savepoint"),
            files={(m["t"], m["rest"]): m.string for m in matches},
            completions={m["t"]: m["c"] for m in matches if m["c"] and m["rest"] in _COMPLETED_COMMIT},
        )


def _avro(data: bytes) -> dict:
    (record,) = list(fastavro.reader(io.BytesIO(data)))
    return record


def _by_policy(commits: list[str], policy: CleanPolicy, retained: int, now: dt.datetime) -> str | None:
    """Hudi's earliest commit to retain by the policy alone (``None``: none, or FILE_VERSIONS)."""
    if policy is CleanPolicy.KEEP_LATEST_COMMITS:
        return commits[-retained] if len(commits) > retained else None
    if policy is CleanPolicy.KEEP_LATEST_BY_HOURS:
        cutoff = now - dt.timedelta(hours=HOURS_RETAINED)
        return next((c for c in commits if instant_to_datetime(c) >= cutoff), None)
    return None


def _earliest_to_retain(
    timeline: _Timeline, policy: CleanPolicy, retained: int, now: dt.datetime
) -> str | None:
    """The earliest commit to retain, moved back before any pending write or compaction older than
    it (services-semantics section 1); ``None``: nothing is old enough to clean by age."""
    earliest = _by_policy(timeline.commits, policy, retained, now)
    if earliest is None:
        return None
    older = [p for p in timeline.pending_writes + timeline.pending_compactions if p < earliest]
    if older:
        before = [c for c in timeline.commits if c < min(older)]
        earliest = before[-1] if before else None
    return earliest


# -- Generators --------------------------------------------------------------------------------------
def _sometimes(percent: int, strategy: st.SearchStrategy) -> st.SearchStrategy:
    """``strategy`` in about ``percent``% of draws, else None (not one_of: its choice leans to the end)."""
    return st.integers(0, 99).flatmap(lambda x: strategy if 5 <= x < 5 + percent else st.none())


row_st = st.tuples(st.sampled_from(KEYS), st.sampled_from(CITIES), st.sampled_from(LAGS), st.integers(0, 999))
write_st = st.tuples(
    st.just("write"),
    st.sampled_from(["insert", "upsert", "upsert", "upsert", "delete"]),
    st.lists(row_st, min_size=1, max_size=5),
    # None: the step runs whole; k: the process dies right after its k-th durable step.
    _sometimes(10, st.integers(1, 3)),
    # Failed-writes policy NEVER: a killed write stays pending past this write (EAGER rolls it back).
    st.booleans(),
)
clean_st = st.tuples(
    st.just("clean"),
    st.sampled_from(POLICIES),
    st.integers(1, 3),  # commits and file versions retained: 1, or 2 for 3
    st.integers(25, 59),  # KEEP_LATEST_BY_HOURS: "now" is this many minutes after the latest commit
    # "schedule" leaves the plan pending: savepoints made before the next clean must still win.
    st.sampled_from(["schedule_and_execute", "schedule_and_execute", "schedule_and_execute", "schedule"]),
    _sometimes(12, st.integers(1, 4)),
)
# "intact": the oldest commit whose files are all there (a pending plan may name them); "oldest":
# the oldest commit (a clean most likely took its files); "any": a random one.
savepoint_st = st.tuples(
    st.just("savepoint"), st.sampled_from(["intact", "oldest", "any"]), st.integers(0, 30)
)
unsavepoint_st = st.tuples(st.just("unsavepoint"), st.integers(0, 5))
# Merge-on-read tables grow new slices only by compaction: run one, or leave one pending.
compact_st = st.sampled_from(["run", "run", "run", "run", "schedule"]).map(lambda mode: ("compact", mode))


@st.composite
def histories(draw: st.DrawFn, table_type: str, max_rounds: int = 9) -> tuple[bool, list[tuple]]:
    """Rounds of 1-3 writes, then (merge-on-read, mostly) a compaction, maybe a savepoint made or
    deleted, and (mostly) a clean: every round adds slices a later clean may take."""
    partitioned = draw(st.integers(0, 3)) > 0
    steps: list[tuple] = []
    for _ in range(draw(st.integers(4, max_rounds))):
        steps += draw(st.lists(write_st, min_size=1, max_size=3))
        if table_type == "mor" and draw(st.integers(0, 3)) > 0:
            steps.append(draw(compact_st))
        pick = draw(st.integers(0, 5))
        if pick >= 3:
            steps.append(draw(savepoint_st if pick < 5 else unsavepoint_st))
        if draw(st.integers(0, 3)) > 0:
            steps.append(draw(clean_st))
    return partitioned, steps


@pytest.mark.parametrize("table_type", ["cow", "mor"])
@settings(max_examples=examples(30), derandomize=derandomized())
# The fixed sequence of this seed reaches every branch the last test asserts, with margin (the
# source-derived one had a policy cell at 8-11% once the sequence stopped depending on test order).
@fixed_seed(4)
@given(data=st.data())
def test_clean_keeps_every_retained_instant_and_savepoint_readable(
    tmp_path_factory, table_type: str, data: st.DataObject
) -> None:
    partitioned, steps = data.draw(histories(table_type), label="history")
    root = example_dir(tmp_path_factory, "clean")
    outside = root / "neighbour"
    outside.mkdir()
    (outside / "data.parquet").write_bytes(b"not part of the table")
    table_root = root / "t"
    place = _Place(
        str(table_root),
        lambda: _tree(table_root / ".hoodie"),
        lambda: [p.name for p in (table_root / ".hoodie").iterdir() if p.is_file()],
        lambda: _digest(_tree(outside)),
        lambda: frozenset(
            str(p.relative_to(table_root))
            for p in table_root.rglob("*")
            if p.is_file() and _is_data_file(str(p.relative_to(table_root)))
        ),
        {},
        lambda name: (table_root / ".hoodie" / name).read_bytes(),
    )
    _clean_history(place, table_type, partitioned, steps, stats=STATS)


# Version 8 (Hudi 1.x, timeline layout 2): a test of its own, as Hypothesis derives the fixed example
# sequence of the test above from its source. Its slice oracle (``_History.slice_of``) places a log,
# named for its own deltacommit, by that deltacommit's completion time; its statistics are kept apart
# (``STATS_V8``) so that the last test can show what version 8 exercised.
@pytest.mark.parametrize(("table_type", "version"), [("cow", 8), ("mor", 8)])
@settings(max_examples=examples(30), derandomize=derandomized())
@given(data=st.data())
def test_clean_keeps_every_retained_instant_and_savepoint_readable_on_v8(
    tmp_path_factory, table_type: str, version: int, data: st.DataObject
) -> None:
    partitioned, steps = data.draw(histories(table_type), label="history")
    timeline_dir = "" if version == 6 else "timeline/"
    root = example_dir(tmp_path_factory, "clean")
    outside = root / "neighbour"
    outside.mkdir()
    (outside / "data.parquet").write_bytes(b"not part of the table")
    table_root = root / "t"
    place = _Place(
        str(table_root),
        lambda: _tree(table_root / ".hoodie"),
        lambda: [p.name for p in (table_root / ".hoodie" / timeline_dir).iterdir() if p.is_file()],
        lambda: _digest(_tree(outside)),
        lambda: frozenset(
            str(p.relative_to(table_root))
            for p in table_root.rglob("*")
            if p.is_file() and _is_data_file(str(p.relative_to(table_root)))
        ),
        {},
        lambda name: (table_root / ".hoodie" / name).read_bytes(),
        timeline_dir,
    )
    _clean_history(place, table_type, partitioned, steps, stats=STATS_V8, version=version)


# v8 merge-on-read runs locally only (above): its 30 histories take a minute or two already.
@pytest.mark.parametrize(("table_type", "version"), [("cow", 6), ("mor", 6), ("cow", 8)])
@settings(max_examples=examples(2))
@given(data=st.data())
def test_clean_keeps_every_retained_instant_and_savepoint_readable_on_s3(
    s3_endpoint: str, table_type: str, version: int, data: st.DataObject
) -> None:
    """The same histories on an s3:// table (crash injection is local only: those steps run whole);
    the neighbour is an object beside the table's prefix."""
    from s3_helpers import drop_bucket, hudi_s3_options, s3_client, s3_env, s3_objects

    partitioned, steps = data.draw(histories(table_type, max_rounds=5), label="history")
    timeline_dir = "" if version == 6 else "timeline/"

    bucket = f"clean-{uuid.uuid4().hex[:12]}"
    client = s3_client(s3_endpoint)
    client.create_bucket(Bucket=bucket)
    client.put_object(Bucket=bucket, Key="neighbour/data.parquet", Body=b"not part of the table")

    def _keys(prefix: str) -> list[str]:
        keys = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            keys += [item["Key"][len(prefix) :] for item in page.get("Contents", [])]
        return keys

    def data_files() -> frozenset[str]:
        return frozenset(k for k in _keys("t/") if _is_data_file(k))

    place = _Place(
        f"s3://{bucket}/t",
        lambda: s3_objects(s3_endpoint, bucket, "t/.hoodie/"),
        lambda: [k for k in _keys(f"t/.hoodie/{timeline_dir}") if "/" not in k],
        lambda: _digest(s3_objects(s3_endpoint, bucket, "neighbour/")),
        data_files,
        hudi_s3_options(s3_endpoint),
        lambda name: client.get_object(Bucket=bucket, Key=f"t/.hoodie/{name}")["Body"].read(),
        timeline_dir,
    )
    with s3_env(s3_endpoint):
        _clean_history(place, table_type, partitioned, steps, stats=tally("clean on s3"), version=version)
    drop_bucket(s3_endpoint, bucket)  # passed: a failing example's bucket stays to look at


@dataclass(frozen=True)
class _Place:
    """Where a history runs: the table's location, its .hoodie/ files, a digest of a neighbour, the
    table's data files (table-relative), and the storage options hudi-rs needs there."""

    location: str
    hoodie: Callable[[], dict[str, bytes]]
    hoodie_names: Callable[[], list[str]]  # the top level of .hoodie/ (the timeline)
    neighbour: Callable[[], dict[str, str]]
    data_files: Callable[[], frozenset[str]]
    hudi_options: dict[str, str]
    hoodie_read: Callable[[str], bytes] | None = None
    # The timeline's folder inside .hoodie/: "" in layout 1, "timeline/" in layout 2.
    timeline_dir: str = ""

    def timeline(self) -> _Timeline:
        return _Timeline.of(self.hoodie_names())

    def read(self, name: str) -> bytes:
        """One timeline file's bytes."""
        name = self.timeline_dir + name
        return self.hoodie()[name] if self.hoodie_read is None else self.hoodie_read(name)

    def entry(self, tree: dict[str, bytes], name: str) -> bytes:
        """A timeline file's bytes in a ``hoodie()`` tree."""
        return tree[self.timeline_dir + name]


@dataclass
class _History:
    """The model of one history: what each instant read when it was made, and what may be gone."""

    table_type: str
    snapshots: dict[str, list[tuple]] = field(default_factory=dict)
    listings: dict[str, frozenset[str]] = field(default_factory=dict)  # data files right after it
    compacted: set[str] = field(default_factory=set)  # base files compactions wrote
    savepointed: set[str] = field(default_factory=set)
    # Instants a clean plan may have taken files from (older than its earliest commit to retain).
    exposed: set[str] = field(default_factory=set)
    seen_cleans: set[str] = field(default_factory=set)
    tried: set[tuple[str, str]] = field(default_factory=set)  # (table type, policy) of clean runs
    deleted: set[tuple[str, str]] = field(default_factory=set)
    # Version 8 slices a log by completion time (see ``slice_of``): what that needs, from file names
    # and compaction plans as :meth:`observe` saw them.
    version: int = 6
    bases: dict[tuple[str, str], set[str]] = field(default_factory=dict)  # group -> base instants
    completions: dict[str, str] = field(default_factory=dict)  # deltacommit -> completion time
    plans_read: set[str] = field(default_factory=set)  # compaction instants whose plan was read

    def files_read(self, instant: str) -> frozenset[str]:
        extra = {f for f in self.compacted if (s := self.slice_of(f)) and s[1] <= instant}
        return _files_read(self.listings[instant] | extra, instant, self.slice_of)

    def slice_of(self, rel: str) -> tuple[tuple[str, str], str, bool] | None:
        """``_slice_of`` on version 6. On version 8 a log is named for its own deltacommit and
        belongs to the slice with the greatest base instant (a base file's, or a compaction's
        requested time for the groups its plan names) not after that deltacommit's completion time;
        before every base it starts a slice of its own. A log of a deltacommit that did not
        complete (killed, not rolled back yet) is no slice's: None."""
        parsed = _slice_of(rel)
        if self.version == 6 or parsed is None or parsed[2]:
            return parsed
        group, own, _ = parsed
        completion = self.completions.get(own)
        if completion is None:
            return None
        earlier = [b for b in self.bases.get(group, ()) if b <= completion]
        return group, max(earlier, default=own), False

    def observe(self, place: _Place) -> None:
        """Version 8: note the completion times, base files and compaction plans there are now
        (a base instant stays known after a clean deletes its file: older logs keep their slice)."""
        if self.version == 6:
            return
        timeline = place.timeline()
        self.completions.update(timeline.completions)
        for rel in place.data_files():
            parsed = _slice_of(rel)
            if parsed is not None and parsed[2]:
                self.bases.setdefault(parsed[0], set()).add(parsed[1])
        for t, rest in timeline.files:
            if rest == "compaction.requested" and t not in self.plans_read:
                self.plans_read.add(t)
                for op in _avro(place.read(timeline.files[(t, rest)]))["operations"] or []:
                    self.bases.setdefault((op["partitionPath"], op["fileId"]), set()).add(t)


def _clean_history(
    place: _Place, table_type: str, partitioned: bool, steps: list[tuple], stats: object, version: int = 6
) -> None:
    ticks = itertools.count()
    table = LakeTable.create(
        place.location,
        table_version=version,
        name="c",
        table_type=table_type,
        record_key_fields=("key",),
        precombine_field="ts",
        partition_fields=("city",) if partitioned else (),
        clock=InstantClock(now=lambda: START + TICK * next(ticks)),
    )
    h = _History(table_type, version=version)
    n_writes = 0
    for step in steps:
        if step[0] == "write":
            _, op, rows, crash, keep_pending = step
            n_writes += 1
            batch = pa.table(
                {
                    "key": [r[0] for r in rows],
                    "city": [r[1] for r in rows],
                    "ts": pa.array([max(0, 10 * n_writes - r[2]) for r in rows], pa.int64()),
                    "value": pa.array([r[3] for r in rows], pa.int64()),
                }
            )
            if any(r[2] for r in rows):
                stats["writes with a lagging precombine value"] += 1
            try:
                never = {"hoodie.cleaner.policy.failed.writes": "NEVER"} if keep_pending else None
                instant = write(crashing(table, crash), batch, op, options=never).instant
            except SimulatedCrash:
                stats["writes killed half way"] += 1
                continue
            _record(place, table, h, instant)
        elif step[0] == "compact":
            _compact(place, table, h, step[1], stats)
            h.observe(place)
        elif step[0] == "savepoint":
            _savepoint(place, table, h, step[1], step[2], stats)
        elif step[0] == "unsavepoint":
            if h.savepointed:
                chosen = sorted(h.savepointed)[step[1] % len(h.savepointed)]
                delete_savepoint(table, chosen)
                h.savepointed.discard(chosen)
                assert chosen not in place.timeline().savepoints
                stats["savepoints deleted"] += 1
        else:
            _, policy, retained, minutes, mode, crash = step
            key, value = {
                CleanPolicy.KEEP_LATEST_COMMITS: ("hoodie.cleaner.commits.retained", 1 + (retained > 2)),
                CleanPolicy.KEEP_LATEST_FILE_VERSIONS: (
                    "hoodie.cleaner.fileversions.retained",
                    1 + (retained > 2),
                ),
                CleanPolicy.KEEP_LATEST_BY_HOURS: ("hoodie.cleaner.hours.retained", HOURS_RETAINED),
            }[policy]
            commits = place.timeline().commits
            now = instant_to_datetime(commits[-1]) + dt.timedelta(minutes=minutes) if commits else START
            options = {"hoodie.cleaner.policy": policy.value, key: str(value)}
            h.tried.add((table_type, policy.value))
            _clean_and_check(table, place, h, options, (policy, value), mode, now, crash, stats)
    # Finish whatever plan is still pending: savepoints made since must still read exactly.
    last = (CleanPolicy.KEEP_LATEST_COMMITS, 10)
    _clean_and_check(table, place, h, {}, last, "execute", START, None, stats)
    stats[f"examples {table_type}"] += 1
    for cell in h.tried:
        stats[f"examples {cell[0]} {cell[1]}: clean run"] += 1
        stats[f"examples {cell[0]} {cell[1]}: clean deleted files"] += cell in h.deleted


def _record(place: _Place, table: LakeTable, h: _History, instant: str) -> None:
    h.snapshots[instant] = _rows(read_snapshot(table))
    h.listings[instant] = place.data_files()
    h.observe(place)


def _compact(place: _Place, table: LakeTable, h: _History, mode: str, stats: object) -> None:
    if table.config.is_mor is False:
        return
    timeline = place.timeline()
    if timeline.pending_writes:  # a compaction plan must come before every pending write:
        rollback(table)  # roll the killed writes back first, as an operator would (lake rollback)
        assert not place.timeline().pending_writes
        stats["killed writes rolled back before a compaction"] += 1
    before = _rows(read_snapshot(table))
    if timeline.pending_compactions:
        if mode == "schedule":
            return
        instant = timeline.pending_compactions[0]
        assert execute_compaction(table, instant).outcome is CompactionOutcome.COMPLETED
        stats["pending compactions executed later"] += 1
    elif mode == "schedule":
        if schedule_compaction(table, force=True).outcome is CompactionOutcome.SCHEDULED:
            stats["compactions left pending"] += 1
        return
    else:
        scheduled, done = run_compaction(table, force=True)
        if done.outcome is not CompactionOutcome.COMPLETED:
            return
        instant = scheduled.instant
    stats["compactions"] += 1
    h.compacted |= {f for f in place.data_files() if (s := _slice_of(f)) and s[1] == instant and s[2]}
    overtaken = sorted(t for t in h.snapshots if t > instant)
    if not overtaken:
        assert _rows(read_snapshot(table)) == before, "a compaction changed what the table reads"
    else:
        # Writes made while it was pending logged against it. Before, reads merged their versions
        # with the logs of the slice being compacted in one fold; now the compacted base meets them.
        # Hudi's event-time merge is not associative: a deleted key leaves the base (its ordering
        # value with it), so a lagging version logged later shows again. What those instants read
        # now is new; ours is taken here, and hudi-rs must agree with it whenever it is checked.
        for t in overtaken:
            now_reads = _rows(read_snapshot(table, as_of=t))
            if now_reads != h.snapshots[t]:
                stats["reads changed by a compaction that writes overtook"] += 1
            h.snapshots[t] = now_reads
    # As of its own instant a compaction reads what the table read when it was planned (writes made
    # while it was pending come later): the last commit before it, through the new base files.
    previous = max((t for t in h.snapshots if t < instant), default=None)
    h.snapshots[instant] = h.snapshots[previous] if previous else []
    h.listings[instant] = h.listings[previous] if previous else frozenset()


def _savepoint(place: _Place, table: LakeTable, h: _History, how: str, pick: int, stats: object) -> None:
    """Savepoint a commit (``how``: see ``savepoint_st``). A refusal must
    be justified: a file the commit's snapshot reads is gone, or (Hudi's rule) the commit is older than
    the earliest commit the last completed clean retained. An accepted one must read exactly."""
    candidates = sorted(set(h.snapshots) - h.savepointed)
    files = place.data_files()
    if how == "intact":
        candidates = [t for t in candidates if h.files_read(t) <= files]
    if not candidates:
        return
    chosen = candidates[pick % len(candidates)] if how == "any" else candidates[0]
    gone = h.files_read(chosen) - files
    timeline = place.timeline()
    done = [t for t, states in timeline.cleans.items() if "" in states]
    last = _avro(place.read(timeline.files[(max(done), "clean")])) if done else {}
    retained = last.get("earliestCommitToRetain") or ""
    beyond_window = bool(retained) and chosen < retained
    try:
        point = create_savepoint(table, chosen)
    except SavepointError as exc:
        assert gone or beyond_window, (
            f"savepoint of {chosen} refused, yet every file it reads is there: {exc}"
        )
        stats[
            "savepoints refused: files gone"
            if gone
            else "savepoints refused: older than the last clean retained"
        ] += 1
        return
    assert not gone, f"savepoint of {chosen} accepted though a clean removed {sorted(gone)}"
    assert not beyond_window, f"savepoint of {chosen} accepted though the last clean retained from {retained}"
    stats["savepoints created"] += 1
    if point.overrides:
        stats["savepoints overriding a pending clean"] += 1
    h.savepointed.add(chosen)
    record = _avro(place.read(place.timeline().files[(chosen, "savepoint")]))
    recorded = {
        f"{p}/{name}" if p else name
        for p, meta in record["partitionMetadata"].items()
        for name in meta["savepointDataFile"]
    }
    # Every file the snapshot reads, and nothing outside its slices (a slice's later logs may be in,
    # and so may the logs of a slice a compaction pending at or before it opened: as in Hudi, that
    # slice folds into the one it compacts, with every log it has by now).
    reads = h.files_read(chosen)
    assert recorded >= reads, f"the savepoint misses {sorted(reads - recorded)}"
    slices = {h.slice_of(f)[:2] for f in reads}
    slices |= {(group, c) for group, _ in slices for c in timeline.pending_compactions if c <= chosen}
    assert {h.slice_of(f)[:2] for f in recorded} <= slices, "the savepoint records files of other slices"
    _check_reads(place, table, h, [chosen])


def _clean_and_check(
    table: LakeTable,
    place: _Place,
    h: _History,
    options: dict[str, str],
    policy: tuple[CleanPolicy, int],
    mode: str,
    now: dt.datetime,
    crash: int | None,
    stats: object,
) -> None:
    """One clean run (maybe killed after its ``crash``-th durable step), then: .hoodie/ and the
    neighbour untouched, only planned files gone, no failed delete, every instant no plan may have
    touched and every savepoint reads exactly as it did when written (ours and hudi-rs)."""
    hoodie_before = place.hoodie()
    outside_before = place.neighbour()
    files_before = place.data_files()
    timeline = place.timeline()
    earliest = _earliest_to_retain(timeline, policy[0], policy[1], now)
    # A plan made now keeps every commit from ``earliest`` on (FILE_VERSIONS: the latest one).
    floor = (
        earliest if policy[0] is not CleanPolicy.KEEP_LATEST_FILE_VERSIONS else max(h.snapshots, default="")
    )
    by_policy = _by_policy(timeline.commits, policy[0], policy[1], now)
    held = [p for p in timeline.pending_writes if by_policy and p < by_policy]
    try:
        result = run_clean(crashing(table, crash), options, mode=mode, now=now)
    except SimulatedCrash:
        result = None
        stats["cleans killed half way"] += 1
    after = place.timeline()
    new = set(after.cleans) - h.seen_cleans
    h.seen_cleans |= new
    if new and floor is not None:
        h.exposed |= {t for t in h.snapshots if t < floor}
    if result is not None:
        assert result.failed_files == 0
        if mode != "execute" and policy[0] is not CleanPolicy.KEEP_LATEST_FILE_VERSIONS:
            assert set(result.held_back_by) == set(held), "held_back_by names other pending writes"
            if held:
                stats["cleans held back by a pending write"] += 1
    hoodie_after = place.hoodie()
    # Only the clean's own bookkeeping file may be rewritten; every other file stays as it was.
    kept = {k: v for k, v in _digest(hoodie_before).items() if k != ".aux/lake-clean-state.json"}
    assert {k: v for k, v in _digest(hoodie_after).items() if k in kept} == kept, "a .hoodie file changed"
    assert set(kept) <= set(hoodie_after), "a .hoodie file was removed"
    assert place.neighbour() == outside_before
    # Every file that went was named by a clean plan; every finished clean deleted all it reported.
    planned = set()
    for t in after.cleans:
        plan = _avro(place.entry(hoodie_after, f"{t}.clean.requested"))
        for infos in plan["filePathsToBeDeletedPerPartition"].values():
            planned |= {
                i["filePath"].removeprefix("file:").removeprefix(place.location.rstrip("/") + "/")
                for i in infos
            }
    files_after = place.data_files()
    gone = files_before - files_after
    assert gone <= planned, f"a clean deleted files no plan named: {sorted(gone - planned)}"
    finished = [t for t in after.cleans if "" in after.cleans[t] and "" not in timeline.cleans.get(t, set())]
    for t in finished:
        meta = _avro(place.entry(hoodie_after, after.files[(t, "clean")]))
        total = 0
        for part, pm in meta["partitionMetadata"].items():
            assert pm["failedDeleteFiles"] == [], f"clean {t} reports failed deletes in {part!r}"
            for name in pm["successDeleteFiles"]:
                assert (f"{part}/{name}" if part else name) not in files_after
            total += len(pm["successDeleteFiles"])
            if pm["successDeleteFiles"]:
                h.deleted.add((h.table_type, pm["policy"]))
        assert meta["totalFilesDeleted"] == total
        if total:
            stats["cleans that deleted files"] += 1
            if len([p for p, pm in meta["partitionMetadata"].items() if pm["successDeleteFiles"]]) > 1:
                stats["cleans that deleted files in several partitions"] += 1
        else:
            stats["cleans that deleted nothing"] += 1
    retained = [t for t in h.snapshots if t not in h.exposed] + sorted(h.savepointed)
    for instant in sorted(set(retained)):
        missing = h.files_read(instant) - files_after
        assert not missing, f"a clean removed {sorted(missing)}, which a read as of {instant} needs"
    # Reads: every savepoint, the latest commit and the oldest commit a clean must keep readable.
    unexposed = sorted(t for t in h.snapshots if t not in h.exposed)
    _check_reads(place, table, h, sorted({*h.savepointed, *unexposed[:1], *unexposed[-1:]}))


def _check_reads(place: _Place, table: LakeTable, h: _History, instants: list[str]) -> None:
    """Ours as of each of ``instants``, hudi-rs as of the oldest and the newest of them."""
    pending_compaction = bool(place.timeline().pending_compactions)
    for instant in instants:
        assert _rows(read_snapshot(table, as_of=instant)) == h.snapshots[instant], f"ours as of {instant}"
        if (
            instant in (instants[0], instants[-1]) and not pending_compaction
        ):  # hudi-rs hides logs of a pending one
            assert _hudi_rs(place.location, instant, place.hudi_options) == h.snapshots[instant], (
                f"hudi-rs as of {instant}"
            )


@settings(max_examples=examples(25))
@given(
    table_type=st.sampled_from(["cow", "mor"]),
    versions=st.integers(3, 6),
    retained=st.integers(1, 2),
    picks=st.lists(st.integers(0, 5), min_size=1, max_size=3, unique=True),
    crash_inflight=st.booleans(),
    table_version=st.sampled_from([6, 8]),
)
def test_savepoints_made_while_a_clean_is_pending_win(
    tmp_path_factory,
    table_type: str,
    versions: int,
    retained: int,
    picks: list[int],
    crash_inflight: bool,
    table_version: int,
) -> None:
    """Plan a clean, savepoint some instants (the plan may name their files), then let the clean run
    (or die after going inflight and be finished later): every savepoint reads exactly as before."""
    path = example_dir(tmp_path_factory, "pending") / "t"
    _pending_clean_history(
        str(path), {}, table_type, versions, retained, picks, crash_inflight, table_version
    )


@settings(max_examples=examples(5))
@given(
    table_type=st.sampled_from(["cow", "mor"]),
    versions=st.integers(3, 5),
    retained=st.integers(1, 2),
    picks=st.lists(st.integers(0, 5), min_size=1, max_size=3, unique=True),
    crash_inflight=st.booleans(),
)
def test_savepoints_made_while_a_clean_is_pending_win_on_s3(
    s3_endpoint: str, table_type: str, versions: int, retained: int, picks: list[int], crash_inflight: bool
) -> None:
    """The same on an s3:// table (moto's S3 server on 127.0.0.1), hudi-rs reading S3."""
    from s3_helpers import drop_bucket, hudi_s3_options, s3_client, s3_env

    bucket = f"clean-{uuid.uuid4().hex[:12]}"
    s3_client(s3_endpoint).create_bucket(Bucket=bucket)
    with s3_env(s3_endpoint):
        _pending_clean_history(
            f"s3://{bucket}/t",
            hudi_s3_options(s3_endpoint),
            table_type,
            versions,
            retained,
            picks,
            crash_inflight,
        )
    drop_bucket(s3_endpoint, bucket)


def _pending_clean_history(
    location: str,
    hudi_options: dict[str, str],
    table_type: str,
    versions: int,
    retained: int,
    picks: list[int],
    crash_inflight: bool,
    table_version: int = 6,
) -> None:
    table = LakeTable.create(
        location,
        table_version=table_version,
        name="p",
        table_type=table_type,
        record_key_fields=("key",),
        precombine_field="ts",
    )
    snapshots: dict[str, list[tuple]] = {}
    for ts in range(versions):
        batch = pa.table(
            {
                "key": KEYS,
                "city": ["x"] * len(KEYS),
                "ts": pa.array([ts] * len(KEYS), pa.int64()),
                "value": [ts] * len(KEYS),
            }
        )
        written = write(table, batch, "upsert").instant  # before the read: d[k()] = v() runs v() first
        snapshots[written] = _rows(read_snapshot(table))
        if table_type == "mor" and ts:
            scheduled, done = run_compaction(table, force=True)
            assert done.outcome is CompactionOutcome.COMPLETED
            snapshots[scheduled.instant] = _rows(read_snapshot(table))
    pending = run_clean(table, {"hoodie.cleaner.commits.retained": str(retained)}, mode="schedule")
    planned = {
        p for paths in (pending.plan.files_per_partition if pending.plan else {}).values() for p in paths
    }
    if crash_inflight and pending.instant:
        requested = table.timeline().get(pending.instant)
        # the crash point
        table.store.transition_to_inflight(requested, table.timeline().read_bytes(requested))
    protected: set[str] = set()
    instants = sorted(snapshots)
    for chosen in sorted({instants[pick % len(instants)] for pick in picks}):
        point = create_savepoint(table, chosen)
        protected |= point.files
        assert bool(point.overrides) == bool(point.files & planned)
        event(f"savepoint overrides the pending clean: {bool(point.overrides)}")
        STATS["savepoints overriding a pending clean"] += bool(point.overrides)
    result = run_clean(table, mode="execute")
    assert set(result.kept_for_savepoints) == planned & protected
    event(f"kept for savepoints: {bool(result.kept_for_savepoints)}; deleted: {result.deleted_files > 0}")
    for sp in table.timeline().savepoints():
        assert _rows(read_snapshot(table, as_of=sp.timestamp)) == snapshots[sp.timestamp]
        assert _hudi_rs(location, sp.timestamp, hudi_options) == snapshots[sp.timestamp]


def test_clean_histories_exercised_what_they_claim() -> None:
    """Runs after the history tests above (pytest keeps file order): on version 6 and on version 8,
    per table type and policy, a clean deleted files in at least 30% of the examples that ran one;
    compactions, savepoint creation and deletion, justified refusals, multi-partition deletes and
    killed steps all happened."""
    if STATS["examples cow"] + STATS["examples mor"] < 20:
        pytest.skip("the history test did not run (or ran too few examples) in this session")
    failures = _exercised("clean", STATS)
    if STATS_V8["examples cow"] + STATS_V8["examples mor"] >= 20:
        failures += _exercised("clean v8", STATS_V8)
    assert not failures, failures


def _exercised(name: str, s: Counter[str]) -> list[str]:
    """What the histories counted in ``s`` failed to exercise (the summary lines are printed)."""
    failures = []
    for kind in ("cow", "mor"):
        for policy in POLICIES:
            cell = f"examples {kind} {policy.value}"
            line = ratio(s, f"{cell}: clean deleted files", f"{cell}: clean run")
            SUMMARY.append(f"{name}: {kind} {policy.value}: a clean deleted files in {line} examples")
            if s[f"{cell}: clean deleted files"] < 0.3 * max(s[f"{cell}: clean run"], 1):
                failures.append(f"{name}: {kind} {policy.value}: deleted in only {line}")
    for what in (
        "compactions",
        "compactions left pending",
        "pending compactions executed later",
        "savepoints created",
        "savepoints deleted",
        "savepoints refused: files gone",
        "savepoints refused: older than the last clean retained",
        "savepoints overriding a pending clean",
        "cleans that deleted files in several partitions",
        "cleans held back by a pending write",
        "cleans killed half way",
        "writes killed half way",
        "writes with a lagging precombine value",
    ):
        SUMMARY.append(f"{name}: {what}: {s[what]}")
        if not s[what]:
            failures.append(f"{name}: never happened: {what}")
    return failures
