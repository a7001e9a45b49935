"""Resource use of running processes (from /proc) and of the database (server connections)."""

from __future__ import annotations

import os
import statistics

import sqlalchemy as sa

CONNECTIONS_SQL = {
    "mysql": "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = SUBSTRING_INDEX(USER(), '@', 1)",
    "postgresql": "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database()",
}


def rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def connections(engine: sa.Engine) -> int | None:
    """Server-side sessions of this database user (SHOW PROCESSLIST / pg_stat_activity),
    including the one asking; None on SQLite."""
    sql = CONNECTIONS_SQL.get(engine.dialect.name)
    if sql is None:
        return None
    with engine.connect() as conn:
        return int(conn.exec_driver_sql(sql).scalar())


def growth(values: list[float], warmup: int) -> tuple[float, float] | None:
    """(mean of the first third, mean of the last third) of the samples after ``warmup``."""
    steady = values[warmup:]
    if len(steady) < 3:
        return None
    third = max(1, len(steady) // 3)
    return statistics.mean(steady[:third]), statistics.mean(steady[-third:])
