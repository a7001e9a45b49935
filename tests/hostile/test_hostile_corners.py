"""Hostile operators, the corners (bad input and hostile operators): an attempts counter at the
column's limit, a lease edited to end never, a read-only database given to ``perfectsched run``,
an account without DELETE running workflows, and tables that look like ours but are not.

The databases each test concerns are in its docstring.
Accounts with fewer privileges are made through the servers' superuser connections
(tests/hostile/db_admin.py) and dropped at the end.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from db_admin import account, queue_tables, skip_unless_admin

import queue_core  # noqa: E402
from queue_core import CorruptRowError  # noqa: E402
from queue_core.clock import FakeClock  # noqa: E402

T0 = 1_700_000_000.0
BIN = Path(sys.executable).parent
KEY = {"mysql": "`key`"}


def _clean_env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("PQ_")}


def _raw(url: str, sql: str, **params) -> None:
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(sql), params)
    finally:
        engine.dispose()


def _key(backend: str) -> str:
    return KEY.get(backend, '"key"')


@pytest.fixture
def q(backend, db_url, table_name):
    queue = queue_core.open(db_url, table_name, clock=FakeClock(T0))
    queue.init()
    yield queue
    queue.close()
    if backend != "sqlite":
        from conftest import drop_tables

        drop_tables(db_url, table_name)


# -- a hand-edited task row never stops the claim of the others ----------------------
@pytest.mark.parametrize("types", [None, ["t", "u"]], ids=["untyped", "typed"])
def test_attempts_at_int32_max_break_no_claim(backend, db_url, q, types):
    """A hand-edited row is set aside by the claim while every other row keeps being
    claimed.

    An operator sets ``attempts = 2147483647`` on one due row (max_attempts NULL). rowcheck takes
    that value as one pq writes (``integer(0, INT32)``), so the screen lets the row through and
    the claim's ``UPDATE ... SET attempts = attempts + 1`` (``ClaimView._lease``) overflows the
    INTEGER column: PostgreSQL 'integer out of range', MariaDB 1264 'Out of range value for column
    attempts'. The whole claim transaction fails, so the sound row beside it is never leased, at
    every poll, for ever (the worker logs 'poll failed' in a loop), and the edited row is neither
    named nor set aside. On SQLite the claim leases it and writes attempts 2147483648 itself,
    after which every read of the table (``list``) raises CorruptRowError for a value pq wrote."""
    q.submit("bad", "t", {}, now=T0 - 10)
    q.submit("good", "t", {}, now=T0 - 5)
    _raw(db_url, f"UPDATE {q.table} SET attempts = 2147483647 WHERE {_key(backend)} = 'bad'")

    got = q.poll_multi(5, types=types, now=T0)  # PostgreSQL, MariaDB: DatabaseError
    assert "good" in [t.key for t in got]
    list(q.list(now=T0))  # SQLite: CorruptRowError 'column attempts holds 2147483648'


@pytest.mark.parametrize("types", [None, ["t"]], ids=["untyped", "typed"])
def test_a_corrupt_lease_holds_no_user_s_slot(backend, db_url, q, types):
    """Fair-share claims (rows with user and max_running).

    A live row of user ``u`` (max_running 1) is edited into a lease that ends at ``1e300`` (pq
    never writes a timeout past FOREVER = 1e15; reads name it: 'column timeout holds 1e+300').
    The claim never sets it aside (it is never due), but ``ClaimView._running_counts`` counts it
    as one of ``u``'s running tasks (``leased = 1 AND timeout > now``) for ever, so
    ``policy.choose_fair`` gives ``u`` no slot: the sound row ``good`` of the same user is never
    claimed again, by any claim, untyped or limited to types. A corrupt row holds the others back
    instead of being set aside. (PostgreSQL: ``timeout = 'NaN'`` does the same.)"""
    q.submit("bad", "t", {}, user="u", max_running=1, now=T0 - 10)
    q.submit("good", "t", {}, user="u", max_running=1, now=T0 - 5)
    _raw(db_url, f"UPDATE {q.table} SET leased = 1, lease_token = 7, timeout = 1e300 WHERE {_key(backend)} = 'bad'")
    with pytest.raises(CorruptRowError, match="column timeout"):
        list(q.list(now=T0))  # named corrupt by reads

    assert [t.key for t in q.poll_multi(5, types=types, now=T0)] == ["good"]  # before: []


# -- accounts without DELETE, read-only replicas ---------------------------------------
SERVERS = ["mysql", "postgres"]


def _read_only(backend: str, server: str, tables: list[str], sequences: list[str] = ()):
    if backend == "mysql":  # an account with SELECT only, as the existing hostile tests make one
        return account(backend, server, tables, "SELECT")
    return account(backend, server, tables, "SELECT, INSERT, UPDATE, DELETE", read_only=True, sequences=sequences)


@pytest.fixture
def sched_tables(backend, db_url, table_name):
    import perfectsched

    sc = perfectsched.open(db_url, table_name + "_s", table_name, clock=FakeClock(T0))
    sc.init()
    sc.queue.init()
    yield sc
    sc.close()
    from conftest import drop_tables

    drop_tables(db_url, table_name, table_name + "_s")


def _run_for(args: list[str], seconds: float) -> tuple[int | None, str, str]:
    """Run a command; stop it (SIGTERM, then SIGKILL, by its pid) if it still runs after
    ``seconds``: (exit code or None when it had to be stopped, stdout, stderr)."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_clean_env())
    try:
        out, err = proc.communicate(timeout=seconds)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            out, err = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        return None, out, err


