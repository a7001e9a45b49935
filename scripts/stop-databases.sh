#!/usr/bin/env bash
# Stop the servers started by scripts/start-databases.sh (by PID; data is kept).
PQ_DB_ROOT=${PQ_DB_ROOT:-/tmp/pq-test-dbs}
if [ -s "$PQ_DB_ROOT/mariadb/mysqld.pid" ]; then kill "$(cat "$PQ_DB_ROOT/mariadb/mysqld.pid")" 2>/dev/null || true; fi
if [ -s "$PQ_DB_ROOT/postgres/data/postmaster.pid" ]; then kill -INT "$(head -1 "$PQ_DB_ROOT/postgres/data/postmaster.pid")" 2>/dev/null || true; fi
