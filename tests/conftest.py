"""Shared fixtures: one real database per backend, a fresh table per test.

Backends: sqlite (a temp file), mysql (TEST_MYSQL_URL) and postgres (TEST_PG_URL).
A backend whose URL is missing or unreachable is skipped locally but FAILS when the
environment variable CI is set (so CI can never pass without the real servers).
"""

from __future__ import annotations

import itertools
import os
import shutil
import sqlite3
import threading
import uuid
import zlib
from contextlib import contextmanager

import pytest
import sqlalchemy as sa
from table_pool import OWN_TABLES, TablePool

import queue_core
from queue_core.clock import FakeClock


def _share_preferred_tls_in_test_engines() -> None:
    """The engines tests make themselves connect to MySQL as pq's do (``store/pymysql_tls.py``):
    PyMySQL's own connection builds a TLS context each time, some 25 ms of CPU. (So pq's own use
    of it is checked in a process without this: tests/integration/test_mysql_tls_context.py.)"""
    from sqlalchemy.dialects.mysql.pymysql import MySQLDialect_pymysql

    from queue_core.store import pymysql_tls

    MySQLDialect_pymysql.connect = lambda self, *cargs, **cparams: pymysql_tls.connect(*cargs, **cparams)


_share_preferred_tls_in_test_engines()

BACKENDS = ["sqlite", "mysql", "postgres"]
_ENV = {"mysql": "TEST_MYSQL_URL", "postgres": "TEST_PG_URL"}
_reachable: dict[str, str | None] = {}
_counter = itertools.count()


def _server_url(backend: str) -> str:
    if backend in _reachable:
        url = _reachable[backend]
    else:
        url = os.environ.get(_ENV[backend])
        if url:
            try:
                eng = sa.create_engine(url)
                with eng.connect():
                    pass
                eng.dispose()
            except Exception as exc:  # noqa: BLE001
                _reachable[backend] = None
                _reachable[backend + ":why"] = f"{type(exc).__name__}"
                url = None
        _reachable[backend] = url
    if not url:
        msg = f"{backend} server not available (set {_ENV[backend]}; scripts/start-databases.sh starts one)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return url


def _utf8(text: str) -> str:
    """``text`` as UTF-8 can carry it: lone surrogates (a hostile key's bytes, as the tests give
    them) escaped."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under pytest-xdist (scripts/test.sh), a report goes to the controller as UTF-8: the
    captured output and the failure text of a test of hostile strings may hold lone surrogates,
    which crashed the whole run; they are escaped."""
    outcome = yield
    if not hasattr(item.config, "workerinput"):
        return
    report = outcome.get_result()
    report.sections = [(name, _utf8(text)) for name, text in report.sections]
    if report.longrepr is not None and not isinstance(report.longrepr, tuple):
        text = str(report.longrepr)
        if _utf8(text) != text:
            report.longrepr = _utf8(text)


#: the names a server database has in the parameters of the tests (``backend``; ``db`` of the benchmarks)
SERVER_NAMES = {"mysql": "mysql", "mariadb": "mysql", "postgres": "postgres"}


def pytest_collection_modifyitems(config, items):
    """Tests marked ``one_server`` (real processes exercising pq's runtime: signals, crashes,
    restarts, workflows end to end) run on SQLite and on one server database, MariaDB or
    PostgreSQL by a hash of the test's name, so that each server gets half of them; what differs
    between the databases — every store operation, locks, lock waits, clocks, text limits,
    connection failures — is tested on all three by the conformance, integration and hostile
    suites and by the process tests not so marked. ``PQ_EVERY_DATABASE=1`` runs them on all three."""
    if os.environ.get("PQ_EVERY_DATABASE"):
        return
    other = [item for item in items if _on_the_other_server(item)]
    if other:
        config.hook.pytest_deselected(items=other)
        dropped = set(other)
        items[:] = [item for item in items if item not in dropped]


def _on_the_other_server(item) -> bool:
    if item.get_closest_marker("one_server") is None or item.get_closest_marker("every_database") is not None:
        return False
    if not hasattr(item, "callspec"):
        return False
    params = item.callspec.params
    server = next((SERVER_NAMES[v] for v in (params.get("backend"), params.get("db")) if v in SERVER_NAMES), None)
    chosen = ("mysql", "postgres")[zlib.crc32(item.originalname.encode()) % 2]
    return server is not None and server != chosen


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


@pytest.fixture
def db_url(backend, tmp_path) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp_path}/pq.db"
    return _server_url(backend)


