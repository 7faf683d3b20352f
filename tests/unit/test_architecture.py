"""The architecture, checked from the source: layers of the core, no import circles, one storage seam.

Layers of ``airflow_lake_provider.lake`` (each may import the ones below it, never one above):

    cli, cli_arrow, cli_parser, spark_submit  entry points
    services                     clean, compaction, partition commit, savepoint, restore
    table                        the table, merge, read, write, rollback, archival, metadata table
    file_group                   file names, file slices and groups, the file system view
    timeline                     instants, their layout, the active and archived timeline, the store
    log_file                     log files: block framing, data and delete blocks
    format                       Hudi v6 codecs over bytes, no I/O (Avro, parquet, bloom, config)
    config                       the option registry: every option's key, aliases, default, parser
    storage                      the one file-access seam: base (the interface), local, s3, ranged, crash
    errors                       the exception tree

Outside the core, only the ``lake`` CLI, the Spark job scripts (``airflow_lake_provider.spark_jobs``) and
the Airflow layer import services.
No module is longer than 500 lines and no function longer than 80 (``scripts/structure_report.py``
prints the numbers), but for the few listed below with the reason.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_lake_provider.lake.config import BY_NAME

ROOT = Path(__file__).resolve().parents[2]
CORE = "airflow_lake_provider.lake"

# What each core module group may import from the core (a prefix match on module names; the first
# group a module's name starts with is its group, so the storage modules come before the package).
_BELOW_FORMAT = (f"{CORE}.errors", f"{CORE}.config", f"{CORE}.storage", f"{CORE}.format")
ALLOWED = {
    f"{CORE}.errors": (),
    f"{CORE}.storage.base": (f"{CORE}.errors",),
    # Tests' crash injection: a storage around another. The storages know nothing of it.
    f"{CORE}.storage.crash": (f"{CORE}.storage.base",),
    f"{CORE}.storage.ranged": (f"{CORE}.storage.base",),
    f"{CORE}.storage.s3": (f"{CORE}.errors", f"{CORE}.storage.base", f"{CORE}.storage.ranged"),
    # local disk and open_storage, which loads storage.s3 lazily for s3:// locations.
    f"{CORE}.storage.local": (f"{CORE}.errors", f"{CORE}.storage.base", f"{CORE}.storage.s3"),
    # the package's re-exports
    f"{CORE}.storage": (f"{CORE}.storage.base", f"{CORE}.storage.crash", f"{CORE}.storage.local"),
    # The option registry: below format (bloom filter settings are options), above errors only.
    f"{CORE}.config": (f"{CORE}.errors", f"{CORE}.config"),
    f"{CORE}.format": (f"{CORE}.errors", f"{CORE}.config", f"{CORE}.format"),
    f"{CORE}.log_file": (*_BELOW_FORMAT, f"{CORE}.log_file"),
    f"{CORE}.timeline": (*_BELOW_FORMAT, f"{CORE}.log_file", f"{CORE}.timeline"),
    f"{CORE}.file_group": (*_BELOW_FORMAT, f"{CORE}.log_file", f"{CORE}.timeline", f"{CORE}.file_group"),
    f"{CORE}.table": (
        *_BELOW_FORMAT,
        f"{CORE}.log_file",
        f"{CORE}.timeline",
        f"{CORE}.file_group",
        f"{CORE}.table",
    ),
    f"{CORE}.services": (
        *_BELOW_FORMAT,
        f"{CORE}.log_file",
        f"{CORE}.timeline",
        f"{CORE}.file_group",
        f"{CORE}.table",
        f"{CORE}.services",
    ),
}
SERVICE_USERS = (
    f"{CORE}.cli",  # a prefix: cli_parser too
    f"{CORE}.services",
    "airflow_lake_provider.spark_jobs",
    *(f"airflow_lake_provider.{p}" for p in ("hooks", "operators", "sensors", "triggers")),
)
# Files of the core that may touch the file system directly: the seam itself (local disk, and the
# S3 store's spool files), and spark_submit,
# which finds and starts the spark-submit program (no table files).
DIRECT_IO_ALLOWED = {f"{CORE}.storage.local", f"{CORE}.storage.s3", f"{CORE}.spark_submit"}
# ``os`` names that are not file access.
OS_ALLOWED = {"environ", "getenv", "fspath", "PathLike", "getpid", "cpu_count", "sep", "pathsep", "urandom"}
IO_MODULES = {"shutil", "fcntl", "tempfile", "glob", "pathlib", "pyarrow.fs", "pyarrow.dataset", "fsspec"}


def _structure_report():  # the script that prints the numbers: one definition of what is measured
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "structure_report", ROOT / "scripts" / "structure_report.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REPORT = _structure_report()
MODULES = REPORT.modules(ROOT)
GRAPH = REPORT.import_graph(MODULES)


def _group(module: str) -> str | None:
    for group in ALLOWED:
        if module == group or module.startswith(group + "."):
            return group
    return None


def test_every_core_module_belongs_to_a_layer_or_is_an_entry_point() -> None:
    core = [m for m in MODULES if m.startswith(CORE + ".")]
    assert {m for m in core if _group(m) is None} == {
        f"{CORE}.cli",
        f"{CORE}.cli_arrow",
        f"{CORE}.cli_parser",
        f"{CORE}.spark_submit",
    }


@pytest.mark.parametrize("group", sorted(ALLOWED))
def test_core_layers_import_only_what_lies_below(group: str) -> None:
    bad = []
    for module, imported in GRAPH.items():
        if _group(module) != group:
            continue
        for name in imported:
            if name.startswith(CORE + ".") and not any(
                name == ok or name.startswith(ok + ".") for ok in ALLOWED[group]
            ):
                bad.append(f"{module} imports {name}")
    assert bad == []


def test_core_imports_neither_airflow_nor_pyspark() -> None:
    bad = [
        f"{module} imports {name}"
        for module, imported in GRAPH.items()
        if module == CORE or module.startswith(CORE + ".")
        for name in imported
        if name.split(".")[0] in ("airflow", "pyspark")
    ]
    assert bad == []


def test_only_entry_points_and_the_airflow_layer_import_services() -> None:
    bad = [
        f"{module} imports {name}"
        for module, imported in GRAPH.items()
        for name in imported
        if name.startswith(f"{CORE}.services") and not module.startswith(SERVICE_USERS)
    ]
    assert bad == []


def test_no_import_circles() -> None:
    """Tarjan's strongly connected components over our own modules: every one must be a single module."""
    assert REPORT.import_cycles(GRAPH) == []


