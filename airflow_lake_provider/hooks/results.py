"""Pieces of the JSON-ready summaries the hooks return (and operators push to XCom)."""

from __future__ import annotations

from typing import Any


def dropped_summary(table: Any) -> dict[str, Any]:
    """``{"metadata_table_dropped": ...}`` when the action dropped Hudi's metadata table, else empty."""
    drop = table.metadata_table_drop
    return {"metadata_table_dropped": drop.to_dict()} if drop is not None else {}
