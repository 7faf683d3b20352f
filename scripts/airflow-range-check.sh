#!/usr/bin/env bash
# Does the provider install into an existing Airflow? Builds the wheel, then for each end of the
# supported Airflow range (the lowest, read from pyproject.toml's `apache-airflow>=X`, and the newest
# on PyPI) makes a fresh venv, installs that Airflow and the wheel with its extras from PyPI WITHOUT
# constraints.txt (so the ranges of pyproject.toml must resolve on their own), and runs the Airflow
# tests against the INSTALLED package: pytest runs from a copy of tests/ and dags/ outside the
# checkout, with no PYTHONPATH, and the script checks where airflow_lake_provider is imported from.
# Not run: tests/airflow/test_real_airflow.py (it needs PostgreSQL and Chromium, see the Makefile).
#
# Usage: scripts/airflow-range-check.sh [low|high|VERSION ...]   (default: low high)
# Env: UV (default .venv/bin/uv), PYTHON (default python3), PYTEST_ARGS (extra pytest arguments),
#      KEEP=1 keeps the work folder.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
UV=${UV:-$repo/.venv/bin/uv}
PYTHON=${PYTHON:-python3}
[ -x "$UV" ] || { echo "airflow-range-check: uv not found at $UV (run make install, or set UV)" >&2; exit 1; }

low=$(sed -n 's/^ *"apache-airflow>=\([0-9][0-9.]*\)".*/\1/p' pyproject.toml)
[ -n "$low" ] || { echo "airflow-range-check: no \"apache-airflow>=X\" in pyproject.toml" >&2; exit 1; }
ends=("$@")
[ ${#ends[@]} -gt 0 ] || ends=(low high)

work=$(mktemp -d "${TMPDIR:-/tmp}/airflow-range.XXXXXX")
[ "${KEEP:-}" = 1 ] || trap 'rm -rf "$work"' EXIT
t0=$(date +%s)
say() { echo "[airflow-range $(($(date +%s) - t0)) s] $*"; }

"$UV" build -q --wheel --out-dir "$work/dist" "$repo"
wheel=$(echo "$work"/dist/airflow_lake_provider-*.whl)
say "built $(basename "$wheel")"
# The tests, the example DAGs and the README they load; the package sources stay behind. pyproject.toml comes
# along for pytest's settings only (markers, timeout): nothing in the copy is importable as the package.
mkdir "$work/checkout"
cp -r tests dags pyproject.toml README.md "$work/checkout/"
find "$work/checkout" -name __pycache__ -prune -exec rm -rf {} +

summary=()
for end in "${ends[@]}"; do
  case "$end" in
    low) spec="apache-airflow==$low" ;;
    high) spec="apache-airflow" ;;  # the newest release the resolver accepts
    *) spec="apache-airflow==$end" ;;
  esac
  # Airflow 3.2.x requires fastapi>=0.129 with no upper bound, and its Execution API breaks on fastapi
  # 0.137+ (pydantic "needs a discriminator field" for TITerminalStatePayload: every task fails).
  # Airflow 3.3 caps it (<0.137). An existing 3.2 installation has fastapi from Airflow's own
  # constraints file (which pins a working one); an unconstrained install today does not, so the
  # cap goes in here, as Airflow's constraints would put it.
  era=()
  case "$spec" in *"==3.2."*) era=("fastapi<0.137") ;; esac
  venv="$work/venv-$end"
  py="$venv/bin/python"
  start=$(date +%s)
  "$UV" venv -q --python "$PYTHON" "$venv"
  # The test extra brings the test tools (pytest, moto, hudi-rs, ...); no -c constraints.txt here.
  # --compile-bytecode as pip does by default (uv does not): without .pyc files every fresh process
  # compiles what it imports (PYTHONDONTWRITEBYTECODE=1 here), and the partition commit trigger's
  # first look, compiling the core in its thread, held the triggerer's loop for 0.7-1.1 s.
  "$UV" pip install -q --compile-bytecode --python "$py" "$spec" ${era[@]+"${era[@]}"} "$wheel[spark,s3,test]"
  # pyspark-client trap (see the Makefile): the Spark provider's pyspark-client writes into pyspark/;
  # put pyspark's own files back, same version, without touching pyspark-client.
  pyspark_version=$("$py" -c 'import importlib.metadata as m; print(m.version("pyspark"))')
  "$UV" pip uninstall -q --python "$py" pyspark
  "$UV" pip install -q --compile-bytecode --python "$py" --no-deps "pyspark==$pyspark_version"
  installed=$(($(date +%s) - start))
  airflow_version=$("$py" -c 'import importlib.metadata as m; print(m.version("apache-airflow"))')
  where=$(cd "$work/checkout" && env -u PYTHONPATH "$py" -c \
    'import airflow_lake_provider as p; print(p.__file__)')
  case "$where" in
    "$venv"/lib/*/site-packages/*) ;;
    *) echo "airflow-range-check: airflow_lake_provider imported from $where, not the venv" >&2; exit 1 ;;
  esac
  say "$end: Airflow $airflow_version, pyspark $pyspark_version, installed in ${installed} s; package at $where"

  start=$(date +%s)
  set +e
  (cd "$work/checkout" && env -u PYTHONPATH "$py" -m pytest -p no:cacheprovider \
    tests/airflow --ignore=tests/airflow/test_real_airflow.py ${PYTEST_ARGS:-})
  rc=$?
  set -e
  tested=$(($(date +%s) - start))
  summary+=("$end: Airflow $airflow_version: install ${installed} s, tests ${tested} s, pytest exit $rc")
  say "${summary[-1]}"
  [ $rc -eq 0 ] || { printf '%s\n' "${summary[@]}"; exit $rc; }
  rm -rf "$venv"  # keep the disk use to one venv at a time
done
printf '%s\n' "${summary[@]}"
say "done"
