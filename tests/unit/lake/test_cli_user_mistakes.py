"""A new user's mistakes with the ``lake`` CLI: refused by name before anything is written, dry runs
that leave the table byte-identical, a closed pipe, ``--version``, and the reports' exact keys."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from metadata_table_support import add_metadata_table
from tree_digest import tree_digest

from airflow_lake_provider.lake.cli import main
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write

REPO_ROOT = Path(__file__).resolve().parents[3]


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _batch(keys: list[str], ts: int) -> pa.Table:
    return pa.table(
        {
            "uuid": keys,
            "ts": pa.array([ts] * len(keys), pa.int64()),
            "city": ["chennai" if int(k[1:]) % 2 else "sf" for k in keys],
        }
    )


def _table(path: Path, kind: str = "mor", writes: int = 3) -> LakeTable:
    """A hive-style table partitioned by city with ``writes`` upserts of the same 4 keys."""
    table = LakeTable.create(
        path,
        name="trips",
        table_type=kind,
        record_key_fields=("uuid",),
        precombine_field="ts",
        partition_fields=("city",),
        hive_style=True,
    )
    for ts in range(1, writes + 1):
        write(table, _batch(["k1", "k2", "k3", "k4"], ts), "upsert")
    return table


def _hudi_written(path: Path, kind: str = "mor") -> LakeTable:
    """As a Hudi writer leaves a table: none of our lock files under .hoodie/.aux/."""
    table = _table(path, kind)
    for lock in (path / ".hoodie" / ".aux").glob(".lake-*.lock"):
        lock.unlink()
    return table


# -- 1. lake read --output inside the table -----------------------------------------------------
@pytest.mark.parametrize(
    "output",
    [
        ".hoodie/hoodie.properties",  # would replace the table's config with parquet
        "city=chennai/x.parquet",  # would add a foreign parquet file to a partition
        "new-folder/x.parquet",
        "city=sf/../city=chennai/y.parquet",
    ],
)
def test_read_refuses_an_output_inside_the_table_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], output: str
) -> None:
    base = tmp_path / "t"
    _table(base)
    before = tree_digest(tmp_path)
    code, out, err = _run(capsys, "read", str(base), "--output", f"{base}/{output}")
    target = os.path.normpath(f"{base}/{output}")
    assert (code, out) == (1, "")
    assert err == f"lake: error: output {target} is inside the table {base}: write it outside the table\n"
    assert tree_digest(tmp_path) == before


def test_read_refuses_an_output_reached_through_a_link_into_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = tmp_path / "t"
    _table(base)
    (tmp_path / "link").symlink_to(base / "city=sf")
    before = tree_digest(base)
    code, out, err = _run(capsys, "read", str(base), "--output", str(tmp_path / "link" / "x.parquet"))
    assert (code, out) == (1, "")
    assert err == (
        f"lake: error: output {base}/city=sf/x.parquet is inside the table {base}: "
        "write it outside the table\n"
    )
    assert tree_digest(base) == before


def test_read_beside_the_table_and_into_new_folders_still_works(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = tmp_path / "t"
    _table(base, writes=1)
    for output in (tmp_path / "t-snapshot.parquet", tmp_path / "new" / "dir" / "x.parquet"):
        code, out, err = _run(capsys, "read", str(base), "--output", str(output))
        assert (code, out, err) == (0, f"4 rows -> {output}\n", "")
        assert sorted(pq.read_table(output).column("uuid").to_pylist()) == ["k1", "k2", "k3", "k4"]


# -- 2. dry runs write nothing ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kind", "argv"),
    [
        ("mor", ["compact", "{t}", "--mode", "schedule", "--force", "--dry-run"]),
        ("mor", ["compact", "{t}", "--mode", "run", "--force", "--dry-run"]),
        ("cow", ["clean", "{t}", "--retained", "1", "--dry-run"]),
    ],
)
def test_dry_runs_leave_a_hudi_written_table_byte_identical(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, argv: list[str]
) -> None:
    base = tmp_path / "t"
    _hudi_written(base, kind)
    before = tree_digest(base)
    code, out, err = _run(capsys, *(a.format(t=base) for a in argv))
    assert (code, err) == (0, "")
    assert json.loads(out)["outcome"] == "PLANNED"
    assert tree_digest(base) == before


def test_an_execute_dry_run_of_a_pending_plan_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = tmp_path / "t"
    _hudi_written(base)
    code, out, _ = _run(capsys, "compact", str(base), "--mode", "schedule", "--force")
    c = json.loads(out)["schedule"]["instant"]
    for lock in (base / ".hoodie" / ".aux").glob(".lake-*.lock"):
        lock.unlink()
    before = tree_digest(base)
    code, out, err = _run(capsys, "compact", str(base), "--mode", "execute", "--dry-run")
    assert (code, err) == (0, "")
    assert (json.loads(out)["outcome"], json.loads(out)["execute"]["instant"]) == ("PLANNED", c)
    assert tree_digest(base) == before


# -- 3. lake init mistakes --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--record-key", "uuid,uuid"], "record key field(s) uuid given more than once"),
        (
            ["--record-key", "uuid", "--partition-fields", "city,city"],
            "partition field(s) city given more than once",
        ),
        (
            ["--record-key", "uuid,ts2,uuid,ts2", "--partition-fields", "a,b"],
            "record key field(s) ts2, uuid given more than once",
        ),
    ],
)
def test_init_refuses_a_repeated_field_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    argv = ["init", str(tmp_path / "n4"), "--table-type", "cow", "--name", "n4", "--precombine", "ts"]
    code, out, err = _run(capsys, *argv, *flags)
    assert (code, out, err) == (1, "", f"lake: error: {message}\n")
    assert list(tmp_path.iterdir()) == []


def test_init_on_an_existing_file_names_it_and_leaves_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trips = tmp_path / "trips.parquet"
    pq.write_table(_batch(["k1"], 1), trips)
    before = tree_digest(tmp_path)
    argv = ["init", str(trips), "--table-type", "cow", "--name", "t", "--record-key", "uuid"]
    code, out, err = _run(capsys, *argv, "--precombine", "ts")
    assert (code, out) == (1, "")
    assert err == f"lake: error: {trips} is a file: a table needs a folder (or a new path)\n"
    assert tree_digest(tmp_path) == before


# -- 4. a closed pipe -------------------------------------------------------------------------------
def _lake(*argv: str, **streams: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "airflow_lake_provider.lake.cli", *argv],
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        timeout=120,
        check=False,
        **(streams or {"capture_output": True}),  # type: ignore[arg-type]
    )


def test_a_reader_that_closes_the_pipe_stops_the_command_quietly(tmp_path: Path) -> None:
    base = tmp_path / "t"
    _table(base, writes=1)
    # `true` exits without reading: the output (flushed at the end) meets a closed pipe.
    reader = subprocess.Popen(["true"], stdin=subprocess.PIPE)
    reader.wait()
    lake = _lake("timeline", str(base), "--json", stdout=reader.stdin, stderr=subprocess.PIPE)
    reader.stdin.close()
    assert (lake.returncode, lake.stderr) == (141, "")


def test_version_to_a_closed_pipe_stops_quietly() -> None:
    """Printed while the arguments are parsed, before the command's own closed-pipe handling."""
    reader = subprocess.Popen(["true"], stdin=subprocess.PIPE)
    reader.wait()
    lake = _lake("--version", stdout=reader.stdin, stderr=subprocess.PIPE)
    reader.stdin.close()
    assert (lake.returncode, lake.stderr) == (141, "")


