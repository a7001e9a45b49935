"""Scenario 11: the load an idle pool puts on its database, before and after issue 13's wake-up
probe: ``idle_workers`` ``perfectqueue run`` processes (1 processor each) on an empty queue,
measured for ``idle_seconds`` after a warm-up, once with ``wake_interval = 0`` (polling only, as
before) and once at the defaults (``wake_interval`` 0.05 s).

Per worker: statements per second as the server counts them (MariaDB ``Questions``; PostgreSQL
the database's committed and rolled back transactions, each autocommit read being one) and its
processes' CPU (supervisor and child, % of one core). For the pool: the server's CPU (% of one
core, from /proc: the ``mariadbd`` process, or every ``postgres`` process). SQLite has no server:
the workers' own CPU is the whole cost.
"""

from __future__ import annotations

import os
import time

import sqlalchemy as sa

from ..procs import descendants, pq_worker
from ..tables import engine
from .base import Context, Sample, Scenario

TICKS = os.sysconf("SC_CLK_TCK")
MODES = {"before": {"PQ_WAKE_INTERVAL": "0"}, "after": {}}
SERVER_PROCESS = {"mariadb": ("mariadbd", "mysqld"), "postgres": ("postgres",)}


def cpu_by_process(pids) -> dict[int, float]:
    """utime + stime of each of ``pids`` still alive, in seconds."""
    out = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            out[pid] = (int(fields[11]) + int(fields[12])) / TICKS
        except (OSError, IndexError, ValueError):
            continue
    return out


def cpu_spent(before: dict[int, float], after: dict[int, float]) -> float:
    """The CPU the processes spent between two readings: a process gone meanwhile (a database
    backend that ended) is not counted as negative, one that appeared counts from zero."""
    return sum(t - before.get(pid, 0.0) for pid, t in after.items())


def named_processes(names: tuple[str, ...]) -> list[int]:
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/comm") as fh:
                if fh.read().strip() in names:
                    out.append(int(pid))
        except OSError:
            continue
    return out


def statements(db: str, url: str) -> float | None:
    """The server's statement counter (None: SQLite)."""
    if db == "sqlite":
        return None
    with engine(url).connect() as conn:
        if db == "mariadb":
            return float(conn.execute(sa.text("SHOW GLOBAL STATUS LIKE 'Questions'")).one()[1])
        return float(
            conn.execute(
                sa.text("SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()")
            ).scalar()
        )


class IdleLoad(Scenario):
    name = "idle"
    title = "11. Idle load: what an idle pool of workers costs its database"

    def run(self, ctx: Context, out: Sample) -> None:
        s = ctx.sizes
        url, table = ctx.url("idle"), ctx.table("idle")
        ctx.queue("idle", table).close()
        for mode, env in MODES.items():
            procs = [
                pq_worker(
                    "benchmarks.handlers:noop", url=url, table=table, env=env, log=ctx.file(f"idle-{mode}-{i}.log")
                )
                for i in range(s.idle_workers)
            ]
            try:
                time.sleep(s.idle_warmup)
                self.measure(ctx, out, mode, procs, url)
            finally:
                for p in procs:
                    p.stop()

    def measure(self, ctx: Context, out: Sample, mode: str, procs, url: str) -> None:
        s = ctx.sizes
        workers = [pid for p in procs for pid in (p.pid, *descendants(p.pid))]
        names = SERVER_PROCESS.get(ctx.db, ())
        # per process: one that ends meanwhile (a worker's start-up check, run in a child process
        # of its own, may still be running) is left out rather than counted as negative CPU
        before = (
            time.monotonic(),
            cpu_by_process(workers),
            cpu_by_process(named_processes(names)),
            statements(ctx.db, url),
        )
        time.sleep(s.idle_seconds)
        after = (
            time.monotonic(),
            cpu_by_process(workers),
            cpu_by_process(named_processes(names)),
            statements(ctx.db, url),
        )
        elapsed, n = after[0] - before[0], s.idle_workers
        label = "polling only (wake_interval 0, before)" if mode == "before" else "defaults (after)"
        out.metric(
            "idle",
            f"worker_cpu_pct_{mode}",
            100 * cpu_spent(before[1], after[1]) / elapsed / n,
            f"CPU per idle worker, % of a core, {label}",
            "%",
            zero_ok=True,
        )
        if before[3] is not None:
            # the counter reads themselves: 1 statement each (MariaDB), 1 transaction each (PostgreSQL);
            # PostgreSQL's counters lag by up to a second, so a short window may not see its first read
            rate = max(0.0, after[3] - before[3] - 1) / elapsed / n
            out.metric(
                "idle",
                f"statements_per_s_{mode}",
                rate,
                f"statements per second per idle worker, {label}",
                "/s",
                zero_ok=True,
            )
            out.metric(
                "idle",
                f"server_cpu_pct_{mode}",
                100 * cpu_spent(before[2], after[2]) / elapsed,
                f"server CPU for {n} idle workers, % of a core, {label}",
                "%",
                zero_ok=True,
            )
