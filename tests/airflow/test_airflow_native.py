"""The Airflow layer as Airflow's processes meet it: light imports at DAG-parse time, triggers that
round-trip and never block the triggerer's loop, the provider's metadata and connection form, and
configuration errors that fail a task at once instead of asking for a retry."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from dag_helpers import new_trips_table, upsert_trips

import airflow_lake_provider
from airflow_lake_provider.hooks.errors import LakeConfigError
from airflow_lake_provider.hooks.lake import LakeHook
from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline import layout
from airflow_lake_provider.lake.timeline.instant import Action, State

pytestmark = pytest.mark.airflow

REPO = Path(__file__).resolve().parents[2]
# The imported package: the source tree under `make test`, site-packages under airflow-range-check.sh.
PACKAGE = Path(airflow_lake_provider.__file__).resolve().parent
HEAVY = ("polars", "pyarrow", "fastavro", "pyspark", "obstore")
AIRFLOW_LAYER = sorted(
    f"airflow_lake_provider.{folder}.{path.stem}"
    for folder in ("hooks", "operators", "sensors", "triggers")
    for path in (PACKAGE / folder).glob("*.py")
    if path.stem != "__init__"
) + ["airflow_lake_provider.assets", "airflow_lake_provider.provider_info"]
# Table-core modules that pull pyarrow/polars/fastavro in (the light ones, errors and instants, may load).
CORE_HEAVY = (
    "airflow_lake_provider.lake.table",
    "airflow_lake_provider.lake.services.clean",
    "airflow_lake_provider.lake.storage",
)
# Modules of the layer that define no hook, operator, sensor or trigger (the hook's mixins included).
HELPERS = {
    *(
        f"airflow_lake_provider.hooks.{m}"
        for m in ("compaction", "errors", "partition_commit", "results", "spark", "write")
    ),
    "airflow_lake_provider.operators.summary",
    "airflow_lake_provider.operators.xcom",
}
DUE = {"hoodie.compact.inline.max.delta.commits": "1"}
RETAIN_ONE = {"hoodie.cleaner.commits.retained": "1"}


def _fresh_python(code: str) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter (this test session's environment); it prints one JSON line."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _mor_table(path: Path) -> LakeTable:
    """A MOR table with 4 file groups (partitions a and b) and one delta commit of updates."""
    table, ids = new_trips_table(path)
    upsert_trips(table, ids[::3])
    return table


def _cow_table(path: Path) -> LakeTable:
    """A COW table whose one file group was rewritten twice: a clean retaining 1 commit deletes 1 file."""
    table = LakeTable.create(
        path, name="t", table_type="cow", record_key_fields=("id",), precombine_field="ts"
    )
    for ts in range(3):
        write(
            table, pa.table({"id": ["a", "b"], "ts": pa.array([ts, ts], pa.int64()), "v": [ts, ts]}), "upsert"
        )
    return table


# -- light at DAG-parse time -------------------------------------------------------------------------
def test_the_airflow_layer_loads_no_table_core_library_and_imports_fast() -> None:
    """In a fresh interpreter, after ``import airflow.sdk`` and the Airflow base classes our modules
    subclass (their cost is Airflow's, paid by any DAG), each module is imported in turn and
    ``sys.modules`` checked after each: none may load pyarrow, polars, fastavro, pyspark, obstore or
    the table core. Their total import time (target < 0.1 s) is asserted loosely (0.5 s: the test
    machine is shared) and printed (``pytest -s``)."""
    got = _fresh_python(
        "import importlib, json, sys, time\n"
        "t0 = time.perf_counter()\n"
        "import airflow.sdk\n"
        "t1 = time.perf_counter()\n"
        "from airflow.sdk import Asset, BaseHook, BaseOperator, BaseSensorOperator\n"
        "import airflow.triggers.base\n"
        "t2 = time.perf_counter()\n"
        "loaded, seconds = {}, 0.0\n"
        f"for m in {AIRFLOW_LAYER!r}:\n"
        "    t = time.perf_counter(); importlib.import_module(m); seconds += time.perf_counter() - t\n"
        f"    loaded[m] = sorted(n for n in sys.modules if n.split('.')[0] in {HEAVY!r}\n"
        f"                       or n.startswith({CORE_HEAVY!r}))\n"
        "print(json.dumps({'sdk': t1 - t0, 'bases': t2 - t1, 'ours': seconds, 'loaded': loaded}))"
    )
    print(
        f"\nimport airflow.sdk {got['sdk']:.3f} s, its base classes {got['bases']:.3f} s, "
        f"our {len(AIRFLOW_LAYER)} modules {got['ours']:.3f} s"
    )
    assert got["loaded"] == {m: [] for m in AIRFLOW_LAYER}
    # Loose, and scaled by how slow the machine is right now (airflow.sdk takes ~4 s when idle).
    assert got["ours"] < max(0.5, got["sdk"] / 8)


@pytest.mark.parametrize("dag_file", sorted(p.name for p in (REPO / "dags").glob("*.py")))
def test_each_example_dag_file_parses_fast_without_the_table_core(dag_file: str) -> None:
    got = _fresh_python(
        "import json, sys, time, runpy\n"
        "t0 = time.perf_counter()\n"
        "import airflow.sdk\n"
        "from airflow.sdk import BaseOperator, BaseSensorOperator\n"
        "t = time.perf_counter()\n"
        f"runpy.run_path({str(REPO / 'dags' / dag_file)!r})\n"
        "seconds = time.perf_counter() - t\n"
        f"heavy = sorted(m for m in sys.modules if m in {HEAVY!r})\n"
        "print(json.dumps({'seconds': seconds, 'heavy': heavy, 'sdk': t - t0}))"
    )
    print(f"\n{dag_file}: parsed in {got['seconds']:.3f} s (airflow.sdk took {got['sdk']:.3f} s)")
    # Loose, and scaled by how slow the machine is right now (airflow.sdk takes ~4 s when idle).
    assert got["heavy"] == [] and got["seconds"] < max(1.0, got["sdk"] / 2)


# -- triggers ----------------------------------------------------------------------------------------
def _triggers(table: LakeTable) -> list[Any]:
    from airflow_lake_provider.triggers.compaction import CompactionPlanTrigger
    from airflow_lake_provider.triggers.partition_commit import PartitionCommitTrigger

    return [
        CompactionPlanTrigger(
            str(table.uri), poll_interval=0.1, timeout_at=time.time() + 30, lake_conn_id=None
        ),
        PartitionCommitTrigger(
            str(table.uri),
            ["a", "b"],
            {"sink.partition-commit.policy.kind": "success-file"},
            watermark=None,
            poll_interval=0.1,
            timeout_at=time.time() + 30,
        ),
    ]


def test_every_trigger_round_trips_through_serialize_and_the_copy_fires(tmp_path: Path) -> None:
    from airflow.sdk.module_loading import import_string

    table = _mor_table(tmp_path / "trips")
    c = schedule_compaction(table, DUE).instant
    events = []
    for trigger in _triggers(table):
        path, kwargs = trigger.serialize()
        json.dumps(kwargs)  # what the triggerer stores must be plain JSON
        copy = import_string(path)(**kwargs)
        assert type(copy) is type(trigger) and copy.serialize() == (path, kwargs)

        async def first(t: Any = copy) -> Any:
            async for event in t.run():
                return event.payload

        events.append(asyncio.run(first()))
    assert events[0] == {"status": "success", "instant": c}
    assert events[1]["status"] == "ready" and events[1]["summary"]["missing"] == []


@pytest.mark.parametrize(
    ("field", "value"),
    [("poll_interval", float("nan")), ("poll_interval", float("inf")), ("timeout_at", float("nan"))],
)
def test_triggers_refuse_a_poll_or_deadline_that_is_not_a_finite_number(field: str, value: float) -> None:
    """NaN and infinity are not JSON (the triggerer stores the kwargs) and a NaN deadline never
    passes (``time.time() >= nan`` is false): refused when the trigger is made."""
    from airflow_lake_provider.triggers.compaction import CompactionPlanTrigger
    from airflow_lake_provider.triggers.partition_commit import PartitionCommitTrigger

    with pytest.raises(ValueError, match=f"{field}=.* must be a finite"):
        CompactionPlanTrigger("/t", **{field: value})
    with pytest.raises(ValueError, match=f"{field}=.* must be a finite"):
        PartitionCommitTrigger("/t", ["a"], **{field: value})


def test_the_compaction_trigger_fires_an_error_naming_the_table_when_it_disappears(tmp_path: Path) -> None:
    """A table deleted while its sensor waits: one error event at the next look, not a wait until
    the timeout."""
    import shutil

    from airflow_lake_provider.triggers.compaction import CompactionPlanTrigger

    table = _mor_table(tmp_path / "trips")
    trigger = CompactionPlanTrigger(str(table.uri), poll_interval=0.1, timeout_at=time.time() + 30)

    async def wait() -> tuple[Any, float]:
        async def delete() -> None:
            await asyncio.sleep(0.3)
            await asyncio.to_thread(shutil.rmtree, tmp_path / "trips")

        deleting, started = asyncio.create_task(delete()), time.monotonic()
        async for event in trigger.run():
            await deleting
            return event.payload, time.monotonic() - started
        raise AssertionError("no event")

    payload, seconds = asyncio.run(wait())
    assert payload == {
        "status": "error",
        "message": f"{table.uri} is not a Hudi table: no .hoodie/hoodie.properties",
        "fail_now": True,  # no table: a retry would wait for nothing, as the hooks' open refuses at once
    }
    assert seconds < 10


def test_a_deferrable_sensor_with_poke_interval_zero_defers_with_a_floor(tmp_path: Path) -> None:
    """Airflow accepts ``poke_interval=0``; the triggers refused it (ValueError, retried) and a
    zero poll would list the table back to back in the triggerer: the sensors defer with 1 s."""
    from airflow.sdk.exceptions import TaskDeferred

    from airflow_lake_provider.sensors.compaction import CompactionPlanSensor
    from airflow_lake_provider.triggers import MIN_POLL_SECONDS, trigger_poll_interval

    table = _mor_table(tmp_path / "trips")
    sensor = CompactionPlanSensor(
        task_id="wait", table_path=str(table.uri), deferrable=True, poke_interval=0, timeout=60
    )
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    assert deferred.value.trigger.poll_interval == MIN_POLL_SECONDS == 1.0
    assert (trigger_poll_interval(0), trigger_poll_interval(0.5), trigger_poll_interval(7)) == (1.0, 1.0, 7.0)


# The triggers' first look in a fresh process, with Airflow's watchdog beside it and a calibration of
# the machine's own scheduling delay (the same watchdog with the loop idle) just before each trigger.
_FIRST_LOOK = """
import asyncio, json, sys, time
from airflow.configuration import conf
from airflow_lake_provider.triggers.compaction import CompactionPlanTrigger
from airflow_lake_provider.triggers.partition_commit import PartitionCommitTrigger
# Airflow 3.2.0 has no such key (nor the watchdog): its 3.3 default.
threshold = conf.getfloat('triggerer', 'blocked_main_thread_warning_threshold', fallback=0.2)
async def watched(work):
    worst, done = [0.0], asyncio.Event()
    async def watchdog():
        while not done.is_set():
            t = time.monotonic(); await asyncio.sleep(0.1)
            worst[0] = max(worst[0], time.monotonic() - t)
    dog = asyncio.create_task(watchdog())
    await asyncio.sleep(0)  # the watchdog's first tick starts before the work's first step
    result = await work
    done.set(); await dog
    return result, worst[0]
async def first_event(trigger):
    async for event in trigger.run():
        return event.payload
def look(trigger):
    _, calibration = asyncio.run(watched(asyncio.sleep(1.0)))
    payload, worst = asyncio.run(watched(first_event(trigger)))
    return payload, worst, calibration, sorted(m for m in ('polars', 'pyarrow') if m in sys.modules)
uri, until = URI, time.time() + 60
out = [look(CompactionPlanTrigger(uri, 0.1, until)),
       look(PartitionCommitTrigger(uri, ['a'], None, None, 0.1, until))]
print(json.dumps({'threshold': threshold, 'out': out}))
"""


def loop_blocked(worst: float, calibration: float, threshold: float) -> bool:
    """Whether the watchdog saw the loop blocked: back later than ``threshold`` after its 0.1 s sleep,
    beyond the delay the same watchdog saw on an idle loop just before (the machine's load), that
    allowance capped at ``threshold`` so that a real block of 2x the threshold always counts."""
    allowance = min(max(calibration - 0.1, 0.0), threshold)
    return worst >= threshold + allowance


def test_the_loop_block_judgement_allows_for_load_but_not_for_a_real_block() -> None:
    assert not loop_blocked(0.15, 0.101, 0.2) and loop_blocked(0.21, 0.101, 0.2)
    assert not loop_blocked(0.35, 0.3, 0.2)  # a loaded machine: 0.2 s of delay with nothing running
    assert loop_blocked(0.4, 5.0, 0.2)  # however loaded: 0.4 s is a block


def test_triggers_never_block_the_event_loop_even_on_their_first_look(tmp_path: Path) -> None:
    """In a fresh triggerer-like process, Airflow's own watchdog (sleep 0.1 s, warn when the loop
    came back later than ``[triggerer] blocked_main_thread_warning_threshold``, 0.2 s) runs beside
    each trigger's first look, which imports what it needs and reads the table in a thread. Loading
    polars' native library would hold the interpreter lock for 0.1-0.5 s even from a thread: the
    compaction trigger only lists ``.hoodie/`` (no pyarrow, no polars), the partition commit
    planning loads pyarrow but not polars.

    Load-tolerant, still able to fail: the watchdog first measures the machine's own delay on an
    idle loop (``loop_blocked`` allows that much more), and a look judged blocked is measured again
    in a new process, up to 3 times. A real block happens in every process (a ``time.sleep(0.5)``
    planted in ``CompactionPlanTrigger.run`` before its first ``await`` fails all 3); load is random."""
    table = _mor_table(tmp_path / "trips")
    c = schedule_compaction(table, DUE).instant
    code = _FIRST_LOOK.replace("URI", repr(str(table.uri)))
    for attempt in range(1, 4):
        got = _fresh_python(code)
        threshold = got["threshold"]
        (compaction, c_worst, c_idle, c_loaded), (commit, p_worst, p_idle, p_loaded) = got["out"]
        print(
            f"\nattempt {attempt}: longest loop wake-up (0.1 s sleep): compaction trigger {c_worst:.3f} s "
            f"(idle loop {c_idle:.3f} s), partition commit {p_worst:.3f} s (idle loop {p_idle:.3f} s)"
        )
        assert compaction == {"status": "success", "instant": c} and c_loaded == []
        assert commit["status"] == "ready" and p_loaded == ["pyarrow"]
        assert threshold == 0.2
        blocked = [
            name
            for name, worst, idle in (("compaction", c_worst, c_idle), ("partition commit", p_worst, p_idle))
            if loop_blocked(worst, idle, threshold)
        ]
        if not blocked:
            return
    raise AssertionError(f"the {' and '.join(blocked)} trigger blocked the event loop in 3 fresh processes")


# -- provider metadata -------------------------------------------------------------------------------
def test_providers_manager_sees_every_module_the_hook_and_the_connection_form() -> None:
    from airflow.providers_manager import ProvidersManager

    from airflow_lake_provider.provider_info import get_provider_info

    info = get_provider_info()
    for kind in ("hooks", "operators", "sensors", "triggers"):
        listed = {m for entry in info[kind] for m in entry["python-modules"]}
        on_disk = {m for m in AIRFLOW_LAYER if m.split(".")[1] == kind and m not in HELPERS}
        assert listed == on_disk, kind
    pm = ProvidersManager()
    assert pm.providers["airflow-lake-provider"].data["connection-types"][0]["connection-type"] == "lake"
    behaviour = pm.field_behaviours["lake"]
    assert behaviour["hidden_fields"] == ["host", "schema", "port"]
    assert behaviour["relabeling"] == {"login": "AWS access key id", "password": "AWS secret access key"}
    widgets = {name: w for name, w in pm.connection_form_widgets.items() if name.startswith("extra__lake__")}
    fields = ("allow_http", "base_path", "endpoint", "region", "session_token")
    assert sorted(widgets) == [f"extra__lake__{f}" for f in fields]
    assert widgets["extra__lake__base_path"].field["schema"]["title"] == "Base path"
    # The secret key lives in the password field; the session token is masked too.
    assert [name for name, w in widgets.items() if w.is_sensitive] == ["extra__lake__session_token"]
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    hook = ProvidersManagerTaskRuntime().hooks["lake"]
    assert hook is not None and hook.hook_class_name == "airflow_lake_provider.hooks.lake.LakeHook"
    triggers = {t.trigger_class_name for t in pm.trigger if t.package_name == "airflow-lake-provider"}
    assert triggers == {m for m in AIRFLOW_LAYER if ".triggers." in m}


def test_provider_info_lists_the_integration_and_every_module_and_class_it_names_exists() -> None:
    """As Airflow's providers do: one integration, and under it the modules of each kind; every
    module imports and defines a class of its kind, every class named exists."""
    import importlib

    from airflow.sdk import BaseHook, BaseOperator, BaseSensorOperator
    from airflow.triggers.base import BaseTrigger

    from airflow_lake_provider.provider_info import INTEGRATION, get_provider_info

    info = get_provider_info()
    assert info["integrations"] == [
        {
            "integration-name": INTEGRATION,
            "external-doc-url": "https://hudi.apache.org/docs/table_management",
            "tags": ["apache", "software"],
        }
    ]
    kinds = {
        "hooks": BaseHook,
        "operators": BaseOperator,
        "sensors": BaseSensorOperator,
        "triggers": BaseTrigger,
    }
    found: dict[str, list[str]] = {}
    for kind, base in kinds.items():
        assert [entry["integration-name"] for entry in info[kind]] == [INTEGRATION], kind
        for name in info[kind][0]["python-modules"]:
            module = importlib.import_module(name)
            classes = [
                c.__name__
                for c in vars(module).values()
                if isinstance(c, type) and issubclass(c, base) and c.__module__ == name
            ]
            if kind == "operators":  # sensors are operators too: count them under sensors only
                classes = [c for c in classes if not issubclass(getattr(module, c), BaseSensorOperator)]
            assert classes, f"{name} lists no {kind[:-1]} class"
            found.setdefault(kind, []).extend(classes)
    assert {kind: sorted(names) for kind, names in found.items()} == {
        "hooks": ["LakeHook"],
        "operators": [
            "LakeWriteOperator",
            "PartitionCommitOperator",
            "RollbackFailedWritesOperator",
            "RunCompactionOperator",
            "ScheduleCleanOperator",
            "ScheduleCompactionOperator",
        ],
        "sensors": ["CompactionPlanSensor", "PartitionCommitSensor"],
        "triggers": ["CompactionPlanTrigger", "PartitionCommitTrigger"],
    }
    for conn in info["connection-types"]:
        module, _, name = conn["hook-class-name"].rpartition(".")
        hook = getattr(importlib.import_module(module), name)
        assert issubclass(hook, BaseHook) and hook.conn_type == conn["connection-type"] == "lake"
        assert hook.hook_name == conn["hook-name"]


def test_lake_write_operator_lives_in_operators_write_and_the_old_path_still_imports_it() -> None:
    from airflow_lake_provider.operators import rollback, write

    assert write.LakeWriteOperator.__module__ == "airflow_lake_provider.operators.write"
    assert rollback.LakeWriteOperator is write.LakeWriteOperator
    assert "LakeWriteOperator" in rollback.__all__


def test_the_connection_form_s_extra_fields_are_read_plain_or_prefixed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_LAKE_FORM",
        json.dumps(
            {
                "conn_type": "lake",
                "login": "AKIAFORM",
                "password": "form-secret",
                "extra": {
                    "extra__lake__base_path": "s3://bucket/lake",
                    "region": "eu-west-1",
                    "allow_http": True,
                },
            }
        ),
    )
    hook = LakeHook(lake_conn_id="lake_form")
    assert hook.resolve_table_path("trips") == "s3://bucket/lake/trips"
    assert hook.storage_env() == {
        "AWS_ACCESS_KEY_ID": "AKIAFORM",
        "AWS_SECRET_ACCESS_KEY": "form-secret",
        "AWS_REGION": "eu-west-1",
        "AWS_ALLOW_HTTP": "true",
    }


def test_every_operator_and_sensor_documents_its_templated_fields_and_xcom() -> None:
    import importlib

    from airflow.sdk import BaseOperator

    classes = [
        obj
        for m in AIRFLOW_LAYER
        if ".operators." in m or ".sensors." in m
        for _, obj in inspect.getmembers(importlib.import_module(m), inspect.isclass)
        if issubclass(obj, BaseOperator) and obj.__module__ == m
    ]
    assert len(classes) == 8
    for cls in classes:
        doc = inspect.getdoc(cls) or ""
        assert "XCom" in doc, cls.__name__
        for name in cls.template_fields:
            assert f":param {name}:" in doc, (cls.__name__, name)
            described = doc.split(f":param {name}:", 1)[1].split(":param", 1)[0]
            assert "(templated)" in described, (cls.__name__, name)


# -- configuration errors fail fast ------------------------------------------------------------------
def test_a_missing_spark_connection_fails_at_once_with_what_to_configure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    table = _mor_table(tmp_path / "trips")
    c = schedule_compaction(table, DUE).instant
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    with pytest.raises(LakeConfigError, match="Spark connection 'spark_default' is not defined") as caught:
        LakeHook().run_compaction(str(table.uri), spark_threshold_mb=0)
    assert isinstance(caught.value, AirflowFailException)  # no retry
    assert "retry" not in str(caught.value) and "AIRFLOW_CONN_SPARK_DEFAULT" in str(caught.value)
    assert table.timeline().get(c).state is State.REQUESTED  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("connection", "env", "message"),
    [
        ({"conn_type": "spark", "host": "yarn"}, {}, "neither HADOOP_CONF_DIR nor YARN_CONF_DIR"),
        ({"conn_type": "spark", "host": ""}, {}, "names no master"),
        (
            {"conn_type": "spark", "host": "local[1]"},
            {"sys.executable": True},
            r"spark-submit was not found .*: pip install 'airflow-lake-provider\[spark\]'",
        ),
        (
            {"conn_type": "spark", "host": "local[1]"},
            {"no_spark_extra": True},
            r"^a Spark run \(spark_conn_id='spark_broken'\) needs airflow\.providers\.apache\.spark\.hooks\."
            r"spark_submit, which is not installed: pip install 'airflow-lake-provider\[spark\]'$",
        ),
    ],
)
def test_an_invalid_spark_setup_fails_before_a_clean_plan_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, connection: dict, env: dict, message: str
) -> None:
    table = _cow_table(tmp_path / "trips")
    assert LakeHook().clean(str(table.uri), RETAIN_ONE, dry_run=True)["files_planned"] == 1
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_BROKEN", json.dumps(connection))
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    monkeypatch.delenv("YARN_CONF_DIR", raising=False)
    if env.get("sys.executable"):  # an environment without pyspark: nothing beside Python, nothing on PATH
        monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))
        monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    if env.get("no_spark_extra"):  # installed without [spark]: the Spark provider cannot be imported
        monkeypatch.setitem(sys.modules, "airflow.providers.apache.spark.hooks.spark_submit", None)
    before = [str(i) for i in table.timeline().instants]
    with pytest.raises(LakeConfigError, match=message):
        LakeHook().clean(
            str(table.uri),
            RETAIN_ONE,
            spark_threshold=0,
            spark_conn_id="spark_broken",
        )
    assert [str(i) for i in table.timeline().instants] == before  # no clean was scheduled


def test_yarn_with_its_configuration_folder_passes_the_checks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from airflow_lake_provider.hooks.spark import check_spark_setup

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_YARN", json.dumps({"conn_type": "spark", "host": "yarn"}))
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    monkeypatch.delenv("YARN_CONF_DIR", raising=False)
    binary = check_spark_setup(LakeHook(), "spark_yarn", {"HADOOP_CONF_DIR": str(tmp_path)})
    assert Path(binary).name == "spark-submit"
    with pytest.raises(LakeConfigError, match="is empty"):
        check_spark_setup(LakeHook(), "")


def test_a_bad_threshold_fails_and_leaves_the_plan_requested(tmp_path: Path) -> None:
    table = _mor_table(tmp_path / "trips")
    c = schedule_compaction(table, DUE).instant
    assert [i.state for i in table.timeline().filter([Action.COMPACTION])] == [State.REQUESTED]
    with pytest.raises(LakeConfigError, match="spark_threshold_mb='x' is not a number"):
        LakeHook().run_compaction(str(table.uri), c, spark_threshold_mb="x")


def test_an_undefined_lake_connection_fails_at_once_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A typo in ``lake_conn_id`` is configuration: Airflow's AirflowNotFoundException was retried."""
    from airflow.sdk.exceptions import AirflowFailException

    table = _mor_table(tmp_path / "trips")
    monkeypatch.delenv("AIRFLOW_CONN_NO_SUCH_LAKE", raising=False)
    with pytest.raises(LakeConfigError, match="lake connection 'no_such_lake' is not defined") as caught:
        LakeHook(lake_conn_id="no_such_lake").open_table(str(table.uri))
    assert isinstance(caught.value, AirflowFailException)  # no retry
    assert "AIRFLOW_CONN_NO_SUCH_LAKE" in str(caught.value)


def test_an_s3_table_without_the_s3_extra_fails_at_once_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Installed without ``[s3]`` (no obstore): a task on an s3:// table fails without retry, naming
    the extra to install."""
    from airflow.sdk.exceptions import AirflowFailException

    monkeypatch.setitem(sys.modules, "obstore", None)  # what an install without [s3] lacks
    monkeypatch.delitem(sys.modules, "airflow_lake_provider.lake.storage.s3", raising=False)
    with pytest.raises(LakeConfigError) as caught:
        LakeHook().open_table("s3://bucket/lake/trips")
    assert str(caught.value) == (
        "s3://bucket/lake/trips: a table on S3 needs obstore, which is not installed: "
        "pip install 'airflow-lake-provider[s3]'"
    )
    assert isinstance(caught.value, AirflowFailException)  # no retry


def test_a_relative_table_path_without_a_base_path_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a connection's ``base_path`` a relative path would land in the worker's current folder
    (and a Spark executor's, elsewhere): refused, nothing created."""
    monkeypatch.chdir(tmp_path)
    for path in ("trips", "./trips"):
        with pytest.raises(LakeConfigError, match="is relative") as caught:
            LakeHook().resolve_table_path(path)
        assert repr(path) in str(caught.value)
    # file://trips names the host "trips", as open_storage reads file: URIs.
    with pytest.raises(LakeConfigError, match=r"^file://trips: file URIs on another host \('trips'\)"):
        LakeHook().resolve_table_path("file://trips")
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_RELATIVE", '{"conn_type": "lake", "extra": {"base_path": "lake"}}')
    with pytest.raises(LakeConfigError, match="base_path 'lake' is relative"):
        LakeHook(lake_conn_id="lake_relative").resolve_table_path("trips")
    assert list(tmp_path.iterdir()) == []


def test_a_relative_input_path_is_refused_before_any_instant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative input is read from the worker's current folder, and a Spark write would hand it
    to executors with other current folders: refused up front, the table untouched."""
    import pyarrow.parquet as pq

    table = _mor_table(tmp_path / "trips")
    before = [layout.file_name(i) for i in table.timeline().instants]
    monkeypatch.chdir(tmp_path)
    pq.write_table(
        pa.table({"id": ["z"], "ts": pa.array([9], pa.int64()), "p": ["a"], "v": [9]}),
        tmp_path / "in.parquet",
    )
    with pytest.raises(LakeConfigError, match="input_path 'in.parquet' is relative"):
        LakeHook().write(str(table.uri), "in.parquet", "upsert")
    assert [layout.file_name(i) for i in LakeTable.open(table.uri).timeline().instants] == before
    assert LakeHook().write(str(table.uri), str(tmp_path / "in.parquet"), "upsert")["inserted"] == 1


# -- task-log tables ---------------------------------------------------------------------------------
def test_plan_and_result_tables_for_task_logs() -> None:
    from airflow_lake_provider.operators.summary import (
        compaction_files_table,
        compaction_plan_table,
        partition_commit_table,
        rollback_table,
    )

    plan = compaction_plan_table(
        {
            "a": {"file_groups": 2, "log_files": 3, "io_mb": 1.5},
            "": {"file_groups": 1, "log_files": 1, "io_mb": 0.25},
        }
    )
    assert plan.splitlines() == [
        "partition | file groups | log files | IO MB",
        "----------+-------------+-----------+------",
        "a         |           2 |         3 | 1.500",
        "<root>    |           1 |         1 | 0.250",
        "total     |           3 |         4 | 1.750",
    ]
    files = compaction_files_table(["a/f1.parquet", "a/f2.parquet", "b/x/f3.parquet"])
    assert [line.replace(" ", "") for line in files.splitlines()[2:]] == ["a|2", "b/x|1", "total|3"]
    commit = partition_commit_table(
        {
            "committed": ["dt=1"],
            "late_data": {"dt=0": ["20240101000000000"]},
            "partitions": {
                "dt=0": {"decision": "COMMITTED", "writes": 2, "partition_time": "2024-01-01T00:00:00+00:00"},
                "dt=1": {"decision": "COMMITTABLE", "writes": 1, "partition_time": None},
                "dt=2": {
                    "decision": "WAITING",
                    "writes": 1,
                    "partition_time": None,
                    "reason": "delay not passed",
                },
            },
        }
    )
    rows = [[c.strip() for c in line.split("|")] for line in commit.splitlines()[2:]]
    assert rows == [
        ["dt=0", "committed", "2", "2024-01-01T00:00:00+00:00", "late data"],
        ["dt=1", "committed now", "1", "", ""],
        ["dt=2", "waiting", "1", "", "delay not passed"],
    ]
    rolled = rollback_table(
        [
            {
                "instant": "2",
                "rolled_back": "1",
                "action": "deltacommit",
                "deleted": ["x", "y"],
                "resumed": True,
            }
        ]
    )
    assert [c.strip() for c in rolled.splitlines()[2].split("|")] == ["2", "1", "deltacommit", "2", "yes"]