def _type_checking_only(tree: ast.AST) -> set[ast.AST]:
    """Nodes under ``if TYPE_CHECKING:`` (annotations only: never run)."""
    return {
        inner
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
        for stmt in node.body
        for inner in ast.walk(stmt)
    }


def _direct_io(module: str) -> list[str]:
    tree = ast.parse(MODULES[module].read_text("utf-8"))
    skipped = _type_checking_only(tree)
    found = []
    for node in ast.walk(tree):
        if node in skipped:
            continue
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open":
            found.append(f"line {node.lineno}: open()")
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
            and node.attr not in OS_ALLOWED
        ):
            found.append(f"line {node.lineno}: os.{node.attr}")
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found += [f"line {node.lineno}: import {n}" for n in names if n in IO_MODULES]
    return found


@pytest.mark.parametrize(
    "module", sorted(m for m in MODULES if m.startswith(CORE + ".") and m not in DIRECT_IO_ALLOWED)
)
def test_core_touches_files_only_through_storage(module: str) -> None:
    assert _direct_io(module) == []


def test_direct_io_check_finds_direct_file_access() -> None:
    """The check above is not vacuous: the storage module itself is full of what it looks for."""
    found = " ".join(_direct_io(f"{CORE}.storage.local"))
    for expected in ("open()", "os.scandir", "os.link", "import shutil", "import fcntl"):
        assert expected in found


def test_public_names_load_lazily_from_the_core_package() -> None:
    import subprocess
    import sys

    code = (
        "import sys, airflow_lake_provider.lake as lake\n"
        "heavy = ('pyarrow', 'polars', 'fastavro')\n"
        "before = [m for m in heavy if m in sys.modules]\n"
        "names = sorted(n for n in lake.__all__ if getattr(lake, n) is not None)\n"
        "print(before, names, lake.write.__module__, lake.LakeTable.__module__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == [
        "[]",
        "['LakeError',",
        "'LakeTable',",
        "'Operation',",
        "'Storage',",
        "'open_storage',",
        "'read_snapshot',",
        "'write']",
        f"{CORE}.table.write.writer",
        f"{CORE}.table.table",
    ]


