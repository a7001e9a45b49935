#!/usr/bin/env bash
# Start throwaway MariaDB and PostgreSQL servers on 127.0.0.1 for the test suite.
# Idempotent: installs packages when missing (as root, with apt), reuses running servers.
# Source it to get TEST_MYSQL_URL and TEST_PG_URL exported:   . scripts/start-databases.sh
# Stop them with: scripts/stop-databases.sh
# Data lives under ${PQ_DB_ROOT:-/tmp/pq-test-dbs}; nothing listens beyond loopback.

_pq_fail() { echo "[databases] $*" >&2; return 1 2>/dev/null || exit 1; }

PQ_DB_ROOT=${PQ_DB_ROOT:-/tmp/pq-test-dbs}
MARIADB_RUNDIR=$PQ_DB_ROOT/mariadb
MARIADB_DATADIR=$MARIADB_RUNDIR/data
MARIADB_SOCKET=$MARIADB_RUNDIR/mysqld.sock
MARIADB_PORT=${MARIADB_PORT:-3306}
PG_RUNDIR=$PQ_DB_ROOT/postgres
PG_DATADIR=$PG_RUNDIR/data
PG_PORT=${PG_PORT:-5432}
DB_NAME=qtest
DB_USER=qtest
DB_PASSWORD=qtestpw

_pq_apt_install() {
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    _pq_fail "missing $*; install it (needs root with apt) or set TEST_MYSQL_URL/TEST_PG_URL"
    return 1
  fi
  echo "[databases] installing $*" >&2
  export DEBIAN_FRONTEND=noninteractive
  if [ -z "${_PQ_APT_UPDATED:-}" ]; then apt-get update -qq >/dev/null 2>&1; _PQ_APT_UPDATED=1; fi
  apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1 || _pq_fail "apt-get install $* failed"
}

# Throwaway servers write each commit to the operating system but never wait for the disk: a
# commit survives the server's crash (the restart scenario's SIGKILL), not the machine's, which no
# test makes. A commit costs a write instead of an fsync: 3 to 7 times the commits per second.
_PQ_MARIADB_NO_FLUSH="--innodb-flush-log-at-trx-commit=2 --innodb-doublewrite=0"
_PQ_PG_NO_FLUSH="-c fsync=off -c full_page_writes=off"