# -- 8. --version, lake write's drop notice ---------------------------------------------------------
def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr() == (f"lake {version('airflow-lake-provider')}\n", "")


def test_write_dropping_the_metadata_table_prints_the_instant_and_warns_on_stderr(tmp_path: Path) -> None:
    """docs/cli.md: `lake write` keeps its stdout contract (the instant); the drop is the warning
    (a real process: pytest's own log handlers would take the warning in process)."""
    base = tmp_path / "t"
    table = _table(base, writes=1)
    add_metadata_table(base)
    pq.write_table(_batch(["k5"], 9), tmp_path / "in.parquet")
    argv = ["write", str(base), "--input", str(tmp_path / "in.parquet"), "--operation", "upsert"]
    done = _lake(*argv, "--option", "hoodie.metadata.enable=false")
    out, err = done.stdout, done.stderr
    assert done.returncode == 0 and out == f"{table.timeline().instants[-1].timestamp}\n"
    assert err.count("\n") == 1 and err.rstrip().endswith(
        f"WARNING airflow_lake_provider.lake.table.metadata.policy: dropped Hudi's metadata table of "
        f"{base} (partitions [files], folder .hoodie/metadata/) as hoodie.metadata.enable=false asks; "
        "Spark/Flink writers of this table must run with hoodie.metadata.enable=false too, or their "
        "next commit rebuilds the metadata table from a full listing"
    )
    assert not (base / ".hoodie" / "metadata").exists()


