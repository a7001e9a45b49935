"""The writes of a worker's background threads hold no lock between statements.

A handler may hold the GIL for minutes in a C call that never releases it. A background thread
of the same process (the lease heartbeat, the worker registry) caught between two statements of
a transaction cannot reach its COMMIT until the GIL comes back; on SQLite its transaction holds
the database's write lock all that time, so every other worker's claims and heartbeats stalled
and their leases expired (the reliability scenario ``long_tasks`` saw a CPU-bound task run twice
and starved tasks not taken over). So the common writes of those threads are one statement in
autocommit: the statement commits as it ends, before its thread waits for the GIL again.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest
import sqlalchemy as sa

from queue_core import CancelRequestedError, PreemptedError
from queue_core.store.workers import WorkerIdentity
from reliability.handlers import hold_gil

WORKER = WorkerIdentity(owner="h:1", host="h", pid=1, queues=json.dumps(["default"]), types=None, version="t")


class _Statements:
    """The statements every engine of the process sends while recording (both pools of MySQL)."""

    def __init__(self):
        self.sent: list[str] = []

    def __call__(self, _conn, _cursor, statement, *_args) -> None:
        self.sent.append(statement.split()[0].upper())

    def __enter__(self):
        sa.event.listen(sa.engine.Engine, "before_cursor_execute", self)
        return self

    def __exit__(self, *_exc) -> None:
        sa.event.remove(sa.engine.Engine, "before_cursor_execute", self)


def test_a_heartbeat_of_a_held_lease_is_one_statement_in_autocommit(queue, mysql_commands):
    queue.submit("k", "t")
    task = queue.poll(alive_time=10)
    task.heartbeat(alive_time=10)  # the pools' first connections made before recording
    if mysql_commands is not None:
        mysql_commands.clear()
    with _Statements() as statements:
        task.heartbeat(alive_time=30)
    assert statements.sent == ["UPDATE"]  # no BEGIN (SQLite), no second statement
    if mysql_commands is not None:
        assert mysql_commands == ["UPDATE"]  # no COMMIT: the statement committed itself
    assert queue["k"].metadata().timeout == pytest.approx(queue.now() + 30)


def test_a_heartbeat_still_reports_a_cancel_and_refuses_a_lost_lease(queue, clock):
    queue.submit("a", "t")
    queue.submit("b", "t")
    a = queue.poll(alive_time=10)
    queue[a.key].cancel_request()
    with pytest.raises(CancelRequestedError):  # the transaction's path: extended, the cancel seen
        a.heartbeat(alive_time=10, now=clock.now() + 5)
    assert a.cancel_requested and queue[a.key].metadata().timeout == clock.now() + 15
    b = queue.poll(alive_time=10)
    clock.advance(11)
    with pytest.raises(PreemptedError):
        b.heartbeat(alive_time=10)


def test_a_registry_renewal_is_one_statement_and_a_gone_row_is_written_again(queue, mysql_commands):
    store = queue.store
    store.worker_register(WORKER, 100.0)
    with _Statements() as statements:
        store.worker_renew(WORKER, 100.0, 200.0)
    assert statements.sent == ["UPDATE"]
    store.worker_remove(WORKER.owner)  # swept while cut off
    with _Statements() as statements:
        store.worker_renew(WORKER, 100.0, 300.0)
    assert "BEGIN" not in statements.sent
    rows = store.worker_rows(0.0, 300.0)
    assert [(r["owner"], r["started_at"], r["last_seen"]) for r in rows] == [("h:1", 100.0, 300.0)]


_OTHER_WRITER = """
import select, sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], timeout=0.1, isolation_level=None)
db.execute("CREATE TABLE IF NOT EXISTS other_writer (n INTEGER)")
print("ready", flush=True)
locked = written = 0
while not select.select([sys.stdin], [], [], 0)[0]:  # until the test closes our stdin
    try:
        db.execute("INSERT INTO other_writer VALUES (1)")
        written += 1
    except sqlite3.OperationalError:
        locked += 1
    time.sleep(0.005)
print(locked, written, flush=True)
"""


def _heartbeats(queue):
    queue.submit("k", "t")
    task = queue.poll(alive_time=600)
    return lambda: task.heartbeat(alive_time=600)


def _registrations(queue):
    return lambda: queue.store.worker_register(WORKER, queue.now())  # a delete and an insert-if-absent


def _one_by_one_submits(queue):
    keys = iter(range(10**9))
    return lambda: queue.submit(f"s{next(keys)}", "t")  # an insert-if-absent in autocommit


@pytest.mark.parametrize("writes", [_heartbeats, _registrations, _one_by_one_submits])
def test_a_sqlite_write_in_autocommit_never_holds_the_write_lock_while_its_process_holds_the_gil(
    queue, backend, db_url, writes
):
    """The real interleaving: a thread writes in a loop while the main thread holds the GIL in a
    C call, again and again; another process writes with a short busy timeout meanwhile and must
    never find the database locked. (An insert that returned its row held the lock until the row
    was read back in Python: the registry's, in a clean-clone CI run of the long_tasks scenario,
    stalled every worker for the 7.5 s the handler held the GIL.)"""
    if backend != "sqlite":
        pytest.skip("the write lock of a whole database is SQLite's")
    write = writes(queue)
    other = subprocess.Popen(
        [sys.executable, "-c", _OTHER_WRITER, db_url.removeprefix("sqlite:///")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert other.stdout.readline().strip() == "ready"
    stop = threading.Event()
    done = []

    def loop():
        while not stop.is_set():
            write()
            done.append(1)

    thread = threading.Thread(target=loop)
    thread.start()
    try:
        for _ in range(25):
            hold_gil(0.1)
            time.sleep(0.01)  # the writing thread runs again
    finally:
        stop.set()
        thread.join()
    out, _ = other.communicate(timeout=30)  # closes its stdin: it stops writing
    locked, written = map(int, out.split())
    assert len(done) > 10  # the thread wrote between the holds
    assert written > 100  # the other process wrote all along the holds (one try per 5 ms)
    assert locked == 0
