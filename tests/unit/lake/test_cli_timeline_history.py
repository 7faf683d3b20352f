"""``lake timeline --archived``: on table versions 8 and 9 the instants of the LSM history first
(completed, shown as ARCHIVED), then the active timeline; refused by name on version 6."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from airflow_lake_provider.lake.cli import main
from tests.history_support import archive_oldest
from tests.tree_digest import tree_digest

MOR_V9 = "mor_avro_v9_txns_simple_nometa"
# The first eight instants of that table: requested time, completion time, action.
INSTANTS = [
    ("20260307135827749", "20260307135829538", "deltacommit"),
    ("20260307135830801", "20260307135831753", "deltacommit"),
    ("20260307135832616", "20260307135833037", "deltacommit"),
    ("20260307135833781", "20260307135834136", "deltacommit"),
    ("20260307135834808", "20260307135835085", "deltacommit"),
    ("20260307135835748", "20260307135836076", "deltacommit"),
    ("20260307135836605", "20260307135836829", "deltacommit"),
    ("20260307135837782", "20260307135838045", "replacecommit"),
]


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_timeline_archived_lists_the_history_then_the_active_timeline(
    hudi_table_zip: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    path = hudi_table_zip(MOR_V9)
    assert archive_oldest(path, 3) == [t for t, _, _ in INSTANTS[:3]]
    code, out, err = _run(capsys, "timeline", str(path), "--archived")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[:4] == [
        "20260307135827749  20260307135829538  deltacommit    ARCHIVED",
        "20260307135830801  20260307135831753  deltacommit    ARCHIVED",
        "20260307135832616  20260307135833037  deltacommit    ARCHIVED",
        "20260307135833781  20260307135834136  deltacommit    COMPLETED",
    ]
    assert len(lines) == 13
    # Without the flag: the active timeline only, as before.
    assert _run(capsys, "timeline", str(path))[1].splitlines() == lines[3:]


def test_timeline_archived_json_and_verbose_read_the_archived_metadata(
    hudi_table_zip: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """``-v`` of an archived instant shows what it showed while active (its metadata, now read
    from the history)."""
    path = hudi_table_zip(MOR_V9)
    code, active, _ = _run(capsys, "-v", "timeline", str(path))
    assert code == 0
    archive_oldest(path, 2)
    code, out, _ = _run(capsys, "timeline", str(path), "--archived", "--json")
    assert code == 0
    rows = json.loads(out)
    assert rows[:3] == [
        {"time": t, "action": a, "state": "COMPLETED", "completion_time": c, "archived": n < 2}
        for n, (t, c, a) in enumerate(INSTANTS[:3])
    ]
    code, out, _ = _run(capsys, "-v", "timeline", str(path), "--archived")
    assert code == 0
    expected = active.splitlines()
    expected[:2] = [line.replace("COMPLETED", "ARCHIVED ", 1) for line in expected[:2]]
    assert out.splitlines() == expected
    assert expected[0] == (
        "20260307135827749  20260307135829538  deltacommit    ARCHIVED  INSERT         written=8 updated=0 "
        "deleted=0 files_added=3 files_removed=0"
    )


def test_timeline_archived_on_a_v6_table_is_refused_naming_it(
    hudi_table_zip: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    path = hudi_table_zip("cow_v6_nonpartitioned")
    before = tree_digest(path)
    code, out, err = _run(capsys, "timeline", str(path), "--archived")
    assert (code, out) == (1, "")
    assert err == (
        f"lake: error: {path}: --archived lists the LSM history of table versions 8 and 9; this table "
        "is version 6, whose archived timeline (.hoodie/archived/) is not listed\n"
    )
    assert tree_digest(path) == before


def test_lake_timeline_without_archived_does_not_even_load_the_history_reader(
    hudi_table_zip: Callable[[str], Path],
) -> None:
    from tests.unit.lake.test_cli_imports import _loaded

    path = hudi_table_zip(MOR_V9)
    archive_oldest(path, 3)
    reader = "airflow_lake_provider.lake.timeline.history.reader"
    code, loaded = _loaded("timeline", str(path))
    assert code == 0 and reader not in loaded
    code, loaded = _loaded("timeline", str(path), "--archived")
    assert code == 0 and reader in loaded
