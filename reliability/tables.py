"""The tables of one scenario run, and the database-side audit of finishes.

Every run gets fresh tables named ``rel_<scenario>_<random>``: the queue table (created by
``Queue.init``), its ``_meta`` table, optionally a schedule table ``_s`` (with ``_s_meta``), and
the audit table ``_fin``. A trigger on the queue table inserts one ``_fin`` row each time a task row changes
from live to finished, so "finished twice" is counted by the database itself, whatever path
(worker, decider transaction, retried statement after a reconnect) the finish took.
"""

from __future__ import annotations

import uuid
from collections import Counter

import sqlalchemy as sa

import queue_core

#: state value of a finished row (queue_core.store.tasks.FINISHED)
FINISHED = 1


def _trigger_sql(dialect: str, table: str, audit: str, q) -> list[str]:
    key = q("key")
    if dialect == "sqlite":
        return [
            f"""CREATE TRIGGER {table}_audit AFTER UPDATE OF state ON {table}
                    WHEN NEW.state = {FINISHED} AND OLD.state <> {FINISHED}
                    BEGIN INSERT INTO {audit} ({key}, outcome, at) VALUES (NEW.{key}, NEW.outcome, NEW.finished_at);
                    END"""
        ]
    if dialect in ("mysql", "mariadb"):
        return [
            f"""CREATE TRIGGER {table}_audit AFTER UPDATE ON {table} FOR EACH ROW
                    BEGIN IF NEW.state = {FINISHED} AND OLD.state <> {FINISHED} THEN
                    INSERT INTO {audit} ({key}, outcome, at) VALUES (NEW.{key}, NEW.outcome, NEW.finished_at);
                    END IF; END"""
        ]
    if dialect == "postgresql":
        return [
            f"""CREATE FUNCTION {audit}_fn() RETURNS trigger LANGUAGE plpgsql AS $$
                    BEGIN INSERT INTO {audit} ({key}, outcome, at) VALUES (NEW.{key}, NEW.outcome, NEW.finished_at);
                    RETURN NULL; END $$""",
            f"""CREATE TRIGGER {table}_audit AFTER UPDATE ON {table} FOR EACH ROW
                    WHEN (NEW.state = {FINISHED} AND OLD.state <> {FINISHED}) EXECUTE FUNCTION {audit}_fn()""",
        ]
    raise ValueError(dialect)


class Tables:
    """Names, creation, audit and removal of one run's tables."""

    def __init__(self, url: str, scenario: str):
        self.url = url
        self.queue = f"rel_{scenario}_{uuid.uuid4().hex[:8]}"
        self.schedules = self.queue + "_s"
        self.audit = self.queue + "_fin"
        self.engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        md = sa.MetaData()
        self.audit_table = sa.Table(
            self.audit,
            md,
            sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
            sa.Column("key", sa.String(255), nullable=False),
            sa.Column("outcome", sa.String(16)),
            sa.Column("at", sa.Double()),
        )

    def create(self, *, schedules: bool = False) -> queue_core.Queue:
        """Create the tables and the audit trigger; return a queue on them (real clock)."""
        if schedules:
            import perfectsched

            sc = perfectsched.open(self.url, self.schedules, self.queue)
            sc.init()
            sc.close()
        q = queue_core.open(self.url, self.queue, retention_time=1e9)
        q.init()
        with self.engine.begin() as conn:
            self.audit_table.create(conn)
            quote = conn.dialect.identifier_preparer.quote
            for stmt in _trigger_sql(conn.dialect.name, self.queue, self.audit, quote):
                conn.exec_driver_sql(stmt)
        return q

    def finishes(self) -> Counter:
        """How many times each key went from live to finished."""
        t = self.audit_table
        with self.engine.connect() as conn:
            return Counter({k: int(n) for k, n in conn.execute(sa.select(t.c.key, sa.func.count()).group_by(t.c.key))})

    def drop(self) -> None:
        """Drop every table of this run (all are named after the queue table)."""
        with self.engine.begin() as conn:
            md = sa.MetaData()
            md.reflect(conn, only=lambda n, _m: n == self.queue or n.startswith(self.queue + "_"))
            md.drop_all(conn)
            if conn.dialect.name == "postgresql":
                conn.exec_driver_sql(f"DROP FUNCTION IF EXISTS {self.audit}_fn()")
        self.engine.dispose()
