"""Plan and result summaries as text tables for task logs (XCom gets the same data as JSON).

Light to import: plain Python over the JSON summaries the hooks return.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from typing import Any


def text_table(
    header: Sequence[str], rows: Sequence[Sequence[Any]], total: Sequence[Any] | None = None
) -> str:
    """Rows under a header, columns padded; the first column left-aligned, the others right-aligned."""
    cells = [[str(c) for c in header], *([str(c) for c in r] for r in rows)]
    if total is not None:
        cells.append([str(c) for c in total])
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]

    def line(row: Sequence[str]) -> str:
        return " | ".join(
            f"{c:<{w}}" if i == 0 else f"{c:>{w}}" for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()

    rule = "-+-".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule, *(line(r) for r in cells[1:])])


def clean_table(partitions: Mapping[str, Mapping[str, int]]) -> str:
    """A clean plan: ``partition | files | bytes`` and a total."""
    rows = [(p or "<root>", v.get("files", 0), v.get("bytes", 0)) for p, v in partitions.items()]
    total = (
        "total",
        sum(v.get("files", 0) for v in partitions.values()),
        sum(v.get("bytes", 0) for v in partitions.values()),
    )
    return text_table(("partition", "files", "bytes"), rows, total)


def compaction_plan_table(partitions: Mapping[str, Mapping[str, Any]]) -> str:
    """A compaction plan: ``partition | file groups | log files | IO MB`` and a total."""
    rows = [
        (p or "<root>", v["file_groups"], v["log_files"], f"{v['io_mb']:.3f}") for p, v in partitions.items()
    ]
    total = (
        "total",
        sum(v["file_groups"] for v in partitions.values()),
        sum(v["log_files"] for v in partitions.values()),
        f"{sum(v['io_mb'] for v in partitions.values()):.3f}",
    )
    return text_table(("partition", "file groups", "log files", "IO MB"), rows, total)


def compaction_files_table(files: Sequence[str]) -> str:
    """Base files a compaction wrote, counted per partition."""
    counts: dict[str, int] = {}
    for path in files:
        part = posixpath.dirname(path)
        counts[part] = counts.get(part, 0) + 1
    rows = [(p or "<root>", n) for p, n in sorted(counts.items())]
    return text_table(("partition", "base files written"), rows, ("total", len(files)))


def partition_commit_table(result: Mapping[str, Any]) -> str:
    """Each asked partition: what the commit decided and why (committed, waiting, missing...)."""
    committed = set(result.get("committed") or ())
    late = result.get("late_data") or {}
    rows = []
    for partition, entry in (result.get("partitions") or {}).items():
        status = "committed now" if partition in committed else str(entry.get("decision", "")).lower()
        rows.append(
            (
                partition or "<root>",
                status,
                entry.get("writes", 0),
                entry.get("partition_time") or "",
                "late data" if partition in late else (entry.get("reason") or ""),
            )
        )
    return text_table(("partition", "status", "writes", "partition time", "note"), rows)


def rollback_table(rollbacks: Sequence[Mapping[str, Any]]) -> str:
    """Each rollback: its instant, the instant rolled back and its action, files deleted, resumed."""
    rows = [
        (
            r["instant"],
            r["rolled_back"],
            r["action"],
            len(r.get("deleted") or ()),
            "yes" if r.get("resumed") else "",
        )
        for r in rollbacks
    ]
    return text_table(("rollback", "rolled back", "action", "files deleted", "resumed"), rows)


def archival_line(summary: Mapping[str, Any]) -> str:
    """An archival summary as one readable sentence (the XCom keeps the dict)."""
    if summary.get("outcome") != "ARCHIVED":
        reason = summary.get("reason")
        return f"{summary.get('outcome')}" + (f" ({reason})" if reason else "")
    actions = ", ".join(f"{n} {a}" for a, n in sorted((summary.get("actions") or {}).items()))
    line = (
        f"ARCHIVED {summary.get('archived_instants')} instants {summary.get('first_archived')}.."
        f"{summary.get('last_archived')}"
        + (f" ({actions})" if actions else "")
        + f" into {summary.get('archive_file')}; active timeline starts at "
        f"{summary.get('active_timeline_starts_at')}"
    )
    if summary.get("limited_by"):
        line += f"; limited by {summary['limited_by']}"
    return line + f" in {summary.get('duration_seconds')} s"
