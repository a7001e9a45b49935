"""What every scenario run sets up and tears down: the context it runs in and its stage.

:class:`Context` says where to run (backend, URL, working directory, private servers for
restarts). :func:`stage` opens a :class:`Stage`: fresh tables with the finish audit, a
:class:`~reliability.procs.Fleet` for the processes, a :class:`~reliability.leases.LeaseWatch`
and the execution ledger. Leaving the ``with`` block kills every process and drops the tables,
also when the scenario failed or raised.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import queue_core

from . import checks
from .handlers import LEDGER_ENV
from .leases import LeaseWatch
from .ledger import Ledger
from .procs import Fleet, Proc, wait_for
from .result import Result
from .tables import Tables

ACKS = "acks.txt"

#: worker settings of every scenario unless it overrides them: fast polls, short leases,
#: nothing purged (retention) so the final check sees every row, quiet logs
WORKER_DEFAULTS: dict[str, Any] = {
    "processors": 1,
    "poll_interval": 0.1,
    "alive_time": 3.0,
    "child_heartbeat_interval": 0.3,
    "child_fork_frequency_limit": 0.0,
    "retry_wait": 0.0,
    "retention_time": 1e9,
    "log_level": "WARNING",
}


@dataclass
class Context:
    backend: str  # "mariadb", "postgres" or "sqlite"
    url: str
    workdir: Path
    seed: int = 1
    servers: Any = None  # reliability.dbserver.PrivateServers serving ``url``, for restarts
    keep_tables: bool = False

    def rng(self, scenario: str) -> random.Random:
        return random.Random(f"{self.seed}-{scenario}-{self.backend}")


class Stage:
    def __init__(
        self,
        ctx: Context,
        scenario: str,
        tables: Tables,
        queue: queue_core.Queue,
        fleet: Fleet,
        watch: LeaseWatch | None,
        workdir: Path,
    ):
        self.ctx, self.scenario, self.tables, self.queue = ctx, scenario, tables, queue
        self.fleet, self.watch, self.workdir = fleet, watch, workdir
        self.ledger_path = workdir / "ledger.txt"

    @property
    def url(self) -> str:
        return self.ctx.url

    @property
    def table(self) -> str:
        return self.tables.queue

    def worker_settings(self, **overrides: Any) -> dict:
        s = {**WORKER_DEFAULTS, "url": self.url, "table": self.table, **overrides}
        s.setdefault("task_heartbeat_interval", s["alive_time"] / 5)
        return s

    def worker(self, name: str = "worker", *, env: dict | None = None, **overrides: Any) -> Proc:
        """Start a real worker (supervisor + ``processors`` children) serving the handlers
        (``env``: variables to add, e.g. :mod:`reliability.skew`'s)."""
        return self.fleet.agent(
            "worker",
            self.worker_settings(**overrides),
            name=name,
            env={LEDGER_ENV: str(self.ledger_path), **(env or {})},
        )

    def scheduler(self, name: str = "scheduler", *, env: dict | None = None, **settings: Any) -> Proc:
        """Start a real ``perfectsched run`` loop submitting this stage's schedules (or those of
        ``schedule_table``; ``target``: a handler of leased occurrences, see :mod:`reliability.agents`)."""
        return self.fleet.agent(
            "scheduler",
            {
                "url": self.url,
                "table": self.table,
                "log_level": "WARNING",
                "schedule_table": self.tables.schedules,
                **settings,
            },
            name=name,
            env={LEDGER_ENV: str(self.ledger_path), **(env or {})},
        )

    def submitter(self, name: str = "submitter", *, env: dict | None = None, **spec: Any) -> Proc:
        """Start submitter threads (see :mod:`reliability.agents`) that acknowledge into
        :meth:`acks` until :meth:`stop_submitters`."""
        return self.fleet.agent(
            "submit",
            {
                "url": self.url,
                "table": self.table,
                "ledger": str(self.workdir / ACKS),
                "stop_file": str(self.workdir / "stop-submitters"),
                **spec,
            },
            name=name,
            env=env,
        )

    def stop_submitters(self, procs: Collection[Proc]) -> None:
        (self.workdir / "stop-submitters").touch()
        wait_for(lambda: not any(p.running() for p in procs), 60, "the submitters to stop")

    def ledger(self, name: str = "ledger.txt") -> Ledger:
        """The handlers' executions (or another ledger of this stage, by file name)."""
        return Ledger(self.workdir / name)

    def acks(self) -> Ledger:
        """The submitters' acknowledgements."""
        return self.ledger(ACKS)

    def finished(self) -> int:
        """Rows finished so far (-1 on a database error: the server may be down on purpose)."""
        try:
            return self.queue.stats()["finished"]
        except queue_core.DatabaseError:
            return -1

    def verify(
        self,
        result: Result,
        expected: Collection[str],
        *,
        executed: Collection[str] | None = None,
        planned: Mapping[str, int] | None = None,
        strict: bool = True,
        killed: Collection[int] = (),
    ) -> dict[str, queue_core.TaskMetadata]:
        """The checks of a drained queue (see :mod:`reliability.checks`); returns the rows.

        ``expected``: keys that must have finished with outcome success exactly once;
        ``executed``: those of them whose handler records executions (default: all);
        ``planned``: executions a key makes beyond its first on purpose (handler failures);
        ``strict``: a re-execution no cut lease explains is a duplicate (else only counted);
        ``killed``: pids the scenario had killed whose successors give back what they held
        (children of a pool on HUP): each execution of theirs that is not its key's finish was
        cut, though its lease may be given back before the watch sees it (a success not yet
        written when the kill came, :func:`queue_core.worker.processor.give_back_orphans`).
        """
        if self.watch is not None:
            self.watch.settle()
            checks.graceful_stops_kept_leases(result, self.watch.cut_by_pid(), self.fleet.graceful)
        table = checks.rows(self.queue)
        checks.tasks_succeeded_once(result, table, self.tables.finishes(), expected)
        checks.nothing_left_running(result, table)
        ledger = self.ledger()
        cut = checks.cut_executions(self.watch.cut_pairs() if self.watch else set(), ledger, table, killed)
        checks.executions_explained(
            result, ledger, expected if executed is None else executed, cut, planned, strict=strict
        )
        if self.watch is not None:
            for v in self.watch.cap_violations[:5]:
                result.fail(v)
        return table

    def log_lines(self, *patterns: str) -> int:
        """Lines of the started processes' output containing one of ``patterns``."""
        n = 0
        for proc in self.fleet.procs:
            n += sum(1 for line in proc.output(tail=None).splitlines() if any(p in line for p in patterns))
        return n

    @staticmethod
    def done_at(table: Mapping[str, queue_core.TaskMetadata]) -> dict[str, float]:
        return {k: m.finished_at for k, m in table.items() if m.finished_at is not None}


@contextmanager
def stage(ctx: Context, scenario: str, *, schedules: bool = False, watch: bool = True) -> Iterator[Stage]:
    tables = Tables(ctx.url, scenario)
    workdir = ctx.workdir / f"{scenario}-{ctx.backend}-{tables.queue[-8:]}"
    workdir.mkdir(parents=True, exist_ok=True)
    fleet = Fleet(workdir / "logs")
    queue = lw = None
    try:
        queue = tables.create(schedules=schedules)
        lw = LeaseWatch(ctx.url, queue.store.t) if watch else None
        if lw is not None:
            lw.start()
        yield Stage(ctx, scenario, tables, queue, fleet, lw, workdir)
    finally:
        try:
            fleet.kill_all()
            if lw is not None:
                lw.stop()
            if queue is not None:
                queue.close()
        finally:
            if not ctx.keep_tables:
                tables.drop()
