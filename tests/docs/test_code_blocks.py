"""Every code block of the README and docs/*.md runs (the markers: ``doc_blocks.py``).

Python blocks are executed in a folder holding the table ``make example`` writes
(``example-data/lake/trips``, a small merge-on-read table made here), or, when they define a DAG,
parsed by Airflow's ``DagBag`` (the README's first DAG also runs under ``dag.test()`` in
``tests/airflow/test_compaction_dag.py``). Shell blocks run in bash with the ``lake`` command of this
venv in such a folder, ``s3://bucket/`` pointing at a bucket of the moto S3 server; ``make`` lines are
dry-run (``make -n``), ``pip install`` lines checked against the package's name and extras.
"""

from __future__ import annotations

import configparser
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from importlib.metadata import metadata
from pathlib import Path

import pytest
from doc_blocks import LANGUAGES, REPO_ROOT, Block, blocks, documents

ALL = [block for path in documents() for block in blocks(path)]
CODE = [block for block in ALL if block.lang != "text"]
LAKE = str(Path(sys.executable).parent / "lake")


def test_every_block_names_a_known_language_and_marker() -> None:
    """No block escapes the tests by an unknown language, a missing one, or a marker without a reason;
    blocks start at the margin (a block indented into a list item would be parsed differently)."""
    wrong = [
        f"{b.name}: ```{b.lang} {b.marker or ''} {b.marker_arg}"
        for b in ALL
        if b.lang not in LANGUAGES
        or b.indent
        or b.marker not in (None, "skip", "synopsis")
        or (b.marker == "skip" and not b.marker_arg)
        or (b.marker == "synopsis" and b.lang != "bash")
    ]
    assert wrong == []
    assert len(CODE) >= 15  # the parser finds the blocks


