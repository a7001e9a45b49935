#!/usr/bin/env bash
# Named queues on the embedded SQLite default (pq.db in a temporary directory): pause the queue of
# a partner API while it is down, then resume it with a rate limit of 4 calls a second.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PQ=${PERFECTQUEUE:-perfectqueue}
WORK=$(mktemp -d)
cd "$WORK"
$PQ init
for i in $(seq -w 1 12); do
  $PQ submit "invoice-$i" send_invoice "{\"invoice\": \"INV-$i\"}" --queue partner >/dev/null
done
for name in sales churn usage; do
  $PQ submit "report-$name" report "{\"name\": \"$name\"}" >/dev/null
done

echo "== the partner API is down: pause its queue; the reports go on"
$PQ pause partner
$PQ run "$HERE/partner.py:Worker" --queues partner,default --burst --processors 2
$PQ queues

echo "== the partner is back, at most 4 calls a second: limit, resume, serve"
$PQ limit partner --rate 4/s
$PQ resume partner
$PQ run "$HERE/partner.py:Worker" --queues partner,default --processors 2 --poll-interval 0.1 &
WORKER=$!
for _ in $(seq 1 300); do
  waiting=$($PQ stats --queue partner --format json | python3 -c 'import json,sys; s=json.load(sys.stdin); print(s["waiting"] + s["running"])')
  [ "$waiting" = 0 ] && break
  sleep 0.1
done
kill -TERM "$WORKER"; wait "$WORKER" || true
$PQ queues
echo "== what the partner saw"
$PQ list --queue partner --format json | python3 "$HERE/partner.py" summary
echo "example finished in $WORK"