# -- 6. the policy of a clean with nothing to do ----------------------------------------------------
@pytest.mark.parametrize(
    ("flags", "policy"),
    [([], "KEEP_LATEST_COMMITS"), (["--policy", "KEEP_LATEST_FILE_VERSIONS"], "KEEP_LATEST_FILE_VERSIONS")],
)
def test_a_clean_with_nothing_to_do_reports_the_policy_in_effect(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], policy: str
) -> None:
    base = tmp_path / "t"
    _table(base, kind="cow", writes=1)
    for dry in ([], ["--dry-run"]):
        code, out, err = _run(capsys, "clean", str(base), *flags, *dry)
        assert (code, err) == (0, "")
        result = json.loads(out)
        assert (result["outcome"], result["policy"], result["files_planned"]) == ("NO_WORK", policy, 0)


@pytest.mark.parametrize(
    ("flag", "option", "message"),
    [
        (
            ["--policy", "success-file"],
            "sink.partition-commit.policy.kind=merge-small-files",
            "--policy success-file and --option sink.partition-commit.policy.kind=merge-small-files "
            "disagree: give one of them",
        ),
        (
            ["--trigger", "process-time"],
            "sink.partition-commit.trigger=partition-time",
            "--trigger process-time and --option sink.partition-commit.trigger=partition-time "
            "disagree: give one of them",
        ),
        (
            ["--delay", "0 s"],
            "sink.partition-commit.delay=1 d",
            "--delay 0 s and --option sink.partition-commit.delay=1 d disagree: give one of them",
        ),
    ],
    ids=["policy", "trigger", "delay"],
)
def test_partition_commit_refuses_a_flag_and_an_option_that_disagree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: list[str], option: str, message: str
) -> None:
    """As clean's --policy/--retained and compact's --strategy: the flag used to win silently."""
    _table(tmp_path / "t", writes=1)
    before = tree_digest(tmp_path / "t")
    code, out, err = _run(
        capsys, "partition-commit", str(tmp_path / "t"), "--partition", "city=sf", *flag, "--option", option
    )
    assert (code, out, err) == (1, "", f"lake: error: {message}\n")
    assert tree_digest(tmp_path / "t") == before