@pytest.mark.parametrize("backend", SERVERS)
def test_perfectsched_run_on_a_read_only_database_exits_at_start(backend, db_url, sched_tables):
    """A read-only replica given to a worker: it exits 5 at start with one line.

    ``perfectqueue run`` checks write access before it starts (``worker.check_database``), but the
    scheduler's loop, ``perfectsched run`` (the documented way to run schedules, long-running
    without ``--burst``), only checks that its tables exist (``perfectsched/runner.py``
    ``SchedulerLoop._probe`` → ``tables_exist``). On a replica it starts, and every tick is
    refused ('AccessDeniedError ... refused by'): it logs 'database error (retrying in ...)' and
    backs off for ever, never exiting, never firing the due schedule."""
    sc = sched_tables
    now = time.time()
    sc.add("every-minute", "t", cron="* * * * *", next_time=now - now % 60 - 120, catchup="latest", now=now)
    t = sc.queue.table
    tables = [sc.table, f"{sc.table}_meta", *queue_tables(t, backend)]
    with _read_only(backend, db_url, tables, [f"{t}_id_seq", f"{t}_events_id_seq"]) as (url, password):
        code, out, err = _run_for(
            [
                str(BIN / "perfectsched"),
                "run",
                "-D",
                url,
                "--table",
                t,
                "--schedule-table",
                sc.table,
                "--poll-interval",
                "0.2",
            ],
            15,
        )
    assert password not in out + err
    assert code == 5, (code, err[-2000:])
    errors = [line for line in err.splitlines() if line.startswith("perfectsched: error: ")]
    assert len(errors) == 1 and "refused by" in errors[0], err[-2000:]


import pqflow  # noqa: E402

FLOW = pqflow.Workflow("hostile_corners_flow", retry_wait=0)


@FLOW.step()
def first(ctx):
    return 1


@FLOW.step(after=first)
def second(ctx, first):
    return first + 1


class FlowDecider(pqflow.Decider):
    workflows = [FLOW]


@pytest.fixture
def admin_queue(backend, db_url, table_name):
    queue = queue_core.open(db_url, table_name, clock=FakeClock(T0))
    queue.init()
    yield queue
    queue.close()
    from conftest import drop_tables

    drop_tables(db_url, table_name)


