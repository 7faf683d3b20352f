"""Plain parquet directories written by other engines (no ``.hoodie/``): what partition commit
refuses there, and its merge-small-files protocol (the commit itself: ``executor`` over a
``target.DirectoryTarget``).

A plain directory has no timeline, so the Hudi clustering commit cannot make a merge atomic.
``merge-small-files`` follows the file lifecycle of Flink's bucketing sink instead, every step a
durable storage operation, in an order that a crash at any step recovers from:

1. in-progress: each merged file is written under a hidden name in the partition folder
   (``.part-merged-<id>-<k>.parquet.inprogress``); readers that skip names starting with ``.`` or
   ``_`` (pyarrow.dataset, Spark, Hive, Flink) do not see it.
2. pending: one record, ``.lake-partition-commit/merges/<id>.json`` in the base directory, written
   atomically once every merged file is durable, says "these inputs are replaced by these outputs".
3. finished: each output is published under its visible name (a hard link / server-side copy, then
   the hidden name removed), the inputs are removed, and last the record.

The next run (any merge or commit of the same base directory) rolls every pending record forward;
hidden in-progress files without a record are discarded when their partition is merged next. Before
the record exists readers see only the inputs; after recovery only the outputs. A reader that lists
the partition while step 3 runs (or after a crash inside it, until the next run) can see an output
and its inputs at once: without a table format, publishing many files is never one atomic step.

Commit state lives beside the records: ``.lake-partition-commit/state/<partition>.json``, and the
trigger's "first write" of a partition is the earliest modification time of its visible files.
"""

from __future__ import annotations

import json
import logging
import math
import re
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_lake_provider.lake.config.registry import PC_PARTITION_FIELDS
from airflow_lake_provider.lake.errors import (
    InvalidPartitionError,
    ObjectNotFoundError,
    PartitionCommitConfigError,
    PartitionCommitError,
    StorageAccessError,
    UnsafePathError,
)
from airflow_lake_provider.lake.storage.base import HOODIE_DIR, Storage

log = logging.getLogger(__name__)

META_DIR = ".lake-partition-commit"  # hidden: readers of the directory skip it
MERGE_DIR = f"{META_DIR}/merges"
STATE_DIR = f"{META_DIR}/state"
LOCK_FILE = f"{META_DIR}/lock"
LOCK_WAIT_SECONDS = 60.0
INPROGRESS_SUFFIX = ".inprogress"
HIDDEN_PREFIXES = (".", "_")
# Plain directories have no table properties: partition field names for non-hive-style paths.
PARTITION_FIELDS_KEY = PC_PARTITION_FIELDS.key
_MERGE_ID = re.compile(r"[0-9a-f]{32}")
# Hidden files a merge leaves when it dies: an in-progress output, or the temporary link of a local
# publish (Storage.copy: link to _<name>.<hex>.tmp, then rename; .<name>.<hex>.tmp before) that
# holds a whole output's bytes.
_ORPHAN = re.compile(
    r"\.part-merged-[0-9a-f]{32}-\d{5}\.parquet\.inprogress|[._]part-merged-[0-9a-f]{32}-\d{5}\.parquet\.[0-9a-f]{32}\.tmp"
)


def is_hidden(name: str) -> bool:
    """What readers of a directory skip (pyarrow.dataset's default ``ignore_prefixes``, Hadoop's filter)."""
    return name.startswith(HIDDEN_PREFIXES)


def in_progress_name(output: str) -> str:
    return f".{output}{INPROGRESS_SUFFIX}"


