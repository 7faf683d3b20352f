"""The platform the project stands on: install layout, Spark, Airflow, and the core's import rule."""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from importlib import metadata
from pathlib import Path

import pytest

# Imports every module of the table core with Airflow and Spark made unimportable, so any
# ``import airflow``/``import pyspark`` reached from a core module fails with ImportError.
_CORE_IMPORT_CHECK = textwrap.dedent(
    """
    import importlib, pkgutil, sys, traceback
    for banned in ("airflow", "pyspark"):
        sys.modules[banned] = None
    import airflow_lake_provider.lake as core
    names = [core.__name__]
    failed = []
    def onerror(name):
        failed.append(name)
        traceback.print_exc()
    for info in pkgutil.walk_packages(core.__path__, core.__name__ + ".", onerror=onerror):
        names.append(info.name)
        try:
            importlib.import_module(info.name)
        except BaseException:
            failed.append(info.name)
            print(f"--- {info.name}", file=sys.stderr)
            traceback.print_exc()
    leaked = sorted(m for m in sys.modules if m.split(".")[0] in ("airflow", "pyspark")
                    and sys.modules[m] is not None)
    print("\\n".join(names))
    sys.exit(1 if failed or leaked else 0)
    """
)


def test_core_imports_without_airflow_or_spark(repo_root: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _CORE_IMPORT_CHECK],
        cwd=repo_root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"core import failed:\n{proc.stdout}\n{proc.stderr}"
    imported = proc.stdout.split()
    assert imported[0] == "airflow_lake_provider.lake"
    missing = _core_modules(repo_root) - set(imported)
    assert not missing, f"walk_packages did not reach: {sorted(missing)}"


def _core_modules(repo_root: Path) -> set[str]:
    """Dotted names of the .py files under lake/ that sit in packages (folders with __init__.py)."""
    lake = repo_root / "airflow_lake_provider" / "lake"
    names = set()
    for path in lake.rglob("*.py"):
        subdirs = [d for d in path.parents if d.is_relative_to(lake) and d != lake]
        if all((d / "__init__.py").is_file() for d in subdirs):
            parts = path.relative_to(repo_root).with_suffix("").parts
            names.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _record_mismatches(dist: metadata.Distribution, prefix: str) -> list[str]:
    """Files under ``prefix`` whose content differs from the distribution's RECORD hash."""
    bad = []
    for row in csv.reader((dist.read_text("RECORD") or "").splitlines()):
        path, digest = row[0], row[1] if len(row) > 1 else ""
        if not path.startswith(prefix) or not digest:
            continue
        algo, _, expected = digest.partition("=")
        data = Path(dist.locate_file(path)).read_bytes()
        actual = base64.urlsafe_b64encode(hashlib.new(algo, data).digest()).rstrip(b"=").decode()
        if actual != expected:
            bad.append(path)
    return bad


def test_pyspark_code_matches_its_jars() -> None:
    """The pyspark-client trap: pyspark-client 4.2.0 writes its files into the same pyspark/ folder."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    cores = sorted(jars.glob("spark-core_*.jar"))
    assert len(cores) == 1, f"expected one spark-core jar in {jars}, found {cores}"
    jar_version = cores[0].stem.split("-")[-1]  # spark-core_2.13-4.3.0
    assert pyspark.__version__ == jar_version
    assert metadata.version("pyspark") == jar_version
    overwritten = _record_mismatches(metadata.distribution("pyspark"), "pyspark/")
    assert not overwritten, (
        f"{len(overwritten)} pyspark files overwritten (by pyspark-client?), e.g. {overwritten[:5]}; fix: "
        f"`uv pip uninstall pyspark && uv pip install --no-deps pyspark=={jar_version}` (see Makefile)"
    )


def test_the_install_leaves_pyspark_client_out() -> None:
    """`make install` excludes pyspark-client (excludes.txt): nothing can overwrite pyspark's files."""
    with pytest.raises(metadata.PackageNotFoundError):
        metadata.version("pyspark-client")