@pytest.fixture(scope="module")
def example_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder as after ``make example``: ``example-data/lake/trips`` (merge-on-read, key ``uuid``,
    ordering field ``ts``, hive-style partitions by ``city``: 30 trips inserted, 10 updated in log
    files) and ``trips.parquet`` (rows with the table's columns)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from airflow_lake_provider.lake import LakeTable, write

    def trips(ids: range, ts: int) -> pa.Table:
        return pa.table(
            {
                "uuid": [f"trip-{i:03d}" for i in ids],
                "ts": pa.array([ts] * len(ids), pa.int64()),
                "rider": [f"rider-{'ABCDEFGH'[i % 8]}" for i in ids],
                "fare": [10 + i * 0.5 + ts for i in ids],
                "city": [("chennai", "san_francisco", "sao_paulo")[i % 3] for i in ids],
            }
        )

    folder = tmp_path_factory.mktemp("docs-example")
    table = LakeTable.create(
        folder / "example-data" / "lake" / "trips",
        name="trips",
        table_type="mor",
        record_key_fields=("uuid",),
        precombine_field="ts",
        partition_fields=("city",),
        hive_style=True,
    )
    write(table, trips(range(30), 1), "insert")
    write(table, trips(range(20, 30), 2), "upsert")
    pq.write_table(trips(range(25, 35), 3), folder / "trips.parquet")
    return folder


@pytest.fixture
def workdir(example_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh copy of the example folder, as the current directory."""
    folder = tmp_path / "work"
    shutil.copytree(example_folder, folder, symlinks=True)
    monkeypatch.chdir(folder)
    return folder


@pytest.mark.parametrize("block", CODE, ids=[b.name for b in CODE])
def test_code_block_runs(block: Block, request: pytest.FixtureRequest) -> None:
    if block.marker == "skip":
        pytest.skip(f"{block.name}: {block.marker_arg}")
    if block.marker == "synopsis":
        _check_synopsis(block)
    elif block.lang == "python":
        _run_python(block, request)
    elif block.lang == "bash":
        _run_shell(block, request)
    elif block.lang == "yaml":
        import yaml

        yaml.safe_load(block.code)
    elif block.lang == "json":
        json.loads(block.code)
    elif block.lang == "ini":
        configparser.ConfigParser().read_string(block.code)


def _run_python(block: Block, request: pytest.FixtureRequest) -> None:
    if re.search(r"^with DAG\(", block.code, re.MULTILINE):
        _parse_dag_file(block, request.getfixturevalue("tmp_path"))
        return
    request.getfixturevalue("workdir")
    code = compile(block.code, block.name, "exec")
    exec(code, {"__name__": "__docs__"})  # noqa: S102 - the block is the repository's own docs


def _parse_dag_file(block: Block, tmp_path: Path) -> None:
    """As the DAG processor parses a DAG file: no import errors, the DAGs with their tasks."""
    from airflow.dag_processing.dagbag import DagBag

    folder = tmp_path / "dags"
    folder.mkdir()
    (folder / "docs_dag.py").write_text(block.code)
    bag = DagBag(dag_folder=str(folder))
    assert bag.import_errors == {}
    dag_ids = re.findall(r'^with DAG\(\s*"([^"]+)"', block.code, re.MULTILINE)
    assert sorted(bag.dags) == sorted(dag_ids) and all(bag.dags[d].tasks for d in dag_ids)


def _commands(code: str) -> list[str]:
    """The block's commands: comments dropped, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", code)
    return [line.split("  #", 1)[0].strip() for line in joined.splitlines() if line.strip()]


def _run_shell(block: Block, request: pytest.FixtureRequest) -> None:
    commands = _commands(block.code)
    if all(c.startswith("make ") for c in commands):
        for command in commands:
            _check_make(command)
    elif all(c.startswith("pip install ") for c in commands):
        for command in commands:
            _check_pip_install(command)
    else:
        _run_bash(block, request)


def _check_make(command: str) -> None:
    """``make -n`` of the target: it exists and its recipe expands (nothing runs)."""
    target = shlex.split(command)[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    done = subprocess.run(["make", "-n", target], cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def _check_pip_install(command: str) -> None:
    """The package's name and extras, as this checkout declares them (nothing is installed)."""
    requirement = shlex.split(command)[2]
    name, _, extras = requirement.partition("[")
    meta = metadata("airflow-lake-provider")
    assert name == meta["Name"]
    declared = set(meta.get_all("Provides-Extra") or [])
    assert set(extras.rstrip("]").split(",")) - {""} <= declared


def _run_bash(block: Block, request: pytest.FixtureRequest) -> None:
    workdir: Path = request.getfixturevalue("workdir")
    script = block.code
    if "s3://bucket/" in script:
        bucket = request.getfixturevalue("s3_bucket")  # sets the AWS_* variables to moto's server
        script = script.replace("s3://bucket/", f"s3://{bucket}/")
    # The venv's lake command (PATH as the tests set it), exported connections checked as JSON.
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", f"{script}\nenv -0"],
        cwd=workdir,
        env={**os.environ, "PATH": f"{Path(LAKE).parent}{os.pathsep}{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"{block.name}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    assert "lake: error" not in done.stderr
    exported = dict(item.split("=", 1) for item in done.stdout.split("\0") if "=" in item)
    for name in re.findall(r"^export (AIRFLOW_CONN_\w+)=", block.code, re.MULTILINE):
        assert json.loads(exported[name])["conn_type"] in ("lake", "spark"), name


def _check_synopsis(block: Block) -> None:
    """Each ``lake SUBCOMMAND ...`` line names a subcommand, and only options it has."""
    from airflow_lake_provider.lake.cli import _parser

    actions = _parser()._subparsers._group_actions[0]  # type: ignore[union-attr]
    subcommands = actions.choices
    commands = _commands(block.code)
    assert commands and all(c.startswith("lake ") for c in commands), commands
    for command in commands:
        name = command.split()[1]
        assert name in subcommands, command
        options = {o for a in subcommands[name]._actions for o in a.option_strings}
        used = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", command))
        assert used <= options, f"{command}: {sorted(used - options)} not options of lake {name}"