@dataclass(frozen=True)
class PlainMergePlan:
    """One merge of a partition's small files: also the pending record, as written to storage."""

    merge_id: str
    partition: str
    inputs: tuple[tuple[str, int], ...]  # (file name in the partition, size)
    outputs: tuple[str, ...]  # visible names of the merged files
    target_bytes: int

    @property
    def bytes_in(self) -> int:
        return sum(size for _, size in self.inputs)

    @property
    def record(self) -> str:
        return f"{MERGE_DIR}/{self.merge_id}.json"

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "version": 1,
                "mergeId": self.merge_id,
                "partition": self.partition,
                "inputs": [list(i) for i in self.inputs],
                "outputs": list(self.outputs),
                "targetBytes": self.target_bytes,
            },
            indent=1,
        ).encode()

    @classmethod
    def from_json(cls, data: bytes, where: str) -> PlainMergePlan:
        try:
            body = json.loads(data)
            inputs, outputs = body["inputs"], body["outputs"]
            # Exactly the shape we write: str() or int() of other JSON types would pass for names.
            if not (
                isinstance(body["mergeId"], str)
                and isinstance(body["partition"], str)
                and isinstance(inputs, list)
                and all(
                    isinstance(i, list) and len(i) == 2 and isinstance(i[0], str) and type(i[1]) is int  # noqa: E721 (bool is an int too)
                    for i in inputs
                )
                and isinstance(outputs, list)
                and all(isinstance(n, str) for n in outputs)
                and type(body["targetBytes"]) is int  # noqa: E721
            ):
                raise TypeError("a field of the wrong type")
            plan = cls(
                merge_id=body["mergeId"],
                partition=body["partition"],
                inputs=tuple((n, s) for n, s in inputs),
                outputs=tuple(outputs),
                target_bytes=body["targetBytes"],
            )
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            raise PartitionCommitError(f"{where}: unreadable merge record ({exc}); nothing changed") from None
        # A record decides what gets deleted: every input a distinct plain file of its partition, and
        # the outputs exactly the names this merge gives its files, none of them an input (else
        # "publishing" an output would find a file already there and deleting the inputs lose it).
        names = [n for n, _ in plan.inputs]
        own = tuple(f"part-merged-{plan.merge_id}-{k:05d}.parquet" for k in range(len(plan.outputs)))
        if (
            not _MERGE_ID.fullmatch(plan.merge_id)
            or not plan.outputs
            or plan.outputs != own
            or len(names) < 2
            or len(set(names)) != len(names)
            or set(names) & set(own)
            or any(not _plain_name(n) or is_hidden(n) for n in names)
        ):
            raise PartitionCommitError(f"{where}: merge record names files it cannot own; nothing changed")
        check_partition(plan.partition)
        return plan


@dataclass(frozen=True)
class PlainMergeResult:
    partition: str
    merge_id: str | None = None
    replaced: tuple[str, ...] = ()  # input file names
    written: tuple[str, ...] = ()  # output file names
    bytes_in: int = 0
    rows: int = 0
    recovered: tuple[str, ...] = ()  # merge ids rolled forward
    discarded: tuple[str, ...] = ()  # orphan in-progress files removed


def _plain_name(name: str) -> bool:
    return bool(name) and "/" not in name and "\x00" not in name and name not in (".", "..")


def check_partition(partition: str) -> str:
    """A partition folder below the base directory (``""`` for the base itself), normalised."""
    text = str(partition).strip("/")  # not spaces: "city=Paris " is another folder than "city=Paris"
    parts = text.split("/") if text else []
    if (
        "\x00" in text
        or any(p in ("", ".", "..", HOODIE_DIR) for p in parts)
        or (parts and parts[0] == META_DIR)
    ):
        raise InvalidPartitionError(f"partition {partition!r} is not a partition folder of the directory")
    if any(is_hidden(p) for p in parts):
        raise InvalidPartitionError(
            f"partition {partition!r} is hidden (a folder starting with '.' or '_'): readers of the "
            "directory skip it, and engines keep files of running jobs there (_temporary); nothing changed"
        )
    return text


def _join(partition: str, name: str) -> str:
    return f"{partition}/{name}" if partition else name


