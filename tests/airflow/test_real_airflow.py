"""A real Airflow, used the way a person does: Airflow's own processes (api-server, scheduler,
dag-processor, triggerer) on 127.0.0.1 with a PostgreSQL metadata DB started by the test (SQLite
where PostgreSQL cannot run: said on stderr and as a warning), the repository's ``dags/`` and a
Spark connection to local mode.

1. Through the REST API (``/api/v2``, a JWT from the simple auth manager as the UI gets it): the MOR
   pipeline DAG is triggered with a compaction threshold it does not reach, so its deferrable sensor
   waits in the triggerer; the test then schedules the plan as an external writer would, the
   triggerer fires, and the run compacts and cleans. The table is checked with hudi-rs.
2. A headless Chromium (Debian's, through chromedriver) logs in on the UI, triggers the same DAG from
   its page with the defaults, and sees the run page say Success. The screenshot is kept in
   ``test-artifacts/`` (git-ignored).
"""

from __future__ import annotations

import shutil
import tempfile
import time
import urllib.parse
import warnings
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from airflow_stack import AirflowStack, running_airflow
from dag_helpers import expected_pipeline_trips
from hudi import HudiTableBuilder

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]

DAG_ID = "example_lake_mor_pipeline"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@pytest.fixture(scope="module")
def airflow(repo_root: Path) -> Iterator[AirflowStack]:
    # Not pytest's tmp_path: PostgreSQL runs as its own user and needs to reach its folders.
    folder = Path(tempfile.mkdtemp(prefix="lake-real-airflow-"))
    try:
        with running_airflow(repo_root, folder) as stack:
            if stack.database != "postgresql":
                warnings.warn(
                    "PostgreSQL could not run here: the real-Airflow test used SQLite", stacklevel=1
                )
            stack.wait_for_dag(DAG_ID)
            yield stack
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _trips(path: Path) -> list[tuple]:
    table = pa.Table.from_batches(HudiTableBuilder.from_base_uri(str(path)).build().read())
    columns = ("uuid", "ts", "fare", "city")
    return sorted(zip(*(table.column(c).to_pylist() for c in columns), strict=True))


def test_rest_trigger_runs_the_pipeline_with_the_sensor_deferred_to_the_triggerer(
    airflow: AirflowStack,
) -> None:
    from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction
    from airflow_lake_provider.lake.table.table import LakeTable

    token = airflow.token()
    run = airflow.api(
        "POST",
        f"/dags/{DAG_ID}/dagRuns",
        {"logical_date": None, "conf": {"compaction_delta_commits": 4}},
        token=token,
    )
    run_id = run["dag_run_id"]
    # 3 delta commits do not make a compaction due at 4: schedule_compaction says NO_WORK and the
    # sensor hands over to the triggerer.
    deadline = time.monotonic() + 300
    while (states := airflow.task_states(DAG_ID, run_id)).get("wait_for_plan") != "deferred":
        assert time.monotonic() < deadline, f"wait_for_plan never deferred: {states}\n{airflow.logs()}"
        assert "failed" not in states.values(), f"{states}\n{airflow.logs()}"
        time.sleep(2)
    assert airflow.xcom(DAG_ID, run_id, "schedule_compaction")["outcome"] == "NO_WORK"
    # An external writer (here: this test, as Spark Hudi with inline scheduling would) requests a plan.
    table_path = Path(airflow.env["LAKE_EXAMPLES_ROOT"]) / "trips"
    plan = schedule_compaction(LakeTable.open(table_path), {"hoodie.compact.inline.max.delta.commits": "3"})
    assert plan.instant is not None
    # Only the triggerer can resume the deferred sensor now.
    state = airflow.wait_for_run(DAG_ID, run_id)
    assert state == "success", f"{airflow.task_states(DAG_ID, run_id)}\n{airflow.logs()}"
    assert str(airflow.xcom(DAG_ID, run_id, "wait_for_plan")) == plan.instant
    compacted = airflow.xcom(DAG_ID, run_id, "compact")
    assert compacted["outcome"] == "COMPLETED" and compacted["instant"] == plan.instant
    assert airflow.xcom(DAG_ID, run_id, "clean")["deleted_files"] == 9
    assert _trips(table_path) == expected_pipeline_trips()


