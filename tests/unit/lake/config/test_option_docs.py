"""The option tables of README.md and docs/*.md against the registry: every documented option exists
with the same aliases and default, and every registered option is documented.

An option table is a markdown table whose header's first cell is ``Option``. Its rows are rendered
by :func:`row`; print the expected table with ``python tests/unit/lake/config/test_option_docs.py``.
"""

from __future__ import annotations

import datetime as dt
import re
from enum import Enum
from pathlib import Path

from airflow_lake_provider.lake.config import OPTIONS, Option
from airflow_lake_provider.lake.errors import ConfigError

ROOT = Path(__file__).resolve().parents[4]
HEADER = "| Option | Also accepted | Default | Meaning |"


def _default(value: object) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dt.timedelta):
        return f"{value.total_seconds():g} s"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def row(option: Option) -> str:
    also = [f"`{n}`" for n in option.aliases] + [f"`{n}` (Flink)" for n in option.flink]
    return f"| `{option.key}` | {', '.join(also) or '-'} | `{_default(option.default)}` | {option.doc} |"


def table() -> str:
    return "\n".join([HEADER, "|---|---|---|---|", *(row(o) for o in OPTIONS)])


def _documented_rows() -> dict[str, str]:
    """Option key -> its documented row, from every option table of README.md and docs/**/*.md."""
    rows: dict[str, str] = {}
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for path in files:
        in_table = False
        for line in path.read_text("utf-8").splitlines():
            if line.startswith("| Option |"):
                in_table = True
                continue
            if not line.startswith("|"):
                in_table = False
            elif in_table and not line.startswith("|---"):
                key = re.match(r"\| `([^`]+)` \|", line)
                assert key, f"{path.name}: option row without a `key`: {line}"
                assert key.group(1) not in rows, f"{key.group(1)} is documented twice"
                rows[key.group(1)] = line
    return rows


def test_every_documented_option_is_registered_with_its_aliases_and_default() -> None:
    expected = {o.key: row(o) for o in OPTIONS}
    documented = _documented_rows()
    assert {k: v for k, v in documented.items() if expected.get(k) != v} == {}


def test_every_registered_option_is_documented() -> None:
    assert sorted({o.key for o in OPTIONS} - set(_documented_rows())) == []


def _service_rows() -> list[tuple[str, str, str]]:
    """(file, key, default cell) of every row of the services' ``| Key | Default |`` tables in docs/."""
    rows = []
    for path in sorted((ROOT / "docs").rglob("*.md")):
        in_table = False
        for line in path.read_text("utf-8").splitlines():
            if line.startswith("| Key | Default |"):
                in_table = True
                continue
            if not line.startswith("|"):
                in_table = False
            elif in_table and not line.startswith("|---"):
                cells = [c.strip() for c in line.strip("|").split("|")]
                rows.append((path.name, cells[0].strip("`"), cells[1].strip("`")))
    return rows


def test_the_services_tables_name_registered_options_with_their_defaults() -> None:
    by_name = {n: o for o in OPTIONS for n in (o.key, *o.aliases, *o.flink)}
    rows = _service_rows()
    assert len(rows) > 30  # the clean, rollback, compaction, archival, partition-commit, write tables
    wrong = [(f, k, d) for f, k, d in rows if k not in by_name or not _same_default(d, by_name[k])]
    assert wrong == []


def _same_default(cell: str, option: Option) -> bool:
    """A services table may show a default shorter than the registry's: a class's simple name, 1e-09
    as 0.000000001, 134217728 bytes as 128mb."""
    expected = _default(option.default).replace("(none)", "none")
    if cell == expected or expected.endswith("." + cell):
        return True
    try:
        return option.parse(option.key, cell, option.error) == option.default
    except ConfigError:
        return False


if __name__ == "__main__":
    print(table())