#: the queue tables kept between this process's tests (tests/table_pool.py)
POOL = TablePool()
_LENT = pytest.StashKey["table_pool.Lent"]()


@pytest.fixture
def table_name(request, backend) -> str:
    """A table name of the test's own; for a test of the ``queue`` fixture on a server, perhaps
    one whose tables an earlier test made and the pool emptied; on SQLite, where each test has a
    database file of its own, one name for every test of that fixture (``_copy_made``)."""
    fresh = f"t{os.getpid() % 10000}_{next(_counter)}_{uuid.uuid4().hex[:6]}"
    kind = _made_kind(request)
    if kind is None:
        return fresh
    if backend == "sqlite":
        return SQLITE_TABLE
    if any(folder in request.node.path.as_posix() for folder in OWN_TABLES):
        return fresh
    lent = POOL.lend(_server_url(backend), kind, fresh)
    request.node.stash[_LENT] = lent
    return lent.name


def _made_kind(request) -> str | None:
    """Which fixture's tables the test may get made before it, ``sched`` (with its queue's) or
    ``queue``: the fixture of this file (not one of the test's module). On a server they are
    kept tables (tests/table_pool.py), and never for tests of worker processes."""
    kind = next((k for k in ("sched", "queue") if k in request.fixturenames), None)
    return None if kind is None or hasattr(request.module, kind) else kind


#: the table name of the SQLite tests of the ``queue`` and ``sched`` fixtures
SQLITE_TABLE = "tq"
#: SQLite: a database file holding what ``init()`` made, by fixture, copied into each test's file
_SQLITE_MADE: dict[str, str] = {}


def _copy_made(request, db_url: str) -> bool:
    """SQLite: give the test's new database file the tables ``init()`` made for an earlier test of
    the same fixture (a copy of its file takes 0.1 ms, an ``init()`` 15 ms). False: not copied."""
    path = db_url.removeprefix("sqlite:///")
    made = _SQLITE_MADE.get(request.fixturename)
    if made is None or _made_kind(request) != request.fixturename or os.path.exists(path):
        return False
    shutil.copyfile(made, path)
    return True


def _keep_made(request, db_url: str, tmp_path_factory) -> None:
    """SQLite: after the first ``init()`` of a fixture's tables in a new file, keep a copy of that
    file for the next tests (``_copy_made``)."""
    if request.fixturename in _SQLITE_MADE or _made_kind(request) != request.fixturename:
        return
    copy = str(tmp_path_factory.mktemp("made") / f"{request.fixturename}.db")
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as src, sqlite3.connect(copy) as dst:
        src.backup(dst)  # with what the write-ahead log holds
    dst.close()
    src.close()
    _SQLITE_MADE[request.fixturename] = copy


@pytest.fixture(scope="session", autouse=True)
def _drop_kept_tables():
    yield
    for (url, _kind), names in POOL.free.items():
        if names:
            drop_tables(url, *names)


def drop_tables(url: str, *names: str) -> None:
    """Drop the tables ``names`` and those named ``<name>_...`` beside them, in one statement (a
    reflection of each to drop them in order cost more than the test that made them)."""
    eng = sa.create_engine(url)
    try:
        with eng.begin() as conn:
            found = [
                n for n in sa.inspect(conn).get_table_names() if n in names or any(n.startswith(x + "_") for x in names)
            ]
            quote = conn.dialect.identifier_preparer.quote
            if found and conn.dialect.name == "sqlite":  # one table per DROP there
                for n in found:
                    conn.exec_driver_sql(f"DROP TABLE IF EXISTS {quote(n)}")
            elif found:
                cascade = " CASCADE" if conn.dialect.name == "postgresql" else ""
                conn.exec_driver_sql(f"DROP TABLE IF EXISTS {', '.join(quote(n) for n in found)}{cascade}")
    finally:
        eng.dispose()


