#!/usr/bin/env bash
# perfectsched end to end on the embedded SQLite default (pq.db in a temporary directory):
# a schedule whose start is 5 minutes in the past, the scheduler submitting the missed
# occurrences as queue tasks, and a perfectqueue worker running them.
# Needs perfectsched and perfectqueue on PATH (e.g. PATH=$PWD/.venv/bin:$PATH).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PS=${PERFECTSCHED:-perfectsched}
PQ=${PERFECTQUEUE:-perfectqueue}
WORK=$(mktemp -d)
cd "$WORK"

$PS init
# Every minute, starting 5 minutes ago: 5 (or 6) occurrences are already due.
START=$(( $(date +%s) - 300 ))
$PS add report report '* * * * *' '{"to": "ops@example.com"}' --start "$START"
$PS add nightly report '0 2 * * *' '{"to": "night-shift@example.com"}' -t America/New_York
$PS list
# What the nightly schedule will do (no database needed):
$PS next '0 2 * * *' -t America/New_York -n 3

# Submit every due occurrence as a queue task "<schedule key>.<scheduled time>", then exit.
$PS run --burst
# Running it again submits nothing: each occurrence is submitted exactly once.
$PS run --burst

# Execute the tasks with a perfectqueue worker, then show them (finished).
$PQ run "$HERE/handlers.py:Worker" --burst
$PQ list
$PS list
echo "example finished in $WORK"
