#!/usr/bin/env bash
# End-to-end example on the embedded SQLite default (pq.db in a temporary directory).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PQ=${PERFECTQUEUE:-perfectqueue}
WORK=$(mktemp -d)
cd "$WORK"
$PQ init
$PQ submit greet-1 greet '{"name": "Ada"}'
$PQ submit invoice-acme invoice '{"customer": "acme", "flaky": true}' --max-attempts 3
$PQ submit invoice-globex invoice '{"customer": "globex"}' -u globex --max-running 1
$PQ submit greet-1 greet '{}' || echo "(duplicate key refused with exit code $? — already submitted)"
# retry_wait 0: retry the flaky task at once instead of after 300 s
cat > pq.toml <<'TOML'
[development]
retry_wait = 0
TOML
$PQ run "$HERE/tasks.py:Worker" -c pq.toml --burst --processors 2
$PQ list
$PQ stats
echo "example finished in $WORK"