@pytest.fixture
def latin1_url(db_url):
    """A database of its own whose default character set is latin1 (dropped afterwards)."""
    name = f"qtest_latin1_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(db_url)
    with admin.begin() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name} CHARACTER SET latin1")
    try:
        yield sa.engine.make_url(db_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.begin() as conn:
            conn.exec_driver_sql(f"DROP DATABASE {name}")
        admin.dispose()


#: the indexes of a task table before schema version 3 (named queues), as (suffix, columns)
V2_TASK_INDEXES = (
    ("claim", ("state", "priority", "timeout", "id")),
    ("type", ("state", "type", "priority", "timeout", "id")),
    ("type_user", ("state", "type", "resource", "timeout")),
    ("user", ("state", "resource", "timeout")),
)


def downgrade(store, columns, version: int) -> None:
    """Make the table of ``store`` one of an older release: drop ``columns`` (and the indexes
    on them), record ``version``; below version 3 (named queues), also drop the queue settings
    and start tables and give the task table the indexes it had then; below version 4 (tags),
    also drop the tag table and the ``tracked`` column; below version 5 (events, workers), the
    event and worker tables; below version 6 (statistics, tracing), the statistics table and its
    position and the ``trace`` column; below version 7, the failed ids' table (MySQL) and on
    PostgreSQL the task key back in the database's collation."""
    name = store.t.name
    if version < 4 and hasattr(store, "tags_t"):
        columns = [*columns, *(["tracked"] if "tracked" not in columns else [])]
    if version < 6 and hasattr(store, "stats_t"):
        columns = [*columns, *(["trace"] if "trace" not in columns else [])]

    def work(conn):
        prep = conn.dialect.identifier_preparer
        on = f" ON {prep.quote(name)}" if conn.dialect.name in ("mysql", "mariadb") else ""
        for ix in sa.inspect(conn).get_indexes(name):
            if set(ix["column_names"]) & set(columns):
                conn.exec_driver_sql(f"DROP INDEX {prep.quote(ix['name'])}{on}")
        for col in columns:
            conn.exec_driver_sql(f"ALTER TABLE {prep.quote(name)} DROP COLUMN {prep.quote(col)}")
        if version < 6 and hasattr(store, "stats_t"):
            store.stats_t.drop(conn, checkfirst=True)
            conn.execute(sa.delete(store.meta).where(store.meta.c.name == "stats_after"))
        if version < 5 and hasattr(store, "events_t"):
            for extra in (store.events_t, store.workers_t):
                extra.drop(conn, checkfirst=True)
        if version < 4 and hasattr(store, "tags_t"):
            store.tags_t.drop(conn, checkfirst=True)
        if version < 3 and hasattr(store, "queues_t"):
            for extra in (store.queues_t, store.starts_t):
                extra.drop(conn, checkfirst=True)
            for suffix, cols in V2_TASK_INDEXES:
                conn.exec_driver_sql(
                    f"CREATE INDEX {prep.quote(f'ix_{name}_{suffix}')} ON {prep.quote(name)} "
                    f"({', '.join(prep.quote(c) for c in cols)})"
                )
        if version < 7 and hasattr(store, "failed_t"):
            store.failed_t.drop(conn, checkfirst=True)
        if version < 7 and conn.dialect.name == "postgresql" and hasattr(store, "stats_t") and "key" not in columns:
            key = prep.quote("key")  # the task key in the database's collation, as before version 7
            conn.exec_driver_sql(
                f'ALTER TABLE {prep.quote(name)} ALTER COLUMN {key} TYPE VARCHAR(255) COLLATE "default"'
            )
        conn.execute(sa.update(store.meta).where(store.meta.c.name == "schema_version").values(value=str(version)))

    store.db.run(work, what="downgrade")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_700_000_000.0)


@pytest.fixture
def queue(request, db_url, table_name, clock, backend, tmp_path_factory):
    """A queue on tables of the test's own, initialised (kept tables are already as ``init()``
    leaves them: the pool checked them when they came back)."""
    copied = backend == "sqlite" and _copy_made(request, db_url)
    q = queue_core.open(db_url, table_name, clock=clock)
    _init_unless_made(request, db_url, q.init, copied, tmp_path_factory)
    yield q
    q.close()
    _give_back_or_drop(request, db_url, backend, table_name)


def _init_unless_made(request, db_url: str, init, copied: bool, tmp_path_factory) -> None:
    """``init()`` the test's tables unless they are kept or copied ones (already as ``init()``
    leaves them); a fresh name's tables, once made, are noted for the pool, and on SQLite the
    first file's kept to copy."""
    lent = request.node.stash.get(_LENT, None)
    if copied:
        return
    fresh = db_url.startswith("sqlite:") and not os.path.exists(db_url.removeprefix("sqlite:///"))
    if lent is None or lent.fresh:
        init()
    if lent is not None:
        POOL.note(db_url, lent)
    elif fresh:
        _keep_made(request, db_url, tmp_path_factory)


