#!/usr/bin/env bash
# The ETL workflow started by hand and by a schedule, on the embedded SQLite default.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d)
cd "$WORK"
perfectsched init                                     # the schedule table and the queue table
pqflow start etl etl-by-hand '{"day": "2026-11-21"}'
# every night at 02:00 London time; started 3 days ago, so 3 runs are due (catch-up "all")
perfectsched add nightly etl '0 2 * * *' '{}' -t Europe/London -s "$(( $(date +%s) - 3 * 86400 ))"
perfectsched run --burst                              # submits the due occurrences: runs nightly.<time>
pqflow run "$HERE/etl.py:Decider" --burst --processors 2 2>/dev/null
pqflow runs
pqflow status etl-by-hand
pqflow graph --run etl-by-hand
echo "example finished in $WORK"
