"""The worker: processors that poll and run handlers, supervised, obeying signals.

Process model (``processor_type = "process"``, the default)::

    supervisor (the process you start)
      ├── child 1: poll loop + task monitor thread (lease heartbeats, liveness beats) + signal thread
      └── child N: ...

A child silent for ``child_heartbeat_limit`` is SIGKILLed and replaced; a child that dies is
replaced. With ``processor_type = "thread"`` the processors are threads of one process.

Signals: TERM/INT graceful stop (a second one: immediate), QUIT immediate stop (running
tasks are not finished; their leases expire and they run again), USR1 graceful restart
(config re-read), HUP immediate restart, USR2 reopen log files.

Where the parts live: this module starts a worker and is a child's entry point;
:mod:`queue_core.worker.supervisor` keeps the children, :mod:`queue_core.worker.thread_worker` is thread mode,
:mod:`queue_core.worker.processor` the poll loop, :mod:`queue_core.worker.monitor` its heartbeat thread,
:mod:`queue_core.worker.settler` its batched finishes, :mod:`queue_core.worker.listener` its PostgreSQL
wake-ups, and :mod:`queue_core.worker.service` what every long-running service does (signals, the
stop cascade, database backoff, config reloads; shared with ``perfectsched run``).
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

from ..api.app import describe_types, served_types
from ..api.worker_registry import pq_version
from ..errors import AccessDeniedError, DatabaseError, DatabaseUnreachableError, ForeignTableError, SchemaError
from ..store.protocol import load_driver
from .burst import BurstBoard
from .forked_check import CheckApart
from .lease_ledger import LeaseLedger
from .loader import load_target
from .logs import reopen_logs, setup_logging
from .processor import Processor, open_checked, stop_at_once
from .service import CHILD_SIGNALS, EXIT_IMMEDIATE, EXIT_OK, WORKER_SIGNALS, Intent, Signals, exit_now
from .supervisor import Supervisor
from .thread_worker import ThreadWorker

log = logging.getLogger("queue_core.worker")

__all__ = ["Processor", "install_child_signals", "load_target", "run_worker"]


def run_worker(
    target: Any, settings: dict, *, burst: bool = False, config_loader: Callable[[], dict] | None = None
) -> int:
    """Serve ``target`` until stopped (or, with ``burst``, until no task is due). Returns an exit code."""
    setup_logging(settings.get("log"), settings.get("log_level", "INFO"))
    # pq's version looked up once, here: the processors forked later inherit it for the registry
    log.info(
        "pq %s serving %s from queues %s",
        pq_version(),
        describe_types(served_types(target)),
        settings.get("queues", "default"),
    )
    check_database(settings, burst=burst)
    if settings.get("processor_type", "process") == "thread" or not hasattr(os, "fork"):
        return ThreadWorker(target, settings, burst=burst, config_loader=config_loader).run()
    sys.stdout.flush()
    sys.stderr.flush()
    board = BurstBoard(settings["processors"]) if burst else None
    child_main = functools.partial(_child_main, target, burst, board)
    return Supervisor(child_main, settings, burst=burst, config_loader=config_loader, board=board).run()


def check_database(settings: dict, *, burst: bool = False) -> None:
    """Before any processor starts: raise ForeignTableError when the table is not a queue table,
    AccessDeniedError when this account or database refuses writes to it (a read-only replica,
    transaction or file; a grant missing). A worker could only fail at every poll there. Any
    other failure (an outage, a table ``init`` has not made yet) is left to the processors,
    which poll through it; but a ``burst`` worker, which ends once nothing is due, raises
    SchemaError for a missing table and DatabaseUnreachableError for a database it cannot
    connect to, rather than wait for ever for them (a cron job or CI step runs it). The check connects in a
    child process of its own (:mod:`queue_core.worker.forked_check`: the processors forked later inherit no
    database client state) and may wait for the database (a locked SQLite file): meanwhile the
    worker obeys its signals, a stop ending it at once (it has started nothing)."""
    refused: tuple[type[Exception], ...] = (ForeignTableError, AccessDeniedError)
    if burst:
        refused += (SchemaError, DatabaseUnreachableError)
    if not hasattr(os, "fork"):
        _check(settings, refused)
        return
    load_driver(settings.get("url"))  # once, here: the checker and the processors inherit it
    checker = CheckApart(functools.partial(_check, settings, refused), WORKER_SIGNALS)
    signals = Signals(WORKER_SIGNALS, _before_start(checker))
    try:
        checker.result(wait=signals.wait)
    finally:
        signals.close()
        checker.kill()


def _check(settings: dict, refused: tuple[type[Exception], ...]) -> None:
    """Open and check the database; raise what ``refused`` names or a ConfigError (a URL the
    driver refuses); another database error is only logged."""
    try:
        open_checked(settings).close()
    except refused:
        raise
    except DatabaseError as exc:
        log.warning("database check at start failed (the processors will keep trying): %s", exc)


def _exit_before_start(what: str, checker: CheckApart) -> Callable[[], None]:
    def stop() -> None:
        checker.kill()
        exit_now(EXIT_OK, f"worker pid={os.getpid()}: {what}: exiting (before its start-up check ended)")

    return stop


def _before_start(checker: CheckApart) -> dict[Intent, Callable[[], None]]:
    """What the signals of a worker do while ``checker`` checks its database, before it starts anything."""
    return {
        Intent.STOP: _exit_before_start("stop", checker),
        Intent.STOP_NOW: _exit_before_start("immediate stop", checker),
        Intent.RESTART: lambda: None,  # nothing started yet: the start reads the configuration anyway
        Intent.RESTART_NOW: lambda: None,
        Intent.REOPEN_LOGS: reopen_logs,
    }


def install_child_signals(proc: Processor) -> Signals:
    """A child's signals, acted upon by a signal thread (its main thread runs handlers): TERM,
    INT and USR1 stop ``proc`` after its current task, QUIT and HUP end the process at once
    (what it has not started given back first), USR2 reopens log files."""
    actions: dict[Intent, Callable[[], None]] = {
        Intent.STOP: proc.stop,
        Intent.STOP_NOW: functools.partial(stop_at_once, [proc], EXIT_IMMEDIATE),
        Intent.REOPEN_LOGS: reopen_logs,
    }
    return Signals(CHILD_SIGNALS, actions, repeated_stop_is_immediate=False).act_in_thread()


def _child_main(
    target: Any, burst: bool, board: BurstBoard | None, settings: dict, beat_fd: int, slot: int, ledger: LeaseLedger
) -> int:
    os.setpgid(0, 0)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the supervisor's wake-up, not ours
    proc = Processor(
        target, settings, burst=burst, beat_fd=beat_fd, name=f"processor-{slot}", ledger=ledger, board=board, slot=slot
    )
    install_child_signals(proc)
    log.info("processor %d running pid=%d", slot, os.getpid())
    return proc.run()