def test_ui_login_trigger_and_success_in_chromium(airflow: AirflowStack, repo_root: Path) -> None:
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.fail("Chromium is missing: apt-get install chromium chromium-driver (make test does)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    artifacts = repo_root / "test-artifacts"
    artifacts.mkdir(exist_ok=True)
    profile = tempfile.mkdtemp(prefix="lake-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1400,1000",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    browser = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        browser.set_page_load_timeout(60)
        wait = WebDriverWait(browser, 60)
        browser.get(f"{airflow.url}/dags/{DAG_ID}")
        # Not logged in: the simple auth manager's login page, then back to the DAG.
        wait.until(ec.presence_of_element_located((By.NAME, "username"))).send_keys("admin")
        browser.find_element(By.NAME, "password").send_keys(airflow.password)
        browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, "button[aria-label='Trigger Dag']"))).click()
        trigger = (By.XPATH, "//*[@role='dialog']//button[normalize-space()='Trigger']")
        wait.until(ec.element_to_be_clickable(trigger)).click()
        wait.until(lambda b: "/runs/" in b.current_url)
        run_id = urllib.parse.unquote(browser.current_url.rstrip("/").rsplit("/runs/", 1)[1])
        state = airflow.wait_for_run(DAG_ID, run_id)
        browser.refresh()
        badge = (By.XPATH, f"//*[normalize-space()='{state.capitalize()}']")
        wait.until(ec.visibility_of_element_located(badge))
        browser.save_screenshot(str(artifacts / "real-airflow-ui-run.png"))
        assert state == "success", f"{airflow.task_states(DAG_ID, run_id)}\n{airflow.logs()}"
        body = browser.find_element(By.TAG_NAME, "body").text
        assert "Success" in body and "admin" in body  # the run page names its triggering user
    except Exception:
        browser.save_screenshot(str(artifacts / "real-airflow-ui-failure.png"))
        raise
    finally:
        browser.quit()
        shutil.rmtree(profile, ignore_errors=True)
    # A second run on the same table ends with the same rows (the pipeline is repeatable).
    assert _trips(Path(airflow.env["LAKE_EXAMPLES_ROOT"]) / "trips") == expected_pipeline_trips()


def test_the_running_ui_shows_the_lake_connection_form_and_the_provider(airflow: AirflowStack) -> None:
    """What the connection page renders comes from ``/ui/connections/hook_meta``; the provider is
    listed by ``airflow providers list`` with every module kind."""
    import json
    import subprocess
    import sysconfig
    import urllib.request

    request = urllib.request.Request(
        f"{airflow.url}/ui/connections/hook_meta", headers={"Authorization": f"Bearer {airflow.token()}"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        meta = {m["connection_type"]: m for m in json.loads(response.read())}
    lake = meta["lake"]
    assert lake["hook_class_name"] == "airflow_lake_provider.hooks.lake.LakeHook"
    assert {k for k, v in lake["standard_fields"].items() if isinstance(v, dict) and v["hidden"]} == {
        "url_schema",
        "host",
        "port",
    }
    assert lake["standard_fields"]["password"]["title"] == "AWS secret access key"
    assert set(lake["extra_fields"]) == {"base_path", "endpoint", "region", "allow_http", "session_token"}

    airflow_bin = str(Path(sysconfig.get_path("scripts")) / "airflow")
    listed = subprocess.run(
        [airflow_bin, "providers", "list", "--output", "json"],
        env=airflow.env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    names = {p["package_name"] for p in json.loads(listed.stdout)}
    assert "airflow-lake-provider" in names