_pq_start_mariadb() {
  if ! command -v mariadbd >/dev/null 2>&1 || ! command -v mariadb >/dev/null 2>&1; then
    _pq_apt_install mariadb-server mariadb-client || return 1
  fi
  mkdir -p "$MARIADB_RUNDIR"
  if ! mariadb-admin --no-defaults --socket="$MARIADB_SOCKET" -uroot --connect-timeout=2 status >/dev/null 2>&1; then
    if [ ! -d "$MARIADB_DATADIR/mysql" ]; then
      mkdir -p "$MARIADB_DATADIR"
      mariadb-install-db --no-defaults --datadir="$MARIADB_DATADIR" --user=root \
        --auth-root-authentication-method=socket --skip-test-db >"$MARIADB_RUNDIR/install.log" 2>&1 \
        || { cat "$MARIADB_RUNDIR/install.log" >&2; _pq_fail "mariadb-install-db failed"; return 1; }
    fi
    # shellcheck disable=SC2086
    nohup mariadbd --no-defaults --user=root --datadir="$MARIADB_DATADIR" --socket="$MARIADB_SOCKET" \
      --port="$MARIADB_PORT" --bind-address=127.0.0.1 --skip-name-resolve \
      --pid-file="$MARIADB_RUNDIR/mysqld.pid" --log-error="$MARIADB_RUNDIR/mysqld.err" \
      --character-set-server=utf8mb4 --collation-server=utf8mb4_general_ci \
      --max-connections=500 --innodb-lock-wait-timeout=10 $_PQ_MARIADB_NO_FLUSH ${MARIADB_EXTRA_ARGS:-} \
      </dev/null >/dev/null 2>&1 &
    local pid=$!
    for _ in $(seq 1 300); do
      mariadb-admin --no-defaults --socket="$MARIADB_SOCKET" -uroot status >/dev/null 2>&1 && break
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    mariadb-admin --no-defaults --socket="$MARIADB_SOCKET" -uroot status >/dev/null 2>&1 \
      || { tail -n 30 "$MARIADB_RUNDIR/mysqld.err" >&2; _pq_fail "MariaDB did not start"; return 1; }
  fi
  mariadb --no-defaults --socket="$MARIADB_SOCKET" -uroot <<SQL || { _pq_fail "MariaDB user setup failed"; return 1; }
CREATE DATABASE IF NOT EXISTS \`$DB_NAME\` CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci;
CREATE USER IF NOT EXISTS '$DB_USER'@'127.0.0.1' IDENTIFIED BY '$DB_PASSWORD';
CREATE USER IF NOT EXISTS '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASSWORD';
GRANT ALL PRIVILEGES ON \`${DB_NAME}%\`.* TO '$DB_USER'@'127.0.0.1';
GRANT ALL PRIVILEGES ON \`${DB_NAME}%\`.* TO '$DB_USER'@'localhost';
SQL
  export TEST_MYSQL_URL="mysql+pymysql://$DB_USER:$DB_PASSWORD@127.0.0.1:$MARIADB_PORT/$DB_NAME"
  export PQ_MARIADB_PIDFILE="$MARIADB_RUNDIR/mysqld.pid"
  echo "[databases] MariaDB ready on 127.0.0.1:$MARIADB_PORT" >&2
}

_pq_pg_bin() {
  local d
  for d in /usr/lib/postgresql/*/bin; do [ -x "$d/initdb" ] && { echo "$d"; return 0; }; done
  return 1
}

_pq_start_postgres() {
  local bin
  bin=$(_pq_pg_bin) || { _pq_apt_install postgresql || return 1; bin=$(_pq_pg_bin) || { _pq_fail "no initdb found"; return 1; }; }
  id postgres >/dev/null 2>&1 || useradd -r -m postgres
  mkdir -p "$PG_RUNDIR" && chown postgres: "$PG_RUNDIR"
  if [ ! -s "$PG_DATADIR/PG_VERSION" ]; then
    runuser -u postgres -- "$bin/initdb" -D "$PG_DATADIR" -U postgres --auth-local=trust \
      --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 >"$PG_RUNDIR/initdb.log" 2>&1 \
      || { cat "$PG_RUNDIR/initdb.log" >&2; _pq_fail "initdb failed"; return 1; }
  fi
  if ! runuser -u postgres -- "$bin/pg_ctl" -D "$PG_DATADIR" status >/dev/null 2>&1; then
    runuser -u postgres -- "$bin/pg_ctl" -D "$PG_DATADIR" -l "$PG_RUNDIR/pg.log" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -c port=$PG_PORT -c unix_socket_directories=$PG_RUNDIR -c max_connections=300 $_PQ_PG_NO_FLUSH" \
      start >/dev/null || { tail -n 30 "$PG_RUNDIR/pg.log" >&2; _pq_fail "PostgreSQL did not start"; return 1; }
  fi
  runuser -u postgres -- "$bin/psql" -h "$PG_RUNDIR" -p "$PG_PORT" -U postgres -d postgres -qAt -v ON_ERROR_STOP=1 <<SQL >/dev/null || { _pq_fail "PostgreSQL user setup failed"; return 1; }
SELECT format('CREATE ROLE %I LOGIN', '$DB_USER') WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '$DB_USER')\gexec
ALTER ROLE "$DB_USER" LOGIN CREATEDB PASSWORD '$DB_PASSWORD';
SELECT format('CREATE DATABASE %I OWNER %I', '$DB_NAME', '$DB_USER') WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = '$DB_NAME')\gexec
SQL
  export TEST_PG_URL="postgresql+psycopg://$DB_USER:$DB_PASSWORD@127.0.0.1:$PG_PORT/$DB_NAME"
  export PQ_PG_DATADIR="$PG_DATADIR" PQ_PG_BIN="$bin"
  echo "[databases] PostgreSQL ready on 127.0.0.1:$PG_PORT" >&2
}

_pq_start_mariadb && _pq_start_postgres
