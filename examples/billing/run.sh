#!/usr/bin/env bash
# Bill every customer, then report: a map over customers on the embedded SQLite default.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d)
cd "$WORK"
perfectqueue init
pqflow start billing billing-2026-11 '{"customers": 25, "blocked": ["customer-007"]}'
pqflow run "$HERE/billing.py:Decider" --burst --processors 2 2>/dev/null
pqflow status billing-2026-11                      # bill: one line with its item counts
pqflow status billing-2026-11 --items bill          # one line per customer
pqflow why billing-2026-11 bill
pqflow graph --run billing-2026-11
pqflow status billing-2026-11 --format json | python3 -c \
  'import json, sys; print("report:", json.load(sys.stdin)["steps"]["report"]["result"])'
echo "example finished in $WORK"