def _give_back_or_drop(request, db_url: str, backend: str, table_name: str) -> None:
    """The tables of ``table_name`` and those beside it back to the pool, or dropped (the
    fixture torn down first when a test has both ``queue`` and ``sched`` leaves them to the other)."""
    lent = request.node.stash.get(_LENT, None)
    if lent is not None and lent.kind != request.fixturename:
        return
    if backend != "sqlite" and not (lent is not None and POOL.give_back(db_url, lent)):
        POOL.forget(table_name)
        drop_tables(db_url, table_name)


@pytest.fixture
def sched(request, db_url, table_name, backend, clock, tmp_path_factory):
    """A perfectsched scheduler: schedule table ``<table>_s``, queue table ``<table>`` (kept
    tables as the ``queue`` fixture's)."""
    import perfectsched

    copied = backend == "sqlite" and _copy_made(request, db_url)
    sc = perfectsched.open(db_url, table_name + "_s", table_name, clock=clock)
    _init_unless_made(request, db_url, sc.init, copied, tmp_path_factory)
    yield sc
    sc.close()
    _give_back_or_drop(request, db_url, backend, table_name)


@pytest.fixture
def wq(queue):
    """The queue fixture without its fake clock: for tests that run real workers in real time."""
    queue.clock = queue.real_clock()
    return queue


@pytest.fixture(autouse=True)
def _reset_fault_calls():
    """tests/workflow_faults count step executions in ``fault_support.calls``: fresh per test.
    (A conftest.py of their own would shadow this one as the module ``conftest``.)"""
    import sys

    support = sys.modules.get("fault_support")
    if support is not None:
        support.calls.clear()
    yield


@pytest.fixture
def mysql_commands(backend, monkeypatch):
    """MySQL: the commands PyMySQL sends (COMMIT and ROLLBACK included, which SQLAlchemy's
    statement events do not show); elsewhere None."""
    if backend != "mysql":
        return None
    import pymysql.connections

    sent: list[str] = []
    real = pymysql.connections.Connection._execute_command

    def spy(self, command, sql):
        text = sql.decode() if isinstance(sql, bytes) else sql
        sent.append(text.split()[0].upper())
        return real(self, command, sql)

    monkeypatch.setattr(pymysql.connections.Connection, "_execute_command", spy)
    return sent


def in_transaction(dbapi_conn) -> bool:
    """Whether a driver's session has a transaction open (after a statement: it did not commit)."""
    if hasattr(dbapi_conn, "in_transaction"):  # sqlite3
        return dbapi_conn.in_transaction
    if hasattr(dbapi_conn, "server_status"):  # PyMySQL
        from pymysql.constants import SERVER_STATUS

        return bool(dbapi_conn.server_status & SERVER_STATUS.SERVER_STATUS_IN_TRANS)
    from psycopg.pq import TransactionStatus

    return dbapi_conn.info.transaction_status != TransactionStatus.IDLE


def session_of(conn: sa.Connection, backend: str) -> int:
    """The server's id of the session of ``conn`` (MySQL, PostgreSQL)."""
    ask = "SELECT CONNECTION_ID()" if backend == "mysql" else "SELECT pg_backend_pid()"
    return int(conn.exec_driver_sql(ask).scalar())


def kill_session(db_url: str, backend: str, session: int) -> None:
    """End the server session ``session`` from another one (a server restart, an operator)."""
    admin = sa.create_engine(db_url)
    try:
        with admin.begin() as c:
            c.exec_driver_sql(f"KILL {session}" if backend == "mysql" else f"SELECT pg_terminate_backend({session})")
    finally:
        admin.dispose()


@contextmanager
def own_queue(db_url: str, table_name: str, backend: str, **config):
    """A queue of its own configuration on ``table_name``, initialised; closed and its tables
    dropped afterwards."""
    q = queue_core.open(db_url, table_name, **config)
    try:
        q.init()
        yield q
    finally:
        q.close()
        if backend != "sqlite":
            drop_tables(db_url, table_name)


def serve_decider(queue, decider, now: float, rounds: int = 40) -> None:
    """Run ``decider`` (a pqflow.Decider class) on the tasks due at ``now`` until none is left
    (at most ``rounds``), finishing the deferred ones as a worker does."""
    for _ in range(rounds):
        task = queue.poll(alive_time=30, now=now)
        if task is None:
            return
        decider(task).run()
        if task.deferred is not None:
            assert queue.finish_many([task], now=now) == []


def run_together(*targets, timeout: float = 120.0) -> list[BaseException]:
    """Run each of ``targets`` (callables) in a thread of its own, all at once; wait for them
    (``timeout`` each) and return what they raised."""
    errors: list[BaseException] = []

    def guarded(target):
        try:
            target()
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(t,)) for t in targets]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout)
    return errors
