#!/usr/bin/env bash
# From a fresh clone: install into .venv and run the worker example end to end on SQLite.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || "${PYTHON:-python3}" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e . 2>&1 | grep -v -e "is ignored" >&2 || true
PATH="$PWD/.venv/bin:$PATH" exec examples/worker/run.sh
