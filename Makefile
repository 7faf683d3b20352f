# The two set-up commands of the README:
#   make example   -> install into .venv, then run the MOR pipeline DAG end to end (examples/pipeline.py)
#   make test      -> install into .venv, then run the whole test suite (what CI runs via .ci/run)
# Both first make sure the system tools they need are there (scripts/system-deps.sh: only lookups
# when they are; missing ones installed with apt-get as root or through sudo, else a message naming
# them): python3's venv and java for both; PostgreSQL, Chromium and chromedriver for the real-Airflow
# test.
# The install is shared and idempotent: it reruns only when pyproject.toml, constraints.txt or
# excludes.txt change (the stamp file's name carries a hash of the three).
# pyspark-client trap: apache-airflow-providers-apache-spark pulls in pyspark-client 4.2.0, which
# writes into the same pyspark/ folder as pyspark 4.3.0 (uv installs both in parallel, so which file
# wins varies). The install leaves it out (excludes.txt): pyspark has all it has. (Before, pyspark was
# reinstalled over it after every install, and pyspark, an sdist, was built twice: 2-3 min and about
# 1 GB of uv cache per install.)

SHELL := /bin/bash
.DEFAULT_GOAL := test

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
UV := $(VENV)/bin/uv
DEPS_HASH := $(shell cat pyproject.toml constraints.txt excludes.txt | sha256sum | cut -c1-16)
STAMP := $(VENV)/.install-$(DEPS_HASH).stamp

PYTEST_ARGS ?=
ifeq ($(CI),true)
  # Reproducible Hypothesis runs, slowest tests listed, no .pytest_cache in the clone.
  export HYPOTHESIS_PROFILE ?= ci
  PYTEST_MODE_ARGS := -p no:cacheprovider --durations=15
  PIP_QUIET :=
else
  export HYPOTHESIS_PROFILE ?= dev
  PYTEST_MODE_ARGS :=
  PIP_QUIET := -q
endif

.PHONY: example test test-airflow-range test-deep mutation install system-deps-example system-deps-test

# SYSTEM_DEPS=skip: neither look nor install (a subset without Spark or the real-Airflow test, on a
# machine where you cannot install them).
SYSTEM_DEPS ?=
system-deps-example:
	@[ "$(SYSTEM_DEPS)" = skip ] || PYTHON=$(PYTHON) scripts/system-deps.sh venv java

system-deps-test:
	@[ "$(SYSTEM_DEPS)" = skip ] || PYTHON=$(PYTHON) scripts/system-deps.sh venv java postgresql chromium chromedriver

install: $(STAMP)

# pyspark is on PyPI as an sdist only, and uv kept a fresh build of it (~1.4 GB: sources and a
# 440 MB wheel) for every install on this machine, never reusing one: 50 installs filled the disk
# and broke a CI run. So the install builds pyspark's wheel once into a wheelhouse outside the
# clone (shared by every clone and by scripts/airflow-range-check.sh through UV_FIND_LINKS), and uv
# installs that wheel: no build per install. Delete the folder to rebuild.
WHEELHOUSE ?= $(HOME)/.cache/airflow-lake-provider/wheels
PYSPARK_VERSION := $(shell sed -n 's/^pyspark==//p' constraints.txt)
export UV_FIND_LINKS := $(abspath $(WHEELHOUSE))

$(STAMP):
	@set -e; start=$$(date +%s); \
	test -x $(PY) || $(PYTHON) -m venv $(VENV); \
	$(PY) -m pip install $(PIP_QUIET) --disable-pip-version-check -c constraints.txt uv; \
	mkdir -p $(WHEELHOUSE); \
	if ! ls $(WHEELHOUSE)/pyspark-$(PYSPARK_VERSION)-*.whl >/dev/null 2>&1; then \
	  echo "building pyspark $(PYSPARK_VERSION)'s wheel once into $(WHEELHOUSE)"; \
	  tmp=$$(mktemp -d $(WHEELHOUSE)/.build.XXXXXX); \
	  $(PY) -m pip wheel $(PIP_QUIET) --disable-pip-version-check --no-deps --no-cache-dir \
	    -w $$tmp pyspark==$(PYSPARK_VERSION) && mv $$tmp/pyspark-*.whl $(WHEELHOUSE)/; \
	  rm -rf $$tmp; \
	fi; \
	$(UV) pip install --python $(PY) --compile-bytecode -c constraints.txt --excludes excludes.txt \
	  -e '.[test,spark,s3]'; \
	if $(PY) -c 'import importlib.metadata as m; m.version("pyspark-client")' 2>/dev/null; then \
	  echo "a venv from before excludes.txt: removing pyspark-client, then pyspark's files again"; \
	  $(UV) pip uninstall --python $(PY) pyspark-client pyspark; \
	  $(UV) pip install --python $(PY) --no-deps --compile-bytecode -c constraints.txt pyspark; \
	fi; \
	rm -f $(VENV)/.install-*.stamp; touch $@; \
	echo "install: $$(( $$(date +%s) - start )) s"

example: system-deps-example $(STAMP)
	$(PY) examples/pipeline.py

test: system-deps-test $(STAMP)
	@set +e; start=$$(date +%s); \
	$(PY) -m pytest $(PYTEST_MODE_ARGS) $(PYTEST_ARGS); rc=$$?; \
	echo "pytest: $$(( $$(date +%s) - start )) s, exit $$rc"; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests (exit 5): that is a failure"; fi; \
	exit $$rc

# The built wheel, installed from PyPI without constraints.txt into a fresh venv per end of the
# supported Airflow range (the lowest, pyproject.toml's apache-airflow>=X, and the newest), each
# running tests/airflow against the installed package (scripts/airflow-range-check.sh). .ci/run runs
# it after `make test` and `make example`. ENDS="low" (or a version) runs some. Each end: 1.5-3.5 min
# of install, 6.5-12 min of tests on a loaded 2-core machine.
ENDS ?=
test-airflow-range: system-deps-example $(STAMP)
	scripts/airflow-range-check.sh $(ENDS)

# Every property test with 5,000 examples (not part of CI: hours; tests/property/property_support.py).
test-deep: $(STAMP)
	LAKE_DEEP=1 $(PY) -m pytest -p no:cacheprovider --timeout=0 tests/property $(PYTEST_ARGS)

# Mutation testing (mutmut) of the safety-critical modules, one module after another, one worker (not
# part of CI: hours for all modules). MODULE=clean-planner (or a list) runs some; the table prints
# killed/survived/score per module. tests/mutation/README.md says how to read and fix survivors.
MODULE ?=
# A rerun resumes: it names only the mutants not yet killed (`report.py run --all` retests all).
mutation: $(STAMP)
	$(PY) tests/mutation/report.py run $(MODULE)