@pytest.mark.parametrize("how", ["start", "submit"])
@pytest.mark.parametrize("backend", SERVERS)
def test_an_account_without_delete_runs_workflows(backend, db_url, admin_queue, how):
    """An account without DELETE still submits, claims and finishes.

    pqflow's runs are tasks of the same queue table, but every run start deletes first:
    ``pqflow.lifecycle.create_rows`` calls ``SqlStore.run_group_clear`` (``DELETE ... WHERE grp = :run``)
    for each group of the new run, even when no earlier run left a row in it. The databases check
    the DELETE privilege per statement, not per row, so with an account of SELECT, INSERT and
    UPDATE (what the hostile tests give a worker) ``Workflow.start`` raises AccessDeniedError
    ('start run refused by ...: DELETE command denied' / 'permission denied for table'), and a
    run submitted as a plain task is never adopted by the decider: no workflow can run at all,
    though nothing has to be purged."""
    skip_unless_admin(backend)
    flow, decider = FLOW, FlowDecider
    t = admin_queue.table
    with account(
        backend,
        db_url,
        queue_tables(t, backend),
        "SELECT, INSERT, UPDATE",
        sequences=[f"{t}_id_seq", f"{t}_events_id_seq"],
    ) as (url, _):
        with queue_core.open(url, t, clock=FakeClock(T0)) as nd:
            if how == "start":
                flow.start("r1", {}, queue=nd)  # before: AccessDeniedError
            else:
                nd.submit("r1", flow.name, {}, now=T0)
            for _ in range(20):
                task = nd.poll(alive_time=30)
                if task is None:
                    break
                decider(task).run()
                if task.deferred is not None:
                    assert nd.finish_many([task]) == []
            run = pqflow.get_run("r1", queue=nd)
    assert run.status == "succeeded", (run.status, run.statuses)
    assert run.steps["second"].result == 2


# -- a table not ours is never written, indexed or altered ------------------------------
@pytest.fixture
def foreign(backend, db_url):
    """A table name of this test; the table and whatever appeared beside it dropped at the end."""
    name = f"fr{os.getpid() % 10000}_{uuid.uuid4().hex[:6]}"
    yield name
    engine = sa.create_engine(db_url)
    with engine.begin() as conn:
        for t in (f"{name}_meta", name):
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {t}"))
    engine.dispose()


def _snapshot(url: str, name: str) -> tuple:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            inspector = sa.inspect(conn)
            return (
                sorted(n for n in inspector.get_table_names() if n.startswith(name)),  # (others: other tests')
                sorted(i["name"] for i in inspector.get_indexes(name)),
                [c["name"] for c in inspector.get_columns(name)],
            )
    finally:
        engine.dispose()


def _refused_and_untouched(url: str, name: str) -> None:
    """``init`` and ``submit`` on table ``name`` raise ForeignTableError and leave it as it was
    (its tables, indexes and columns)."""
    before = _snapshot(url, name)
    q = queue_core.open(url, name)
    try:
        with pytest.raises(queue_core.ForeignTableError):
            q.init()
        with pytest.raises(queue_core.ForeignTableError):
            q.submit("k", "t", {})
    finally:
        q.close()
    assert _snapshot(url, name) == before


@pytest.mark.parametrize("how", ["extra-not-null-column", "id-without-default"])
def test_a_table_pq_can_never_insert_into_is_not_ours(backend, db_url, foreign, how):
    """A table not ours is never indexed, altered or written; ForeignTableError.

    Another program's table has every column of a queue table with our types, primary key and
    unique key, as pq would make it, plus what makes it theirs: an extra ``owner_id INTEGER NOT
    NULL`` without default, or (PostgreSQL, MariaDB) an ``id`` without its sequence /
    AUTO_INCREMENT (their ids). No row pq writes can ever go into it, but
    ``VersionedTables.check_tables`` (``_unlike``: types and keys only) takes it for ours: ``init``
    creates the six ``ix_<table>_*`` indexes on it and a ``<table>_meta`` beside it, and ``submit``
    is tried and fails with an untyped DatabaseError (NOT NULL violation) instead of
    ForeignTableError."""
    from queue_core.store.schema import task_table

    if how == "id-without-default" and backend == "sqlite":
        pytest.skip("SQLite: an INTEGER PRIMARY KEY is the rowid, always given")
    engine = sa.create_engine(db_url)
    with engine.begin() as conn:
        t = task_table(sa.MetaData(), foreign)
        conn.execute(sa.schema.CreateTable(t))  # the table alone, without pq's indexes
        if how == "extra-not-null-column":
            conn.execute(sa.text(f"ALTER TABLE {foreign} ADD COLUMN owner_id INTEGER NOT NULL"))
        elif backend == "postgres":
            conn.execute(sa.text(f"ALTER TABLE {foreign} ALTER COLUMN id DROP DEFAULT"))
        else:
            conn.execute(sa.text(f"ALTER TABLE {foreign} MODIFY id BIGINT NOT NULL"))
    engine.dispose()
    _refused_and_untouched(db_url, foreign)  # before: init indexed their table, submit met NOT NULL