def plan_plain_merge(
    partition: str, listing: Sequence[tuple[str, int]], target_bytes: int, merge_id: str
) -> PlainMergePlan | None:
    """Pure: the visible files under ``target_bytes`` merged into ceil(their bytes / target) files;
    ``None`` with fewer than two of them, or when merging would not lower the file count. Hidden
    files (in-progress, ``_SUCCESS``, ``.crc``) never count."""
    if target_bytes <= 0:
        raise PartitionCommitConfigError(f"merge-small-files: target size {target_bytes} must be positive")
    small = tuple(sorted((n, s) for n, s in listing if not is_hidden(n) and s < target_bytes))
    if len(small) < 2:
        return None
    count = max(1, math.ceil(sum(s for _, s in small) / target_bytes))
    if count >= len(small):
        return None  # would not lower the file count (e.g. the outputs of an earlier merge): no churn
    outputs = tuple(f"part-merged-{merge_id}-{k:05d}.parquet" for k in range(count))
    return PlainMergePlan(merge_id, partition, small, outputs, target_bytes)


# -- refusing what is not a plain parquet directory -------------------------------------------------
def _is_hudi_table(storage: Storage) -> bool:
    return storage.exists(f"{HOODIE_DIR}/hoodie.properties") or storage.exists(HOODIE_DIR)


def is_plain_directory(storage: Storage) -> bool:
    """True when the location has no ``.hoodie/`` (the plain-directory path applies)."""
    return not _is_hudi_table(storage)


def check_plain_directory(storage: Storage, partition: str = "") -> None:
    """Refuse a Hudi table, a folder inside one or inside another directory partition commit keeps
    state for, or a partition that holds a table or such a directory."""
    if _is_hudi_table(storage):
        raise PartitionCommitError(
            f"{storage.root} is a Hudi table: its merge-small-files is a replacecommit (the Hudi path), "
            "not the plain-directory protocol; nothing changed"
        )
    _check_outer(storage, hudi=True)
    _check_no_nested_table(storage, partition)


def _check_outer(storage: Storage, *, hudi: bool) -> None:
    """Walk up from the root: a Hudi table above it, or a directory with partition commit state.

    Two nested directories (``/events`` with partition ``dt=1``, and ``/events/dt=1``) would each
    have their own lock and records: run together, one takes the other's in-progress files for
    orphans, and rows can be merged twice. The one used first owns the tree.
    """
    above = storage.parent()
    while above is not None:
        try:
            inside = hudi and above.exists(f"{HOODIE_DIR}/hoodie.properties")
            managed = above.exists(META_DIR)
        except StorageAccessError:  # credentials scoped to a prefix: nothing above it is ours to read
            break
        if inside:
            raise PartitionCommitError(
                f"{storage.root} lies inside the Hudi table {above.root}: run partition commit on the "
                "table itself (its merge is a replacecommit); nothing changed"
            )
        if managed:
            raise PartitionCommitError(
                f"{storage.root} lies inside {above.root}, where partition commit keeps state "
                f"({above.uri(META_DIR)}): run it on {above.root} with the partition path; nothing changed"
            )
        above = above.parent()


def _check_no_nested_table(storage: Storage, partition: str) -> None:
    parts = partition.split("/") if partition else []
    for depth in range(1, len(parts) + 1):
        level = "/".join(parts[:depth])
        if storage.exists(f"{level}/{HOODIE_DIR}"):
            raise PartitionCommitError(
                f"{storage.uri(level)} is a Hudi table inside {storage.root}: "
                "merge it as a table; nothing changed"
            )
        if storage.exists(f"{level}/{META_DIR}"):
            raise PartitionCommitError(
                f"{storage.uri(level)} keeps the partition commit state of its own directory "
                f"({storage.uri(f'{level}/{META_DIR}')}): run partition commit there; nothing changed"
            )