@pytest.mark.parametrize("command", ["write", "rollback", "restore", "partition-commit"])
def test_a_malformed_option_is_a_config_error_of_every_command(
    tmp_path: Path, command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--option`` without ``=`` is a configuration error (a ``ConfigError``) for every command."""
    from airflow_lake_provider.lake import cli
    from airflow_lake_provider.lake.errors import ConfigError

    raised: list[BaseException] = []
    real = cli._key_values

    def spy(pairs: list[str], error: type[ConfigError]) -> dict[str, str]:
        try:
            return real(pairs, error)
        except Exception as exc:
            raised.append(exc)
            raise

    monkeypatch.setattr(cli, "_key_values", spy)
    _table(tmp_path / "t", writes=1)
    pq.write_table(_batch(["k1"], 9), tmp_path / "in.parquet")
    extra = {
        "write": ["--input", str(tmp_path / "in.parquet"), "--operation", "upsert"],
        "rollback": [],
        "restore": ["--savepoint", "20250101000000000"],
        "partition-commit": ["--partition", "city=sf"],
    }[command]
    assert main([command, str(tmp_path / "t"), *extra, "--option", "nope"]) == 1
    assert len(raised) == 1 and isinstance(raised[0], ConfigError), raised
    assert str(raised[0]) == "--option 'nope' is not K=V"


@pytest.mark.parametrize(
    ("flags", "option", "policy"),
    [
        (["--retained", "3"], "hoodie.cleaner.commits.retained=03", "KEEP_LATEST_COMMITS"),
        (
            ["--policy", "KEEP_LATEST_FILE_VERSIONS"],
            "hoodie.cleaner.policy=keep_latest_file_versions",
            "KEEP_LATEST_FILE_VERSIONS",
        ),
    ],
    ids=["retained", "policy"],
)
def test_a_flag_and_an_option_that_mean_the_same_agree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], option: str, policy: str
) -> None:
    """Compared as the option reads them, not as text: ``3`` and ``03``, a policy in either case."""
    base = tmp_path / "t"
    _table(base, kind="cow", writes=1)
    code, out, err = _run(capsys, "clean", str(base), *flags, "--option", option, "--dry-run")
    assert (code, err) == (0, "")
    assert json.loads(out)["policy"] == policy


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--name", "my-table"],
            "table name 'my-table': record name 'my-table_record' is not a valid Avro name",
        ),
        (["--name", "tåble"], "table name 'tåble': record name 'tåble_record' is not a valid Avro name"),
        (["--record-key", "a b"], "field 'a b' is not a valid Avro name"),
        (["--partition-fields", "ü"], "field 'ü' is not a valid Avro name"),
    ],
    ids=["dash", "non-ascii", "space-key", "partition"],
)
def test_init_refuses_a_name_every_write_would_refuse_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    given = {"--name": "n5", "--record-key": "uuid", "--precombine": "ts"}
    given.update(dict(zip(flags[::2], flags[1::2], strict=True)))
    argv = ["init", str(tmp_path / "n5"), "--table-type", "cow", *(a for kv in given.items() for a in kv)]
    code, out, err = _run(capsys, *argv)
    assert (code, out) == (1, "")
    assert err == f"lake: error: {message} ([A-Za-z_][A-Za-z0-9_]*)\n"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("flags", "option", "message"),
    [
        (
            ["--policy", "KEEP_LATEST_COMMITS"],
            "hoodie.clean.policy=KEEP_LATEST_FILE_VERSIONS",
            "--policy KEEP_LATEST_COMMITS and --option hoodie.clean.policy=KEEP_LATEST_FILE_VERSIONS "
            "disagree",
        ),
        (
            ["--retained", "3"],
            "clean.retain_commits=4",
            "--retained 3 and --option clean.retain_commits=4 disagree",
        ),
    ],
    ids=["policy-alias", "retained-flink-name"],
)
def test_a_flag_that_disagrees_with_another_name_of_its_option_names_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], option: str, message: str
) -> None:
    base = tmp_path / "t"
    _table(base, kind="cow", writes=1)
    before = tree_digest(base)
    code, out, err = _run(capsys, "clean", str(base), *flags, "--option", option)
    assert (code, out, err) == (1, "", f"lake: error: {message}: give one of them\n")
    assert tree_digest(base) == before


def test_flags_read_their_values_as_their_options_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A policy or trigger in any case, as ``--option`` reads it; a count as Java reads it (not ``1_0``)."""
    base = tmp_path / "t"
    _table(base, writes=1)
    before = tree_digest(base)
    code, out, err = _run(capsys, "clean", str(base), "--policy", " keep_latest_commits", "--dry-run")
    assert (code, err, json.loads(out)["policy"]) == (0, "", "KEEP_LATEST_COMMITS")
    with pytest.raises(SystemExit) as caught:
        main(["clean", str(base), "--retained", "1_0", "--dry-run"])
    assert caught.value.code == 2
    assert capsys.readouterr().err.endswith("error: argument --retained: '1_0' is not a whole number\n")
    trigger = ["--trigger", "PROCESS-TIME", "--option", "sink.partition-commit.trigger=partition-time"]
    code, out, err = _run(capsys, "partition-commit", str(base), "--partition", "city=sf", *trigger)
    assert (code, out) == (1, "")  # read as process-time, then compared with the option
    assert err == (
        "lake: error: --trigger process-time and --option sink.partition-commit.trigger=partition-time "
        "disagree: give one of them\n"
    )
    assert tree_digest(base) == before


def test_read_refuses_an_output_name_holding_nul(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _table(tmp_path / "t", writes=1)
    output = str(tmp_path / "o\x00.parquet")
    code, out, err = _run(capsys, "read", str(tmp_path / "t"), "--output", output)
    assert (code, out) == (1, "")
    assert err == f"lake: error: {output!r} does not name a file\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t"]


def test_init_reads_fields_stripped_as_the_table_reads_them_back(tmp_path: Path) -> None:
    """``--precombine "ts "`` is ts and ``" "`` no field, as hoodie.properties is read: not refused."""
    for precombine, expected in (("ts ", "ts"), (" ", None)):
        path = tmp_path / f"t{len(expected or '')}"
        argv = ["init", str(path), "--table-type", "cow", "--name", "t", "--record-key", " uuid"]
        assert main([*argv, "--precombine", precombine, "--partition-fields", "city "]) == 0
        config = LakeTable.open(path).config
        assert (config.record_key_fields, config.precombine_field, config.partition_fields) == (
            ("uuid",),
            expected,
            ("city",),
        )