@pytest.mark.parametrize("backend", ["postgres"])
def test_a_postgresql_table_with_our_column_names_in_capitals_is_refused_by_name(backend, db_url, foreign):
    """A table not ours: ForeignTableError at first use, and nothing else tried.

    Another program's PostgreSQL table has our columns, types and keys, but named in capitals
    (quoted: ``"KEY"``, ``"STATE"``, ...): different columns there. ``tables_exist`` lower-cases
    the reflected names (``columns = {c["name"].lower(): ...}``) and ``_unlike`` the key columns,
    so it passes; then every statement is run against it and fails with an untyped DatabaseError
    ('column "state" does not exist', 'column "key" of relation ... does not exist') instead of
    ForeignTableError naming the table."""
    from queue_core.store.schema import task_table

    engine = sa.create_engine(db_url)
    prep = engine.dialect.identifier_preparer
    cols = ", ".join(
        f"{prep.quote_identifier(c.name.upper())} {c.type.compile(engine.dialect)}"
        + (" PRIMARY KEY" if c.primary_key else "")
        for c in task_table(sa.MetaData(), "x").c
    )
    with engine.begin() as conn:
        conn.execute(sa.text(f'CREATE TABLE {foreign} ({cols}, UNIQUE ("KEY"))'))
    engine.dispose()
    _refused_and_untouched(db_url, foreign)  # before: DatabaseError 'column "state" does not exist'


def test_a_lease_of_the_longest_alive_time_takes_its_slot_for_a_clock_a_little_behind(q):
    """A lease pq wrote itself always takes its user's slot: with MAX_LEASE = MAX_DURATION (the
    largest alive_time) a lease of that alive_time ended at the bound, and a worker whose clock
    read 1 ms behind took it for hand-edited and leased the user's second task. MAX_LEASE leaves
    room for clocks a little apart."""
    from queue_core.rules.validate import MAX_DURATION

    q.submit("a", "t", user="u", max_running=1)
    q.submit("b", "t", user="u", max_running=1)
    t0 = T0
    first = q.poll(alive_time=MAX_DURATION, now=t0 + 1)  # worker A
    assert first is not None
    second = q.poll(alive_time=10, now=t0 + 1 - 0.001)  # worker B, its clock 1 ms behind
    assert second is None, f"user u (max_running=1) runs {first.key} and {second.key}"


def test_an_extra_identity_column_leaves_our_table_ours(backend, db_url, foreign):
    """PostgreSQL: an identity column (``GENERATED ... AS IDENTITY``: NOT NULL, no default) is
    filled by the database on every insert, so a table ``init`` made to which a DBA added one is
    still ours; the check that refuses tables pq could never insert into took it for foreign."""
    if backend != "postgres":
        pytest.skip("PostgreSQL identity columns")
    q = queue_core.open(db_url, foreign, clock=FakeClock(T0))
    q.init()
    q.submit("a", "t")
    q.close()
    engine = sa.create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(sa.text(f"ALTER TABLE {foreign} ADD COLUMN audit_seq BIGINT GENERATED ALWAYS AS IDENTITY"))
        conn.execute(
            sa.text(
                f"INSERT INTO {foreign} (key, type, state, data, timeout, run_at, created_at, leased, "
                "attempts, cancel_requested, priority) SELECT 'probe', type, state, data, timeout, "
                "run_at, created_at, leased, attempts, cancel_requested, priority "
                f"FROM {foreign} WHERE key='a'"
            )
        )
        conn.execute(sa.text(f"DELETE FROM {foreign} WHERE key='probe'"))
    engine.dispose()
    q = queue_core.open(db_url, foreign, clock=FakeClock(T0))
    try:
        q.submit("b", "t")  # ForeignTableError: "column audit_seq is NOT NULL without a default"
        assert q.poll(alive_time=10) is not None
    finally:
        q.close()
