"""Loaded by Python in the processes of the lost-acks scenario (reliability/lost_ack.py).

With ``PQ_LOST_ACK`` set to a probability, a COMMIT of a store transaction that changed rows (an
INSERT, UPDATE or DELETE whose row count is not 0) is carried out by the server, and then the client is
told the connection dropped: SQLAlchemy's dialect-level ``do_commit`` raises the driver's
OperationalError after the real commit returned, and a ``handle_error`` hook marks it a
disconnect, so the connection is invalidated (that one only, not its whole pool) and the store
sees what a dropped connection gives it: an OperationalError with ``connection_invalidated``,
a transient error it answers by running the whole transaction again.

A statement that commits itself (MySQL's one-statement submit runs in autocommit: no COMMIT
follows it) loses its acknowledgement the same way, raised as the statement returns.

The first such commit of each kind of transaction (the ``what`` of ``Database.run``: ``poll``,
``finish``, ``submit``, ``tick`` ...) in each process loses its acknowledgement, the others with
the given probability (``PQ_LOST_ACK_SEED`` and the process id seed the draws); a commit that
changed nothing (an empty poll, an idle tick) never does. Each fault appends ``<pid> <what>`` to
the file ``PQ_LOST_ACK_LOG``. Nothing of this is in the product.
"""

import os

#: the same as reliability.lost_ack.MESSAGE (this file imports nothing of the project)
MESSAGE = "lost connection after COMMIT (injected by reliability.lost_ack)"
#: statements that change rows (the first six characters, lower case)
WRITES = ("insert", "update", "delete")


def _append(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _store_run(frame):
    """The ``what`` of the store transaction (``Database.run``) whose COMMIT this is, or None."""
    while frame is not None:
        if frame.f_code.co_name == "run" and frame.f_globals.get("__name__") == "queue_core.store.database":
            return frame.f_locals.get("what")
        frame = frame.f_back
    return None


def _commits_itself(dbapi_connection) -> bool:
    """Whether the connection is in autocommit where a statement's end is its commit (PyMySQL; the
    other drivers' autocommit statements are still followed by a COMMIT call, lost there)."""
    autocommit = getattr(dbapi_connection, "get_autocommit", None)
    return bool(autocommit and autocommit())


def _install(rate: float, seed: str, log: str) -> None:
    import random
    import sys
    import threading

    import sqlalchemy as sa
    from sqlalchemy.engine.default import DefaultDialect

    real_commit = DefaultDialect.do_commit
    lock = threading.Lock()
    state: dict = {"pid": None}

    def lose(what: str) -> bool:
        with lock:
            if state["pid"] != os.getpid():  # a forked child draws its own faults
                state.update(pid=os.getpid(), rng=random.Random(f"{seed}-{os.getpid()}"), seen=set())
            first = what not in state["seen"]
            state["seen"].add(what)
            return first or state["rng"].random() < rate

    def began(conn) -> None:
        conn.info.pop("pq_wrote", None)

    def executed(conn, cursor, statement, *_) -> None:
        text = statement.lstrip().lower()  # SQLite counts the rows of INSERT ... RETURNING once fetched
        if text[:6] in WRITES and (cursor.rowcount != 0 or " returning " in text):
            if _commits_itself(conn.connection.dbapi_connection):
                maybe_lose(conn.dialect, sys._getframe(1))
            conn.info["pq_wrote"] = True

    def do_commit(self, dbapi_connection):
        real_commit(self, dbapi_connection)
        if dbapi_connection.info.pop("pq_wrote", False):
            maybe_lose(self, sys._getframe(1))

    def maybe_lose(dialect, frame) -> None:
        run = _store_run(frame)
        if run is None or not lose(str(run)):
            return
        if log:
            _append(log, f"{os.getpid()} {run}\n")
        exc = dialect.loaded_dbapi.OperationalError(MESSAGE)
        exc.pq_lost_ack = True
        raise exc

    def dropped(ctx) -> None:
        if getattr(ctx.original_exception, "pq_lost_ack", False):
            ctx.is_disconnect = True
            ctx.invalidate_pool_on_disconnect = False

    DefaultDialect.do_commit = do_commit
    sa.event.listen(sa.engine.Engine, "begin", began)
    sa.event.listen(sa.engine.Engine, "after_cursor_execute", executed)
    sa.event.listen(sa.engine.Engine, "handle_error", dropped)


if os.environ.get("PQ_LOST_ACK"):
    _install(
        float(os.environ["PQ_LOST_ACK"]), os.environ.get("PQ_LOST_ACK_SEED", "1"), os.environ.get("PQ_LOST_ACK_LOG", "")
    )