# Longer than the limits for now, each with the reason; the list only shrinks.
LONG_MODULES: dict[str, str] = {}
LONG_FUNCTIONS: dict[str, str] = {}


def test_no_module_is_longer_than_the_limit_but_the_listed_ones() -> None:
    lines = REPORT.module_lines(MODULES)
    over = {m for m, n in lines.items() if n > REPORT.MODULE_LINES}
    assert over == set(LONG_MODULES)


def test_no_function_is_longer_than_the_limit_but_the_listed_ones() -> None:
    lines = REPORT.function_lines(MODULES)
    over = {f for f, n in lines.items() if n > REPORT.FUNCTION_LINES}
    assert over == set(LONG_FUNCTIONS)


def test_the_report_measures_what_the_limits_name() -> None:
    """Not vacuous: a module's and a function's lines as the source has them; a circle is found."""
    writer = f"{CORE}.table.write.writer"
    text = MODULES[writer].read_text("utf-8")
    assert REPORT.module_lines(MODULES)[writer] == len(text.splitlines())
    node = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == "write")
    assert REPORT.function_lines(MODULES)[f"{writer}:write"] == node.end_lineno - node.lineno + 1  # type: ignore[operator]
    assert REPORT.import_cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]


# -- config is read only through the registry ------------------------------------------------------
REGISTRY = f"{CORE}.config"
# The format layer spells hoodie.properties keys: table properties, never options.
TABLE_PROPERTY_CODE = f"{CORE}.format"
OPTION_LIKE = re.compile(r"^(hoodie|lake)\.[A-Za-z0-9_.-]+$")
# Names shaped like options that are not options: what else the code writes or reads.
NOT_OPTIONS = {
    # hoodie.properties keys and files (read as table properties, written by the timeline store)
    "hoodie.properties",
    "hoodie.properties.backup",
    "hoodie.table.metadata.partitions",
    "hoodie.table.metadata.partitions.inflight",
    "hoodie.table.create.schema",
    # commit and plan metadata (extraMetadata of commits, clean plans, merge replace commits)
    "lake.airflow.dag_id",
    "lake.airflow.task_id",
    "lake.airflow.run_id",
    "lake.airflow.try_number",
    "lake.airflow.map_index",
    "lake.write.id",
    "lake.policy",
    "lake.savepoints",
    "lake.keptForSavepoints",
    "lake.merge-small-files",
    "lake.strategy",
    "lake.minEventTime",
    "lake.maxEventTime",
    # Hive table properties the metastore policy writes; Spark application names
    "hoodie.query.as.ro.table",
    "lake.hudi.inputformat",
    "lake.compact",
    "lake.write",
}


def _in(module: str, group: str) -> bool:
    return module == group or module.startswith(group + ".")


def _strings(module: str) -> Iterator[tuple[int, str]]:
    for node in ast.walk(ast.parse(MODULES[module].read_text("utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def _spelled_options(module: str) -> list[str]:
    return [f"{module} line {n}: {v!r}" for n, v in _strings(module) if v in BY_NAME]


def test_option_names_are_spelled_only_in_the_registry() -> None:
    """Every other module reads an option through its ``Option`` (``KEEP_MIN_COMMITS.read(...)``)."""
    assert [bad for m in MODULES if not _in(m, REGISTRY) for bad in _spelled_options(m)] == []


def test_every_other_option_like_name_is_declared_not_an_option() -> None:
    """An ad hoc ``options.get("hoodie.new.knob")`` fails here: register the option, or declare the
    name in ``NOT_OPTIONS`` if it is a table property or metadata key."""
    bad = [
        f"{m} line {n}: {v!r}"
        for m in MODULES
        if not (_in(m, REGISTRY) or _in(m, TABLE_PROPERTY_CODE))
        for n, v in _strings(m)
        if OPTION_LIKE.match(v) and v not in NOT_OPTIONS and v not in BY_NAME
    ]
    assert bad == []


def test_the_option_checks_are_not_vacuous() -> None:
    """The registry spells every name it knows, and NOT_OPTIONS names only what the code spells."""
    registry = [m for m in MODULES if _in(m, REGISTRY)]
    spelled = {v for m in registry for _, v in _strings(m)}
    assert set(BY_NAME) <= spelled
    everywhere = {v for m in MODULES for _, v in _strings(m)}
    assert NOT_OPTIONS - everywhere == set()
