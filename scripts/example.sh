#!/usr/bin/env bash
# From a fresh clone: install into .venv (with the dashboard) and run the tour of the whole product
# on SQLite: a schedule starting workflow runs (a map over customers), the scheduler, a decider,
# a run's graph in the terminal, and the dashboard (started when run from a terminal).
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== installing pq into .venv (pip install -e '.[web]'; a minute or two the first time)"
[ -x .venv/bin/python ] || "${PYTHON:-python3}" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[web]' 2>&1 | grep -v -e "is ignored" >&2 || true
PATH="$PWD/.venv/bin:$PATH" exec examples/tour/run.sh
