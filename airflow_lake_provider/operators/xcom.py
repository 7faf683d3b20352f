"""Bounded XCom summaries: what an operator returns stays small however large the plan was.

XCom values live in Airflow's metadata database and are pulled whole by every downstream task: a
compaction plan listed in full is 1.7 KB for 3 file groups and megabytes for thousands. The operators
push their counts, instant and outcome as they are, and every list or map of names cut to
``XCOM_NAMES`` entries, the cut marked ``"... and N more"``. The full plan stays on the table's
timeline (``lake show``) and the task log prints its table.

Light to import: plain Python over the JSON summaries the hooks return.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Names kept per list or map of a summary; lists inside their entries keep fewer.
XCOM_NAMES = 10
XCOM_NESTED_NAMES = 3
MORE_KEY = "..."


def more(count: int) -> str:
    """The marker of a cut: how many entries were left out."""
    return f"... and {count} more"


def capped(value: Any, limit: int = XCOM_NAMES) -> Any:
    """``value`` (one entry of a summary) with its list or map of names cut to ``limit`` entries.

    A cut list ends with ``"... and N more"``; a cut map (partition -> details) gets the entry
    ``"...": "... and N more"``. What the kept entries hold is kept field by field, with their own
    lists cut to ``XCOM_NESTED_NAMES``. Scalars are kept as they are.
    """
    if isinstance(value, Mapping):
        items = list(value.items())
        kept: dict[str, Any] = {str(k): _inner(v) for k, v in items[:limit]}
        if len(items) > limit:
            kept[MORE_KEY] = more(len(items) - limit)
        return kept
    if isinstance(value, list | tuple):
        out = [_inner(v) for v in value[:limit]]
        if len(value) > limit:
            out.append(more(len(value) - limit))
        return out
    return value


def _inner(value: Any) -> Any:
    """An entry of a capped list or map: a record keeps every field, a list is cut shorter."""
    if isinstance(value, Mapping):
        return {str(k): _inner(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return capped(value, XCOM_NESTED_NAMES)
    return value


def xcom_summary(result: Mapping[str, Any]) -> dict[str, Any]:
    """An operator's XCom value: ``result``'s keys, each list or map of names capped (see ``capped``)."""
    return {str(k): capped(v) for k, v in result.items()}


def compaction_plan_summary(plan: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A compaction plan for XCom: its counts and its file groups as ``partition/file id`` names."""
    if plan is None:
        return None
    groups = [
        f"{g['partition']}/{g['file_id']}" if g.get("partition") else str(g["file_id"])
        for g in plan.get("file_groups") or ()
    ]
    return {**{k: v for k, v in plan.items() if k != "file_groups"}, "file_groups": capped(groups)}