def test_the_wheel_installs_one_package_with_the_spark_jobs_inside(repo_root: Path, tmp_path: Path) -> None:
    """The wheel puts nothing but ``airflow_lake_provider`` into site-packages: the Spark job scripts
    (and the driver's log4j2 settings) ship in its ``spark_jobs/``, where ``spark_submit`` finds them."""
    import zipfile

    from airflow_lake_provider.lake.spark_submit import JOBS_DIR

    source = tmp_path / "src"  # a copy: building in the checkout would leave build/ and egg-info there
    for name in ("pyproject.toml", "README.md"):
        source.mkdir(exist_ok=True)
        shutil.copy(repo_root / name, source / name)
    shutil.copytree(
        repo_root / "airflow_lake_provider",
        source / "airflow_lake_provider",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    uv = Path(sys.executable).parent / "uv"
    subprocess.run(
        [
            str(uv) if uv.exists() else "uv",
            "build",
            "-q",
            "--wheel",
            "--out-dir",
            str(tmp_path / "dist"),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    [wheel] = (tmp_path / "dist").glob("airflow_lake_provider-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")} == {
        "airflow_lake_provider"
    }
    jobs = sorted(n.rsplit("/", 1)[1] for n in names if n.startswith("airflow_lake_provider/spark_jobs/"))
    shipped = sorted(p.name for p in JOBS_DIR.iterdir() if p.suffix in (".py", ".properties"))
    assert jobs == shipped and {"clean.py", "compact.py", "write.py", "log4j2.properties"} <= set(jobs)
    top_level = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
    assert zipfile.ZipFile(wheel).read(top_level).decode().split() == ["airflow_lake_provider"]


@pytest.mark.spark
def test_spark_local_job(spark) -> None:
    assert spark.sparkContext.master == "local[2]"
    assert spark.range(1000).count() == 1000
    # A Python-side job: starts Python workers with PYSPARK_PYTHON.
    assert spark.sparkContext.parallelize(range(10), 2).map(lambda x: x * x).sum() == 285


def test_provider_info_is_well_formed() -> None:
    import jsonschema

    from airflow_lake_provider import __version__
    from airflow_lake_provider.provider_info import get_provider_info

    info = get_provider_info()
    assert info["package-name"] == "airflow-lake-provider"
    assert info["versions"][0] == __version__ == metadata.version("airflow-lake-provider")
    # Validate against the schema Airflow itself uses (shipped inside airflow-core).
    schema_file = Path(importlib.util.find_spec("airflow").submodule_search_locations[0])
    schema = json.loads((schema_file / "provider_info.schema.json").read_text())
    jsonschema.validate(info, schema)
    json.dumps(info)  # plain data only


@pytest.mark.airflow
def test_airflow_sees_the_provider() -> None:
    from airflow.providers_manager import ProvidersManager

    providers = ProvidersManager().providers
    assert "airflow-lake-provider" in providers
    assert providers["airflow-lake-provider"].version == "0.1.0"


@pytest.mark.airflow
@pytest.mark.slow
def test_airflow_cli_lists_the_provider(tmp_path: Path) -> None:
    """The CLI loads every provider's info; a malformed dict would crash it."""
    airflow = Path(sys.executable).parent / "airflow"
    proc = subprocess.run(
        [str(airflow), "providers", "list", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    listed = {p["package_name"]: p for p in json.loads(proc.stdout)}
    assert listed["airflow-lake-provider"]["version"] == "0.1.0"


@pytest.mark.airflow
def test_smoke_dag_runs_under_dag_test(airflow_db: Path, repo_root: Path) -> None:
    from airflow.models import TaskInstance
    from airflow.utils.session import create_session

    path = repo_root / "dags" / "example_smoke.py"
    spec = importlib.util.spec_from_file_location("example_smoke_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    dr = module.dag.test()
    assert dr.state == "success"
    with create_session() as session:
        states = dict(
            session.query(TaskInstance.task_id, TaskInstance.state).filter(
                TaskInstance.dag_id == "example_smoke", TaskInstance.run_id == dr.run_id
            )
        )
    assert states == {"produce": "success", "double": "success"}


def test_hudi_table_zip_and_hudi_rs(hudi_table_zip) -> None:
    """The fixture unzips each table into its own folder (COW and MOR zips share inner names)."""
    from hudi import HudiTableBuilder

    cow = hudi_table_zip("cow_v6_nonpartitioned")
    mor = hudi_table_zip("morparquet_v6_nonpartitioned")
    assert cow.name == mor.name == "v6_nonpartitioned" and cow != mor
    assert (cow / ".hoodie" / "hoodie.properties").is_file()
    assert not any(p.name == "__MACOSX" for p in cow.parent.parent.rglob("*"))
    batches = HudiTableBuilder.from_base_uri(str(cow)).build().read()
    assert sum(b.num_rows for b in batches) == 4


def test_ruff_lint_and_format_are_clean(repo_root: Path) -> None:
    """The style rules hold on every file (ruff's configuration is in pyproject.toml)."""
    ruff = Path(sys.executable).parent / "ruff"
    for args in (["check", "."], ["format", "--check", "."]):
        done = subprocess.run([str(ruff), *args], cwd=repo_root, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]


def test_make_test_and_make_example_first_install_the_system_tools_they_need(repo_root: Path) -> None:
    """The README's commands work on a fresh machine by themselves: before pytest, ``make test`` runs
    ``scripts/system-deps.sh`` for python3's venv (Debian's python3 lacks it), java, and what the
    real-Airflow test needs (PostgreSQL, Chromium and chromedriver); ``make example`` for venv and
    java. The script only looks the tools up when they are there."""
    # Not the make (and SYSTEM_DEPS setting) this suite may run under.
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE") and k != "SYSTEM_DEPS"}
    for target, tools, command in (
        ("test", "venv java postgresql chromium chromedriver", "-m pytest"),
        ("example", "venv java", "examples/pipeline.py"),
    ):
        done = subprocess.run(
            ["make", "-n", target], cwd=repo_root, env=env, capture_output=True, text=True, check=True
        )
        lines = done.stdout.splitlines()
        deps = lines.index(f'[ "" = skip ] || PYTHON=python3 scripts/system-deps.sh {tools}')
        assert deps < next(i for i, line in enumerate(lines) if command in line), lines


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("runuser") is None, reason="needs root and runuser")
def test_system_deps_names_what_to_install_when_it_cannot_install(repo_root: Path) -> None:
    """A user who is not root and has no sudo gets the Debian packages to install and exit 1 (no
    apt-get attempted); without apt-get at all, the same list and where to get them."""
    script = str(repo_root / "scripts" / "system-deps.sh")
    # A PATH with the shell and id, but no java, chromium or initdb, that user nobody can read
    # (pytest's tmp_path is root's alone).
    home = Path(tempfile.mkdtemp(prefix="lake-system-deps-"))
    home.chmod(0o755)
    bin_dir = home / "bin"
    bin_dir.mkdir()
    try:
        _check_system_deps_messages(script, bin_dir)
    finally:
        shutil.rmtree(home)


def _check_system_deps_messages(script: str, bin_dir: Path) -> None:
    for tool in ("bash", "id"):
        (bin_dir / tool).symlink_to(shutil.which(tool))  # type: ignore[arg-type]

    def run(*tools: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["runuser", "-u", "nobody", "--", "env", f"PATH={bin_dir}", "bash", script, *tools],
            capture_output=True,
            text=True,
            check=False,
        )

    no_apt = run("java", "chromium", "chromedriver")
    assert no_apt.returncode == 1 and no_apt.stdout == ""
    assert no_apt.stderr.splitlines() == [
        "system-deps.sh: missing: openjdk-17-jre-headless chromium chromium-driver (Debian package names).",
        "No apt-get here: install them with your system's package manager, then run the command again.",
        "(SYSTEM_DEPS=skip make ... runs without them: the tests that need them fail.)",
    ]
    (bin_dir / "apt-get").symlink_to("/bin/false")  # present, but nobody may not run it as root
    not_root = run("java", "chromedriver")
    assert not_root.returncode == 1 and not_root.stdout == ""
    assert not_root.stderr.splitlines() == [
        "system-deps.sh: missing: openjdk-17-jre-headless chromium-driver (Debian package names).",
        "Install them as root (apt-get install openjdk-17-jre-headless chromium-driver), then run the "
        "command again.",
        "(SYSTEM_DEPS=skip make ... runs without them: the tests that need them fail.)",
    ]
    unknown = run("chrome")
    assert unknown.returncode == 1 and "unknown tool 'chrome'" in unknown.stderr