def _read_footers(storage: Storage, partition: str, names: Sequence[str]) -> dict[str, tuple[Any, int]]:
    """Each visible file's (Arrow schema, rows) from its footer; ``PartitionCommitError`` for one
    that is not parquet."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schemas = {}
    for name in names:
        rel = _join(partition, name)
        try:
            with storage.open_input(rel) as fh:
                footer = pq.ParquetFile(fh)
                schemas[name] = (footer.schema_arrow, footer.metadata.num_rows)
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise PartitionCommitError(
                f"{storage.uri(rel)} is not a parquet file ({type(exc).__name__}): merge-small-files "
                "of a plain directory only merges folders of parquet files (hidden names, starting "
                "with '.' or '_', are skipped); nothing changed"
            ) from None
    return schemas


# -- the protocol ------------------------------------------------------------------------------------
def merge_plain_partition(
    storage: Storage, partition: str, target_bytes: int, *, merge_id: str | None = None
) -> PlainMergeResult:
    """Merge the small parquet files of ``partition`` (a folder under ``storage``'s root) with the
    in-progress -> pending -> finished protocol; pending merges a crash left are rolled forward first."""
    partition = check_partition(partition)
    if target_bytes <= 0:  # before any pending merge is rolled forward: a bad call changes nothing
        raise PartitionCommitConfigError(f"merge-small-files: target size {target_bytes} must be positive")
    check_plain_directory(storage, partition)
    with storage.lock(LOCK_FILE, "partition commit of a plain directory", LOCK_WAIT_SECONDS):
        _check_outer(storage, hudi=False)  # again under the lock: a nested run holds its own by now
        return _merge_locked(storage, partition, target_bytes, merge_id)


def recover_plain_merges(storage: Storage) -> list[str]:
    """Roll every pending merge record of the directory forward (the caller holds the lock)."""
    done = []
    for name, _ in sorted(storage.list(MERGE_DIR)):
        if not name.endswith(".json"):
            continue
        rel = f"{MERGE_DIR}/{name}"
        plan = PlainMergePlan.from_json(storage.read(rel), storage.uri(rel))
        if rel != plan.record:
            raise PartitionCommitError(f"{storage.uri(rel)}: merge record of another merge; nothing changed")
        log.warning(
            "rolling forward merge %s of %s left pending by a crash",
            plan.merge_id,
            storage.uri(plan.partition),
        )
        _finish(storage, plan)
        done.append(plan.merge_id)
    return done


def _merge_locked(
    storage: Storage, partition: str, target_bytes: int, merge_id: str | None
) -> PlainMergeResult:
    if partition:
        _check_inside(storage, [partition])  # a linked folder: merged files would land outside
    _check_no_nested_table(storage, partition)  # before orphans: a nested directory's are its own
    recovered = tuple(recover_plain_merges(storage))
    listing = storage.list(partition)
    # No record names them any more (all were rolled forward): hidden outputs of a run that died
    # before its record existed. Readers never saw them; their inputs are all still in place.
    orphans = tuple(n for n, _ in listing if _ORPHAN.fullmatch(n))
    for name in orphans:
        _delete_in_partition(storage, partition, name)
        log.warning("discarded %s: a merge died before it was pending", storage.uri(_join(partition, name)))
    listing = [(n, s) for n, s in listing if n not in orphans]
    visible = [n for n, _ in listing if not is_hidden(n)]
    footers = _read_footers(storage, partition, visible)  # refuses a folder with non-parquet files
    plan = plan_plain_merge(partition, listing, target_bytes, merge_id or uuid.uuid4().hex)
    if plan is None:
        return PlainMergeResult(partition, recovered=recovered, discarded=orphans)
    first_name = plan.inputs[0][0]
    schema = footers[first_name][0]
    for name, _ in plan.inputs[1:]:
        if not footers[name][0].equals(schema):
            raise PartitionCommitError(
                f"{storage.uri(_join(partition, name))} has another schema than "
                f"{storage.uri(_join(partition, first_name))}; merge-small-files keeps rows exactly "
                "and does not merge files of different schemas; nothing changed"
            )
    # Every file the merge will delete, checked before it writes one: an input linked from outside
    # would otherwise be merged and published, then refused at its delete (rows doubled for good).
    _check_inside(
        storage,
        [_join(partition, n) for n, _ in plan.inputs]
        + [_join(partition, in_progress_name(o)) for o in plan.outputs],
    )
    rows = _write_in_progress(storage, plan, schema, sum(footers[n][1] for n, _ in plan.inputs))
    storage.create(plan.record, plan.to_json())  # pending: from here on the merge rolls forward
    _finish(storage, plan)
    log.info(
        "merged %d small files (%d bytes, %d rows) of %s into %d",
        len(plan.inputs),
        plan.bytes_in,
        rows,
        storage.uri(partition),
        len(plan.outputs),
    )
    return PlainMergeResult(
        partition,
        plan.merge_id,
        tuple(n for n, _ in plan.inputs),
        plan.outputs,
        plan.bytes_in,
        rows,
        recovered,
        orphans,
    )


def _check_inside(storage: Storage, rels: Sequence[str]) -> None:
    """``UnsafePathError`` for the first path that is not the directory's to delete (a link out)."""
    for rel in rels:
        try:
            storage.check_deletable(rel)
        except UnsafePathError as exc:
            raise UnsafePathError(
                f"{exc}: merge-small-files only rewrites files inside {storage.root}; nothing changed"
            ) from None


def _write_in_progress(storage: Storage, plan: PlainMergePlan, schema: Any, total: int) -> int:
    """Stream the inputs, in name order, into the hidden outputs (even row counts); returns the rows."""
    import pyarrow.parquet as pq

    per_file = math.ceil(total / len(plan.outputs)) if total else 0

    def batches() -> Iterator[Any]:
        for name, _ in plan.inputs:
            with storage.open_input(_join(plan.partition, name)) as fh:
                yield from pq.ParquetFile(fh).iter_batches(batch_size=65536)

    source = batches()
    pending: list[Any] = []
    for k, output in enumerate(plan.outputs):
        want = per_file if k < len(plan.outputs) - 1 else total - per_file * k
        with storage.open_output(_join(plan.partition, in_progress_name(output))) as out:
            writer = pq.ParquetWriter(out, schema)
            try:
                while want > 0:
                    batch = pending.pop() if pending else next(source)
                    if batch.num_rows > want:
                        pending.append(batch.slice(want))
                        batch = batch.slice(0, want)
                    writer.write_batch(batch)
                    want -= batch.num_rows
            finally:
                writer.close()
    return total


def _finish(storage: Storage, plan: PlainMergePlan) -> None:
    """Publish the outputs, remove the inputs, then the record; every step may already be done."""
    for output in plan.outputs:
        visible = _join(plan.partition, output)
        hidden = _join(plan.partition, in_progress_name(output))
        if not storage.exists(visible):
            try:
                storage.copy(hidden, visible)
            except ObjectNotFoundError:
                raise PartitionCommitError(
                    f"{storage.uri(plan.record)}: merged file {storage.uri(hidden)} is gone and was never "
                    f"published; its inputs are kept (remove the record to give up the merge)"
                ) from None
        _delete_in_partition(storage, plan.partition, in_progress_name(output))
    for name, _ in plan.inputs:
        _delete_in_partition(storage, plan.partition, name)
    storage.delete(plan.record)


def _delete_in_partition(storage: Storage, partition: str, name: str) -> bool:
    """Delete a file directly in the partition folder, never anything elsewhere."""
    if not _plain_name(name):
        raise UnsafePathError(f"refusing to delete {name!r}: not a file name in {storage.uri(partition)}")
    rel = storage.check_deletable(_join(partition, name))
    folder = rel.rsplit("/", 1)[0] if "/" in rel else ""
    if folder != partition:
        raise UnsafePathError(f"refusing to delete {rel!r}: outside partition {storage.uri(partition)}")
    return storage.delete(rel)
