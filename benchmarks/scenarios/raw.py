"""Scenario 1: the database's own limit, measured by the harness in the same run.

Single-row ``INSERT`` + commit and single-row ``UPDATE`` by primary key + commit per second,
from one connection, through SQLAlchemy Core, for ``raw_seconds`` each. SQLite uses the
settings pq uses (WAL, ``synchronous`` = pq's default ``sqlite_synchronous``); the servers
run READ COMMITTED as pq's engine does.
"""

from __future__ import annotations

import random

import sqlalchemy as sa

from queue_core.config import DEFAULTS

from ..stats import rate_for
from .base import Context, Sample, Scenario


def raw_engine(url: str) -> sa.Engine:
    if url.startswith("sqlite"):
        eng = sa.create_engine(url)
        sync = DEFAULTS["sqlite_synchronous"][0]

        @sa.event.listens_for(eng, "connect")
        def _pragmas(dbapi_conn, _record):
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute(f"PRAGMA synchronous={sync}")
            cur.close()

        return eng
    return sa.create_engine(url, isolation_level="READ COMMITTED")


def raw_table(name: str) -> sa.Table:
    t = sa.Table(
        name,
        sa.MetaData(),
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("state", sa.SmallInteger(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("payload", sa.String(200), nullable=False),
    )
    sa.Index(f"ix_{name}_state", t.c.state, t.c.id)
    return t


class Raw(Scenario):
    name = "raw"
    title = "1. Raw limit: single-row writes + commit, one connection"

    def run(self, ctx: Context, out: Sample) -> None:
        url = ctx.url("raw")
        t = raw_table(ctx.table("raw"))
        eng = raw_engine(url)
        try:
            with eng.begin() as conn:
                t.drop(conn, checkfirst=True)
                t.create(conn)
            with eng.connect() as conn:
                ins = sa.insert(t)

                def insert(i: int) -> None:
                    conn.execute(ins, {"state": 0, "n": i, "payload": "x" * 100})
                    conn.commit()

                inserts = rate_for(ctx.sizes.raw_seconds, insert)
                top = conn.execute(sa.select(sa.func.max(t.c.id))).scalar()
                conn.commit()
                upd = sa.update(t).where(t.c.id == sa.bindparam("pk")).values(state=1, n=sa.bindparam("v"))

                def update(i: int) -> None:
                    conn.execute(upd, {"pk": random.randint(1, top), "v": i})
                    conn.commit()

                updates = rate_for(ctx.sizes.raw_seconds, update)
            with eng.begin() as conn:
                t.drop(conn)
        finally:
            eng.dispose()
        out.metric("raw", "insert_per_s", inserts, "INSERT + commit", "/s")
        out.metric("raw", "update_per_s", updates, "UPDATE by PK + commit", "/s")
