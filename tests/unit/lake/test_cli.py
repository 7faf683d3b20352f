"""The ``lake`` CLI: exact outputs; errors exit 1 with one stderr line and change nothing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hudi import HudiTableBuilder

from airflow_lake_provider.lake.cli import main
from airflow_lake_provider.lake.table.table import LakeTable

REPO_ROOT = Path(__file__).resolve().parents[3]
INSTANT_RE = re.compile(r"^[0-9]{17}$")


def _tree(path: Path) -> dict[str, int]:
    out = {}
    for dirpath, dirs, files in os.walk(path):
        for d in dirs:
            out[os.path.relpath(os.path.join(dirpath, d), path) + "/"] = -1
        for f in files:
            p = os.path.join(dirpath, f)
            out[os.path.relpath(p, path)] = os.path.getsize(p)
    return out


def _parquet(path: Path, rows: list[tuple[int, int, str, str]]) -> Path:
    pq.write_table(
        pa.table(
            {
                "id": pa.array([r[0] for r in rows], pa.int64()),
                "ts": pa.array([r[1] for r in rows], pa.int64()),
                "city": pa.array([r[2] for r in rows]),
                "v": pa.array([r[3] for r in rows]),
            }
        ),
        path,
    )
    return path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _data_rows(table: pa.Table) -> list[tuple]:
    return sorted(tuple(r.values()) for r in table.select(["id", "ts", "city", "v"]).to_pylist())


def _init(capsys: pytest.CaptureFixture[str], path: Path, kind: str = "cow") -> None:
    code, out, err = _run(
        capsys,
        "init",
        str(path),
        "--table-type",
        kind,
        "--name",
        "orders",
        "--record-key",
        "id",
        "--precombine",
        "ts",
        "--partition-fields",
        "city",
        "--hive-style",
    )
    assert (code, err) == (0, "")
    expected_type = "COPY_ON_WRITE" if kind == "cow" else "MERGE_ON_READ"
    assert out == f"created {expected_type} table orders at {path}\n"


def _error_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("lake: error: ")
    return lines[0]


# -- happy path -----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_cli_init_write_read_timeline_exact_outputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    table = tmp_path / "orders"
    _init(capsys, table, kind)
    props = (table / ".hoodie" / "hoodie.properties").read_text()
    assert "hoodie.table.partition.fields=city\n" in props
    assert "hoodie.datasource.write.hive_style_partitioning=true\n" in props
    assert "hoodie.table.recordkey.fields=id\n" in props
    assert "hoodie.table.precombine.field=ts\n" in props

    first = _parquet(
        tmp_path / "in1.parquet", [(1, 10, "a", "one"), (2, 10, "b", "two"), (3, 10, "a", "three")]
    )
    code, out, err = _run(capsys, "write", str(table), "--input", str(first), "--operation", "insert")
    assert (code, err) == (0, "")
    t1 = out.strip()
    assert out == f"{t1}\n" and INSTANT_RE.match(t1)

    second = _parquet(
        tmp_path / "in2.parquet", [(1, 20, "a", "one-v2"), (2, 5, "b", "stale"), (4, 1, "b", "four")]
    )
    code, out, err = _run(capsys, "write", str(table), "--input", str(second), "--operation", "upsert")
    assert (code, err) == (0, "")
    t2 = out.strip()
    assert out == f"{t2}\n" and t2 > t1

    gone = _parquet(tmp_path / "in3.parquet", [(3, 10, "a", "")])
    code, out, err = _run(capsys, "write", str(table), "--input", str(gone), "--operation", "delete")
    assert (code, err) == (0, "")
    t3 = out.strip()
    assert t3 > t2

    result = tmp_path / "out.parquet"
    code, out, err = _run(capsys, "read", str(table), "--output", str(result))
    assert (code, out, err) == (0, f"3 rows -> {result}\n", "")
    snapshot = pq.read_table(result)
    expected = [(1, 20, "a", "one-v2"), (2, 10, "b", "two"), (4, 1, "b", "four")]
    assert _data_rows(snapshot) == expected
    assert snapshot.column_names == [
        "_hoodie_commit_time",
        "_hoodie_commit_seqno",
        "_hoodie_record_key",
        "_hoodie_partition_path",
        "_hoodie_file_name",
        "id",
        "ts",
        "city",
        "v",
    ]
    assert (
        _data_rows(pa.Table.from_batches(HudiTableBuilder.from_base_uri(str(table)).build().read()))
        == expected
    )
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]

    old = tmp_path / "old.parquet"
    code, out, err = _run(capsys, "read", str(table), "--output", str(old), "--as-of", t1)
    assert (code, out, err) == (0, f"3 rows -> {old}\n", "")
    assert _data_rows(pq.read_table(old)) == [(1, 10, "a", "one"), (2, 10, "b", "two"), (3, 10, "a", "three")]

    action = "commit" if kind == "cow" else "deltacommit"
    code, out, err = _run(capsys, "timeline", str(table))
    assert (code, err) == (0, "")
    assert out == "".join(f"{t}  {action:<14} COMPLETED\n" for t in (t1, t2, t3))

    code, out, err = _run(capsys, "timeline", str(table), "--json")
    assert (code, err) == (0, "")
    assert json.loads(out) == [{"time": t, "action": action, "state": "COMPLETED"} for t in (t1, t2, t3)]


def test_cli_timeline_shows_pending_and_empty_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = tmp_path / "t"
    _init(capsys, table, "mor")
    code, out, err = _run(capsys, "timeline", str(table), "--json")
    assert (code, out, err) == (0, "[]\n", "")
    result = tmp_path / "empty.parquet"
    code, out, err = _run(capsys, "read", str(table), "--output", str(result))
    assert (code, out, err) == (0, f"0 rows -> {result}\n", "")
    assert pq.read_table(result).num_rows == 0
    (table / ".hoodie" / "20250101000000000.deltacommit.requested").write_bytes(b"")
    (table / ".hoodie" / "20250101000000000.deltacommit.inflight").write_bytes(b"")
    (table / ".hoodie" / "20250102000000000.compaction.requested").write_bytes(b"")
    code, out, err = _run(capsys, "timeline", str(table))
    assert (code, err) == (0, "")
    assert out == (
        "20250101000000000  deltacommit    INFLIGHT\n20250102000000000  compaction     REQUESTED\n"
    )
    code, out, err = _run(capsys, "timeline", str(table), "--json")
    assert json.loads(out) == [
        {"time": "20250101000000000", "action": "deltacommit", "state": "INFLIGHT"},
        {"time": "20250102000000000", "action": "compaction", "state": "REQUESTED"},
    ]


# -- errors ---------------------------------------------------------------------------------------
def test_cli_init_existing_table_exit_1_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = tmp_path / "t"
    _init(capsys, table)
    before = _tree(tmp_path)
    code, out, err = _run(
        capsys,
        "init",
        str(table),
        "--table-type",
        "mor",
        "--name",
        "other",
        "--record-key",
        "k",
        "--precombine",
        "ts",
    )
    assert (code, out) == (1, "")
    assert _error_line(err) == f"lake: error: {table} already holds a table ({table / '.hoodie'} exists)"
    assert _tree(tmp_path) == before


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--name", "bad/name", "--record-key", "id", "--precombine", "ts"], "'bad/name'"),
        (["--name", "t", "--record-key", "id", "--precombine", "id"], "precombine field 'id'"),
    ],
)
def test_cli_init_invalid_config_exit_1_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    table = tmp_path / "t"
    code, out, err = _run(capsys, "init", str(table), "--table-type", "cow", *extra)
    assert (code, out) == (1, "")
    assert message in _error_line(err)
    assert not table.exists()


@pytest.mark.parametrize(
    ("drop", "column"),
    [("id", "id"), ("ts", "ts"), ("city", "city")],
)
def test_cli_write_parquet_missing_column_exit_1_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], drop: str, column: str
) -> None:
    table = tmp_path / "t"
    _init(capsys, table)
    ok = _parquet(tmp_path / "ok.parquet", [(1, 10, "a", "one")])
    assert _run(capsys, "write", str(table), "--input", str(ok), "--operation", "insert")[0] == 0
    bad = tmp_path / "bad.parquet"
    pq.write_table(pq.read_table(ok).drop_columns([drop]), bad)
    before = _tree(table)
    code, out, err = _run(capsys, "write", str(table), "--input", str(bad), "--operation", "upsert")
    assert (code, out) == (1, "")
    line = _error_line(err)
    assert f"['{column}']" in line and "missing required column" in line
    assert _tree(table) == before


def test_cli_write_type_mismatch_exit_1_names_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = tmp_path / "t"
    _init(capsys, table)
    ok = _parquet(tmp_path / "ok.parquet", [(1, 10, "a", "one")])
    assert _run(capsys, "write", str(table), "--input", str(ok), "--operation", "insert")[0] == 0
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"id": [2], "ts": ["late"], "city": ["a"], "v": ["x"]}), bad)
    before = _tree(table)
    code, out, err = _run(capsys, "write", str(table), "--input", str(bad), "--operation", "upsert")
    assert (code, out) == (1, "")
    assert _error_line(err) == "lake: error: column 'ts' has type string, the table stores int64"
    assert _tree(table) == before


def test_cli_write_missing_input_file_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table = tmp_path / "t"
    _init(capsys, table)
    before = _tree(table)
    missing = tmp_path / "nope.parquet"
    code, out, err = _run(capsys, "write", str(table), "--input", str(missing), "--operation", "insert")
    assert (code, out) == (1, "")
    assert str(missing) in _error_line(err)
    assert _tree(table) == before


@pytest.mark.parametrize("command", ["read", "write", "timeline"])
def test_cli_non_table_path_exit_1_names_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    target = tmp_path / "not-a-table"
    target.mkdir()
    inp = _parquet(tmp_path / "in.parquet", [(1, 10, "a", "one")])
    extra = {
        "read": ["--output", str(tmp_path / "o.parquet")],
        "write": ["--input", str(inp), "--operation", "insert"],
        "timeline": [],
    }[command]
    before = _tree(tmp_path)
    code, out, err = _run(capsys, command, str(target), *extra)
    assert (code, out) == (1, "")
    assert _error_line(err) == (
        f"lake: error: {target} is not a Hudi table: "
        f"{target / '.hoodie' / 'hoodie.properties'} does not exist"
    )
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("as_of", ["2025", "20251301000000000", "202501010000000", "latest"])
def test_cli_read_malformed_as_of_exit_1_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], as_of: str
) -> None:
    table = tmp_path / "t"
    _init(capsys, table)
    ok = _parquet(tmp_path / "ok.parquet", [(1, 10, "a", "one")])
    assert _run(capsys, "write", str(table), "--input", str(ok), "--operation", "insert")[0] == 0
    before = _tree(tmp_path)
    code, out, err = _run(
        capsys, "read", str(table), "--output", str(tmp_path / "o.parquet"), "--as-of", as_of
    )
    assert (code, out) == (1, "")
    assert f"instant time '{as_of}'" in _error_line(err)
    assert _tree(tmp_path) == before


def test_cli_unsupported_table_version_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table = tmp_path / "t"
    _init(capsys, table)
    props = table / ".hoodie" / "hoodie.properties"
    props.write_text(props.read_text().replace("hoodie.table.version=6\n", "hoodie.table.version=7\n"))
    before = _tree(tmp_path)
    code, out, err = _run(capsys, "timeline", str(table))
    assert (code, out) == (1, "")
    assert _error_line(err) == (
        f"lake: error: {props}: hoodie.table.version=7 is not supported (only table versions 6, 8 and 9)"
    )
    assert _tree(tmp_path) == before


# -- a real process -------------------------------------------------------------------------------
def _lake(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "airflow_lake_provider.lake.cli", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def test_cli_subprocess_end_to_end_and_error(tmp_path: Path) -> None:
    table = tmp_path / "orders"
    done = _lake(
        "init",
        str(table),
        "--table-type",
        "mor",
        "--name",
        "orders",
        "--record-key",
        "id",
        "--precombine",
        "ts",
        "--partition-fields",
        "city",
    )
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        f"created MERGE_ON_READ table orders at {table}\n",
        "",
    )

    inp = _parquet(tmp_path / "in.parquet", [(1, 10, "a", "one"), (2, 10, "b", "two")])
    done = _lake("write", str(table), "--input", str(inp), "--operation", "insert")
    assert (done.returncode, done.stderr) == (0, "")
    t1 = done.stdout.strip()
    assert INSTANT_RE.match(t1) and done.stdout == f"{t1}\n"
    upd = _parquet(tmp_path / "upd.parquet", [(2, 11, "b", "two-v2")])
    done = _lake("write", str(table), "--input", str(upd), "--operation", "upsert")
    assert (done.returncode, done.stderr) == (0, "")
    t2 = done.stdout.strip()
    assert t2 > t1
    assert LakeTable.open(table).config.is_mor

    out = tmp_path / "out.parquet"
    done = _lake("read", str(table), "--output", str(out))
    assert (done.returncode, done.stdout, done.stderr) == (0, f"2 rows -> {out}\n", "")
    assert _data_rows(pq.read_table(out)) == [(1, 10, "a", "one"), (2, 11, "b", "two-v2")]

    done = _lake("timeline", str(table), "--json")
    assert (done.returncode, done.stderr) == (0, "")
    assert json.loads(done.stdout) == [
        {"time": t, "action": "deltacommit", "state": "COMPLETED"} for t in (t1, t2)
    ]

    before = _tree(tmp_path)
    done = _lake("read", str(tmp_path / "missing"), "--output", str(tmp_path / "x.parquet"))
    assert (done.returncode, done.stdout) == (1, "")
    assert _error_line(done.stderr) == (
        f"lake: error: {tmp_path / 'missing'} is not a Hudi table: "
        f"{tmp_path / 'missing' / '.hoodie' / 'hoodie.properties'} does not exist"
    )
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"ts": [1], "city": ["a"], "v": ["x"]}), bad)
    done = _lake("write", str(table), "--input", str(bad), "--operation", "upsert")
    assert (done.returncode, done.stdout) == (1, "")
    assert "['id']" in _error_line(done.stderr)
    assert _tree(tmp_path) == {**before, "bad.parquet": bad.stat().st_size}


def test_cli_bad_input_and_output_files_name_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = tmp_path / "t"
    _init(capsys, table)
    before = _tree(table)
    garbage = tmp_path / "garbage.parquet"
    garbage.write_bytes(b"not parquet at all")
    code, out, err = _run(capsys, "write", str(table), "--input", str(garbage), "--operation", "insert")
    assert (code, out) == (1, "")
    assert f"input file {garbage} is not a readable parquet file" in _error_line(err)
    (tmp_path / "adir").mkdir()
    for output, message in (
        (str(tmp_path / "adir"), f"{tmp_path / 'adir'} is a folder, not a file"),
        ("", "'' does not name a file"),
        (f"{tmp_path}/", f"'{tmp_path}/' does not name a file"),
    ):
        code, out, err = _run(capsys, "read", str(table), "--output", output)
        assert (code, out) == (1, "")
        assert message in _error_line(err)
    assert _tree(table) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir", "garbage.parquet", "t"]


def test_cli_pending_clean_finishes_through_a_link_to_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    real = tmp_path / "real"
    _init(capsys, real)
    for ts in (1, 2, 3):
        src = _parquet(tmp_path / f"in{ts}.parquet", [(1, ts, "sf", f"v{ts}")])
        assert _run(capsys, "write", str(real), "--input", str(src), "--operation", "upsert")[0] == 0
    from airflow_lake_provider.lake.services.clean.executor import run_clean

    planned = run_clean(LakeTable.open(real), {"hoodie.cleaner.commits.retained": "1"}, mode="schedule")
    assert planned.plan.file_count == 1
    (tmp_path / "link").symlink_to(real)
    code, out, err = _run(capsys, "clean", str(tmp_path / "link"), "--retained", "1")
    assert (code, err) == (0, "")
    assert json.loads(out)["deleted_files"] == 1


def test_cli_clean_retained_counts_for_the_policy_in_hoodie_properties(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/cli.md: --retained N sets the count the policy retains, the table's policy included."""
    table = tmp_path / "t"
    _init(capsys, table)
    for ts in (1, 2, 3):
        src = _parquet(tmp_path / f"in{ts}.parquet", [(1, ts, "sf", f"v{ts}")])
        assert _run(capsys, "write", str(table), "--input", str(src), "--operation", "upsert")[0] == 0
    props = table / ".hoodie" / "hoodie.properties"
    props.write_text(props.read_text() + "hoodie.cleaner.policy=KEEP_LATEST_FILE_VERSIONS\n")
    versions = sorted(table.rglob("*.parquet"), key=lambda p: p.stem.rsplit("_", 1)[-1])
    code, out, err = _run(capsys, "clean", str(table), "--retained", "1", "--dry-run", "--list-files")
    assert (code, err) == (0, "")
    result = json.loads(out)
    assert (result["policy"], result["outcome"]) == ("KEEP_LATEST_FILE_VERSIONS", "PLANNED")
    planned = sorted(str(table / f) for files in result["files"].values() for f in files)
    assert planned == sorted(str(p) for p in versions[:2])  # only the newest version is kept


def test_cli_refuses_a_bucket_with_no_key_as_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = tmp_path / "t"
    _init(capsys, table)
    code, out, err = _run(capsys, "read", str(table), "--output", "s3://bkt")
    assert (code, out) == (1, "")
    assert "'s3://bkt' does not name a file" in _error_line(err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t"]


def test_cli_help_names_every_table_version_as_writable(capsys: pytest.CaptureFixture[str]) -> None:
    """Every service writes v6, v8 and v9 tables: the top-level help must not call 8 and 9 read only."""
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert "Apache Hudi tables from Python (table versions 6, 8 and 9)." in " ".join(out.split())
    assert "read only" not in out
