#!/usr/bin/env bash
# The whole product on the embedded SQLite default, in a temporary directory: a schedule that
# starts a billing workflow run every hour (a map over customers), the scheduler submitting the
# occurrences that are due, a decider serving the runs, a run's graph in the terminal, and the
# dashboard's address. Needs perfectqueue, perfectsched and pqflow on PATH (scripts/example.sh).
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d)
cd "$WORK"

echo "== one database file: $WORK/pq.db"
perfectqueue init
perfectsched init

echo "== a schedule: a billing run every hour, started two hours ago (three occurrences are due)"
START=$(( $(date +%s) / 3600 * 3600 - 7200 ))
perfectsched add billing billing '0 * * * *' '{"customers": 12, "blocked": ["customer-007"]}' --start "$START"
perfectsched list

echo "== the scheduler submits each due occurrence once (its key: the schedule and its time)"
perfectsched run --burst
perfectsched run --burst    # again: nothing more

echo "== a decider serves the runs: steps, and one task per customer (at most 5 at once)"
pqflow run "$HERE/billing/billing.py:Decider" --burst --processors 2 2>/dev/null
pqflow runs

RUN=$(pqflow runs --format json | python3 -c 'import json, sys; print(sorted(r["run_id"] for r in json.load(sys.stdin))[0])')
echo "== run $RUN"
pqflow status "$RUN"
echo "== what its steps computed: the customers' list and the report (pqflow status $RUN --format json)"
pqflow status "$RUN" --format json | python3 -c '
import json, sys
steps = json.load(sys.stdin)["steps"]
print("customers:", steps["customers"]["result"])
print("report:   ", json.dumps(steps["report"]["result"]))'
pqflow graph --run "$RUN"

echo "== the dashboard (pip install -e '.[web]'): queues, tasks, schedules and runs of this file"
echo "   pqweb -D sqlite:///$WORK/pq.db    then open http://127.0.0.1:8080/"
if [ -t 0 ] && [ -t 1 ] && command -v pqweb >/dev/null 2>&1 && [ -z "${TOUR_NO_DASHBOARD:-}" ]; then
  echo "   (starting it now; Ctrl-C stops it)"
  exec pqweb -D "sqlite:///$WORK/pq.db"
fi
echo "tour finished in $WORK"
