"""The wake-up probe of databases without notifications (store layer).

SQLite and MySQL/MariaDB have no LISTEN/NOTIFY. An idle worker finds new tasks there with a
one-row read every ``wake_interval`` seconds: the table's highest id (``MAX(id)``, answered from
the primary key's last entry on all three databases: no row is read, whatever the table's size).
Every submission inserts a row, so a higher id than the last one seen means a task may be there
to claim, and the worker claims at once instead of at its next ``poll_interval``.

What the probe does not see, the worker's poll still finds within ``poll_interval``: a task whose
``run_at`` comes, a retry whose wait ends, a released or expired lease, and the rare insert that
commits after one with a higher id (MySQL hands ids out before commit). So the probe only ever
shortens a wait; a wake-up it misses costs what the poll cost before it existed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import sqlalchemy as sa

from ..errors import DatabaseError
from .database import Database


class NewestIdWatch:
    """Reads of a table's highest id on a connection of its own: :meth:`changed` says whether it
    changed since the last read. Close it (or use it as a context manager) to free the connection.

    A file or server database: one connection held between reads, in autocommit on a server (one
    round trip a read: SQLAlchemy's own transaction is never ended, so no COMMIT is sent); SQLite's
    read is a deferred ``BEGIN`` (no write lock), ended at once so that it never holds back a WAL
    checkpoint. A memory database (one connection everybody takes
    turns on) reads through :meth:`Database.run` instead.
    """

    def __init__(self, db: Database, table: sa.Table) -> None:
        self.db = db
        self._newest = sa.select(sa.func.max(table.c.id))
        self._conn: sa.Connection | None = None
        self._seen: int | None = None
        self._read_once = False

    def changed(self) -> bool:
        """Read the highest id: whether it changed since the last read (False at the first). Any
        change counts: ids freed by a purge may be handed out again (SQLite), so a new row can
        bring the highest id back to a value seen before, after a read in between saw it lower.
        DatabaseError (scrubbed) when the read fails; the connection is dropped then."""
        try:
            top = self._read()
        except sa.exc.SQLAlchemyError as exc:
            self.close()
            raise DatabaseError(f"wake-up probe failed on {self.db.masked_url}: {self.db.scrub(exc)}") from None
        changed = self._read_once and top != self._seen
        self._seen, self._read_once = top, True
        return changed

    def _read(self) -> int | None:
        if self.db.shares_one_connection:
            return self.db.run(lambda c: c.execute(self._newest).scalar(), write=False, what="wake-up probe")
        if self._conn is None:
            self._conn = self.db.dialect.probe_connection(self.db.dedicated_connection())
        return self.db.dialect.probe_read(self._conn, self._newest)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - the connection is already broken
                pass

    def __enter__(self) -> NewestIdWatch:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def watch_newest_id(
    db: Database, table: sa.Table, on_new: Callable[[], None], stop: threading.Event, interval: float
) -> None:
    """Call ``on_new()`` each time the highest id of ``table`` grows, read every ``interval`` s,
    until ``stop`` is set. Raises DatabaseError (scrubbed) when a read fails; the caller waits
    and watches again (the first read after that only sets the mark)."""
    with NewestIdWatch(db, table) as watch:
        while not stop.is_set():
            if watch.changed():
                on_new()
            stop.wait(interval)
