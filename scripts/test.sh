#!/usr/bin/env bash
# The whole test suite, from a fresh clone:   scripts/test.sh [pytest args]
# Creates .venv, installs the project with its test extras, starts throwaway MariaDB and
# PostgreSQL servers on 127.0.0.1 (installing them with apt when run as root), runs pytest.
# With CI set, a database that cannot be started is a failure, not a skip.
set -euo pipefail
cd "$(dirname "$0")/.."
# Python keeps each module's bytecode (and pytest each test file's rewritten asserts) in
# __pycache__: otherwise every test process and every worker it starts compiles them anew.
unset PYTHONDONTWRITEBYTECODE
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[postgres,test]' 2>&1 \
  | grep -v -e "is ignored" -e "^$" >&2 || true
.venv/bin/python -c "import queue_core, psycopg, pytest" || { echo "install failed" >&2; exit 1; }
[ -x .venv/bin/ruff ] && [ -x .venv/bin/mypy ] || { echo "install failed: ruff or mypy missing" >&2; exit 1; }
# Graphviz renders pqflow graphs as SVG/PNG (optional for users); faketime shifts the clocks of
# the clock-skew tests' processes; chromium is the browser of the dashboard's browser tests
# (driven by Playwright, never downloaded by it). Installed here so their tests run.
missing=""
command -v dot >/dev/null 2>&1 || missing="$missing graphviz"
[ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ] || missing="$missing faketime"
[ -x /usr/bin/chromium ] || missing="$missing chromium"
if [ -n "$missing" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  (export DEBIAN_FRONTEND=noninteractive; apt-get update -qq >/dev/null 2>&1
   apt-get install -y -qq --no-install-recommends $missing >/dev/null 2>&1) || echo "not installed:$missing" >&2
fi
# Lint, format and type checks of the packages and the tests (configured in pyproject.toml): a finding
# fails the run: the packages, the tests, the benchmarks and the reliability harness alike.
code=(queue_core perfectsched pqflow pqweb tests benchmarks reliability)
.venv/bin/ruff check "${code[@]}"
.venv/bin/ruff format --check "${code[@]}"
.venv/bin/mypy
if ! . scripts/start-databases.sh; then
  if [ -n "${CI:-}" ]; then echo "databases could not be started (CI): failing" >&2; exit 1; fi
  echo "databases could not be started: their tests will be skipped" >&2
fi
if [ "$#" -gt 0 ]; then
  exec .venv/bin/python -m pytest "$@"
fi
# The whole suite in phases, each run even when an earlier one failed (the exit status is the
# first failure's), each one's time printed at the end. First the suites that run in the test
# process (every test has tables and files of its own): in parallel, pytest-xdist's workers
# stealing tests from each other (a file's tests stay together unless a worker runs out; no phase
# waits for one long file at its end). Then the acceptance suites of real worker, scheduler and
# server processes, four tests at a time (PQ_PROCESS_TEST_WORKERS; their Python processes are
# forked from pq's imports: tests/forkserver.py): they mostly wait on each other and on
# the databases, and each deadline leaves seconds to spare. Then, one test at a time, the
# acceptance tests that time handler starts (marker timing: a rate limit's bound holds for
# processes not stalled for tens of milliseconds). Then the fault scenarios, two at a time (each
# runs for a set time; three at a time starved a long task's heartbeat past its lease). Then the
# smoke runs of the benchmark harness, one per database, all three at once (they load the machine,
# and check results, not speeds). Last, one at a time: the database restarts (a session of their
# own: the private servers they kill are locked by one session at a time) and the browser.
# Whole folders, so that a new test file is never left out; the browser tests are the files
# tests/web/test_web_browser*.py.
parallel=(tests/unit tests/conformance tests/integration tests/hostile tests/workflow_faults tests/test_architecture.py
          tests/web --ignore-glob='tests/web/test_web_browser*')
processes=(tests/acceptance)
faults=(tests/reliability -k "not test_db_restarts")
serial=(tests/reliability/test_scenarios.py::test_db_restarts tests/web/test_web_browser*.py)
status=0
times=" setup: ${SECONDS} s;"
phase() {  # phase NAME PYTEST-ARGS...: run pytest; keep the first failure's exit status; time it
  local name=$1 rc=0 start=$SECONDS
  shift
  .venv/bin/python -m pytest "$@" || rc=$?
  if [ "$status" -eq 0 ]; then status=$rc; fi
  times="$times $name: $((SECONDS - start)) s;"
}
phase in-process -n "${PQ_TEST_WORKERS:-3}" --dist worksteal "${parallel[@]}"
phase processes -n "${PQ_PROCESS_TEST_WORKERS:-4}" --dist worksteal -m "not timing" "${processes[@]}"
phase timing -m timing "${processes[@]}"
phase faults -n "${PQ_FAULT_TEST_WORKERS:-2}" --dist worksteal "${faults[@]}"
phase benchmarks -n 3 tests/test_benchmarks_quick.py
phase serial "${serial[@]}"
echo "[test.sh] times:$times total $SECONDS s" >&2
exit "$status"
