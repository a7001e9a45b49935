"""The ``perfectsched run`` loop: the built-in submitter, or PerfectSched-style handlers.

Without a target (the usual setup) the loop calls :meth:`Scheduler.tick`, which submits every
due occurrence into the queue table as a task keyed ``"<schedule key>.<scheduled time>"`` and
advances the schedule in the same transaction; ``perfectqueue run`` workers then execute the
tasks. Between ticks it sleeps until the earliest due schedule or ``poll_interval``, whichever
is sooner. Any number of these loops can run at once (no leader, each occurrence once).

With a target (an ``Application``/``Dispatch`` class, a ``Router`` or a function, as for
``perfectqueue run``) the loop leases occurrences with :meth:`Scheduler.poll` and runs the
handler on the :class:`~perfectsched.scheduler.ScheduledTask`, heartbeating the lease from a
:class:`queue_core.worker.monitor.TaskMonitor` thread. A handler that returns finishes the
occurrence (the schedule advances); one that raises retries it after ``retry_wait``.

Signals: TERM/INT/QUIT stop once the current handler returns (a second stop signal during a
handler exits at once; the lease expires and the occurrence runs again), USR1/HUP restart with
the configuration re-read, USR2 reopens log files. Handler errors, lost leases and database
errors are logged and never end the loop (database errors back off, up to 10 s); neither does a
schedule that cannot be computed: tick and poll set it aside and log it once. What a signal does
is declared in :data:`queue_core.worker.service.SCHEDULER_SIGNALS`; catching and acting on it,
the stop cascade, the backoff and the config reload are :mod:`queue_core.worker.service`'s, as
for the worker. ``--burst`` handles what is due and returns 0; it raises database errors instead
of retrying them (exit 5), and tries each occurrence at most once per run (with
``retry_wait = 0`` a failing handler would otherwise be due again at once, forever). A schedule table that was
never created, or that an older release made and ``init`` has not upgraded, is reported at
startup in every mode (exit 5, "run 'init' ...").
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from queue_core import config as config_mod
from queue_core.errors import (
    AccessDeniedError,
    AlreadyFinishedError,
    ConfigError,
    DatabaseError,
    PreemptedError,
    SchemaError,
    TaskError,
)
from queue_core.rules.tracebacks import traceback_text
from queue_core.rules.validate import _error_text
from queue_core.worker.logs import reopen_logs, setup_logging
from queue_core.worker.monitor import TaskMonitor, run_handler
from queue_core.worker.service import (
    EXIT_OK,
    SCHEDULER_SIGNALS,
    Intent,
    LoopControl,
    OutageWait,
    Signals,
    exit_now,
    reload_settings,
)

from . import cron as cronlib
from .scheduler import EXTRA_KEYS, Scheduler

log = logging.getLogger("perfectsched.runner")

MIN_WAIT = 0.01

__all__ = ["open_checked", "open_scheduler", "run_scheduler"]


def open_scheduler(settings: dict, **overrides: Any) -> Scheduler:
    """Open the scheduler described by merged settings.

    In settings ``table`` is the QUEUE table (the key perfectqueue uses) and
    ``schedule_table`` the schedule table; ``timezone`` is the default zone of new schedules.
    """
    cfg = {**settings, **overrides}
    zone = cfg.get("timezone") or EXTRA_KEYS["timezone"][0]
    try:
        cronlib.validate_timezone(zone)
    except ValueError as exc:
        raise ConfigError(f"config timezone: {exc}") from None
    core = {k: v for k, v in cfg.items() if k in config_mod.DEFAULTS and k not in ("url", "table")}
    own = {k: cfg[k] for k in ("catchup_grace", "tick_batch") if k in cfg}
    return Scheduler(
        cfg.get("url"),
        cfg.get("schedule_table") or EXTRA_KEYS["schedule_table"][0],
        cfg.get("table") or config_mod.DEFAULTS["table"][0],
        zone,
        **core,
        **own,
    )


def open_checked(settings: dict) -> Scheduler:
    """The scheduler of ``settings`` once it has connected, found its tables and may write its
    schedule table, tried once (what a reloaded configuration must pass); what it opened is
    closed when a check fails."""
    sched = open_scheduler(settings, max_retry_count=0)
    try:
        sched.check_tables()
        sched.check_writable()
    except BaseException:
        sched.close()
        raise
    return sched


def _iso(ts: float, zone: str) -> str:
    try:
        return datetime.fromtimestamp(ts, cronlib.validate_timezone(zone)).isoformat()
    except Exception:  # noqa: BLE001 - logging must never fail
        return datetime.fromtimestamp(ts, UTC).isoformat()


class SchedulerLoop:
    """One ``perfectsched run`` process (see the module docstring)."""

    def __init__(
        self,
        settings: dict,
        *,
        target: Any = None,
        burst: bool = False,
        poll_interval: float | None = None,
        config_loader: Callable[[], dict] | None = None,
    ):
        self.settings = dict(settings)
        self.target = target
        self.burst = burst
        self.poll_interval_override = poll_interval
        self.config_loader = config_loader
        self.sched: Scheduler | None = None
        self.monitor: TaskMonitor | None = None
        # plain flags and a self-pipe: the signal thread sets and reads them
        self.control = LoopControl()
        self.restart_requested = False
        self.in_handler = False
        self.db_backoff = OutageWait()
        self.healthy = False  # True once a step succeeded (a missing table then is transient)
        self.attempted: set[tuple[str, int]] = set()  # burst: occurrences handled in this run
        self.last_next: tuple[str, int] | None = None  # the next occurrence last logged

    # -- setup ---------------------------------------------------------------------------
    @property
    def poll_interval(self) -> float:
        if self.poll_interval_override is not None:
            return float(self.poll_interval_override)
        return float(self.settings.get("poll_interval") or config_mod.DEFAULTS["poll_interval"][0])

    def _open(self) -> None:
        self.sched = open_scheduler(self.settings)
        if not self.healthy:
            self._probe()
        if self.target is not None:
            self.monitor = TaskMonitor(
                {
                    "task_heartbeat_interval": self.settings.get(
                        "task_heartbeat_interval", config_mod.DEFAULTS["task_heartbeat_interval"][0]
                    ),
                    "child_heartbeat_interval": self.settings.get(
                        "child_heartbeat_interval", config_mod.DEFAULTS["child_heartbeat_interval"][0]
                    ),
                    "alive_time": self.alive_time,
                }
            )
            self.monitor.start()
        log.info(
            "perfectsched %s pid=%d schedule_table=%s queue_table=%s database=%s",
            "running handler " + _name(self.target) if self.target is not None else "submitting",
            os.getpid(),
            self.sched.table,
            self.sched.queue.table,
            self.sched.queue.url,
        )

    @property
    def open_sched(self) -> Scheduler:
        """The scheduler, from :meth:`_open` to :meth:`_close`."""
        if self.sched is None:
            raise RuntimeError("the scheduler loop is not open")
        return self.sched

    @property
    def open_monitor(self) -> TaskMonitor:
        """The monitor of a handler's runs (the loop runs a target), from :meth:`_open` to :meth:`_close`."""
        if self.monitor is None:
            raise RuntimeError("the scheduler loop runs no handler, or is not open")
        return self.monitor

    def _probe(self) -> None:
        """Fail fast (exit 5) on a schedule table that was never created or that ``init`` has not
        upgraded, on an account or database that may not write to the tables (a read-only
        replica), or on any database error in burst mode; in a long-running loop other database
        errors (an outage) are retried."""
        try:
            self.open_sched.check_tables()
            self.open_sched.check_writable()
        except DatabaseError as exc:
            if self.burst or isinstance(exc, (SchemaError, AccessDeniedError)):
                self.open_sched.close()
                self.sched = None
                raise
            log.error("database error at startup (will retry): %s", exc)

    def _close(self) -> None:
        if self.monitor is not None:
            self.monitor.stop()
            self.monitor = None
        if self.sched is not None:
            self.sched.close()
            self.sched = None

    @property
    def alive_time(self) -> float:
        return float(self.settings.get("alive_time") or config_mod.DEFAULTS["alive_time"][0])

    # -- main loop -----------------------------------------------------------------------
    def run(self) -> int:
        root = logging.getLogger()
        before = set(root.handlers)
        setup_logging(self.settings.get("log"), self.settings.get("log_level") or "INFO")
        signals = Signals(
            SCHEDULER_SIGNALS,
            {
                Intent.STOP: self.stop,
                Intent.STOP_NOW: self.stop_now,
                Intent.RESTART: self.request_restart,
                Intent.REOPEN_LOGS: reopen_logs,
            },
        ).act_in_thread()
        try:
            self._open()
            self._loop()
            log.info("perfectsched stopped pid=%d", os.getpid())
            return EXIT_OK
        finally:
            self._close()
            signals.close()
            # in-process callers (tests, embedding): take our log handlers away again
            for h in [h for h in root.handlers if getattr(h, "_pq", False) and h not in before]:
                root.removeHandler(h)
                h.close()

    def _loop(self) -> None:
        while not self.control.stopping:
            if self.restart_requested:
                self._restart()
                continue
            wait = self._turn()
            if wait is None:
                return
            if wait > 0:
                self.control.idle(wait)

    def _turn(self) -> float | None:
        """One step; then how long to wait before the next (None: a burst is done)."""
        try:
            busy = self._step()
        except DatabaseError as exc:
            if self.burst or (isinstance(exc, SchemaError) and not self.healthy):
                raise  # one-shot run, or never initialised: report it (exit 5)
            wait = self.db_backoff.failed()
            log.error("database error (retrying in %.1fs): %s", wait, exc)
            return wait
        self.db_backoff.succeeded()
        self.healthy = True
        if busy:
            return 0.0
        if self.burst:
            log.info("nothing due: exiting (burst)")
            return None
        return self._idle_wait()

    # -- what signals do (called from the signal thread) -------------------------------
    def stop(self) -> None:
        """Stop once the current handler returned."""
        self.control.stop()

    def stop_now(self) -> None:
        """A second stop signal: during a handler, exit at once (its lease expires and the
        occurrence runs again); otherwise nothing runs that a stop would wait for."""
        if self.in_handler:
            exit_now(EXIT_OK, "perfectsched: second stop signal during a handler: exiting now")
        self.stop()

    def request_restart(self) -> None:
        """Restart, with the configuration re-read, once the current handler returned."""
        self.restart_requested = True
        self.control.wake()

    def _step(self) -> bool:
        """One tick or one handled occurrence. True when there may be more work right now."""
        if self.target is None:
            n = self.open_sched.tick()
            if n:
                log.info(
                    "submitted %d %s into queue table %s", n, "task" if n == 1 else "tasks", self.open_sched.queue.table
                )
            return False  # tick already submitted everything due
        task = self.open_sched.poll(alive_time=self.alive_time)
        if task is None:
            return False
        if self.burst:
            # A handler that failed with retry_wait 0 is due again at once: one attempt per burst.
            seen = (task.key, task.scheduled_time)
            if seen in self.attempted:
                task.release()
                log.info(
                    "schedule=%s scheduled_time=%d was already attempted in this burst; leaving it for the next run",
                    task.key,
                    task.scheduled_time,
                )
                return False
            self.attempted.add(seen)
        self._process(task)
        return True

    def _idle_wait(self) -> float:
        interval = self.poll_interval
        try:
            nxt = self.open_sched.next_occurrence()
        except DatabaseError as exc:
            log.warning("could not read the next due time: %s", exc)
            return interval
        if nxt is None:
            return interval
        self._log_next(nxt)
        due = nxt[1]
        left = due - self.open_sched.now()
        if left <= 0:  # held by another scheduler right now; it will advance it
            return interval
        return max(MIN_WAIT, min(interval, left))

    def _log_next(self, nxt: tuple[str, float, int, str]) -> None:
        """Log the next due occurrence once each time it changes (an idle scheduler says what it waits for)."""
        key, _due, scheduled, zone = nxt
        if self.last_next != (key, scheduled):
            self.last_next = (key, scheduled)
            log.info("next: schedule %s at %s (%s)", key, _iso(scheduled, zone), zone)

    def _restart(self) -> None:
        self.restart_requested = False
        old = self.settings
        new = reload_settings(self.config_loader, old, opens=open_checked)
        self.settings = old if new is old else dict(new)
        self._close()
        try:
            self._reopen(old)
        except TaskError as exc:
            if self.settings is old:
                raise
            log.error("restart with the new config failed, keeping the old config: %s", exc)
            self.settings = old
            self._reopen(old)
        log.info("restarted")

    def _reopen(self, old: dict) -> None:
        if (self.settings.get("log"), self.settings.get("log_level")) != (old.get("log"), old.get("log_level")):
            setup_logging(self.settings.get("log"), self.settings.get("log_level") or "INFO")
        self._open()

    # -- handlers -------------------------------------------------------------------------
    def _process(self, task) -> None:
        when = _iso(task.scheduled_time, task.timezone)
        log.info("acquired schedule=%s type=%s scheduled_time=%d (%s)", task.key, task.type, task.scheduled_time, when)
        started = time.monotonic()
        _note_decided_errors(task)
        self.in_handler = True
        try:
            error = run_handler(self.target, task, self.open_monitor)
        finally:
            self.in_handler = False
        if isinstance(error, KeyboardInterrupt):
            self.control.stop()
        self._settle(task, error, time.monotonic() - started, when)

    def _settle(self, task, error, elapsed: float, when: str) -> None:
        try:
            if getattr(task, "lost", False):
                log.warning(
                    "schedule=%s scheduled_time=%d: lease lost during the handler; result dropped",
                    task.key,
                    task.scheduled_time,
                )
            elif task.done and getattr(task, "decided_error", None) is not None:
                _log_handler_error(task, task.decided_error, when, task.decided)
            elif task.done:
                log.info(
                    "settled schedule=%s scheduled_time=%d (%s) by the handler (%.3fs)",
                    task.key,
                    task.scheduled_time,
                    when,
                    elapsed,
                )
            elif error is not None:
                _log_handler_error(task, error, when, task.retry_or_fail(error))
            else:
                task.finish()
                log.info(
                    "finished schedule=%s scheduled_time=%d (%s) (%.3fs)", task.key, task.scheduled_time, when, elapsed
                )
        except (PreemptedError, AlreadyFinishedError) as exc:
            log.warning("could not settle schedule=%s: %s", task.key, exc)
        except TaskError as exc:  # DatabaseError included: the lease expires, it runs again
            log.error("could not settle schedule=%s (the lease will expire and it runs again): %s", task.key, exc)


def _note_decided_errors(task) -> None:
    """Remember the error an Application's decider hands to ``retry_or_fail``, and what became
    of it (to log them)."""
    original = task.retry_or_fail
    task.decided_error, task.decided = None, "retry"

    def retry_or_fail(error: Any = None, now: float | None = None) -> str:
        task.decided_error = error if isinstance(error, BaseException) else None
        task.decided = original(error=error, now=now)
        return task.decided

    task.retry_or_fail = retry_or_fail


def _name(target: Any) -> str:
    return getattr(target, "__qualname__", None) or type(target).__name__


def run_scheduler(
    settings: dict,
    *,
    target: Any = None,
    burst: bool = False,
    poll_interval: float | None = None,
    config_loader: Callable[[], dict] | None = None,
) -> int:
    """Run ``perfectsched run`` until stopped (or, with ``burst``, until nothing is due).

    ``settings``: merged config (``table`` = queue table, ``schedule_table``, ``timezone``,
    ``catchup_grace``, ``tick_batch`` and the queue_core keys). ``target``: a handler for
    PerfectSched-style processing; None submits occurrences as queue tasks. ``config_loader``
    re-reads the settings on SIGUSR1/SIGHUP. Returns an exit code.
    """
    return SchedulerLoop(
        settings, target=target, burst=burst, poll_interval=poll_interval, config_loader=config_loader
    ).run()


def _log_handler_error(task, error: BaseException, when: str, decided: str) -> None:
    """A handler's error on an occurrence, once, with its traceback (capped as every error text):
    retried (WARNING), or skipped for a permanent error (ERROR: that occurrence never runs)."""
    text = traceback_text(error) or _error_text(error)
    if decided == "skip":
        log.error(
            "skipped schedule=%s scheduled_time=%d (%s), a permanent error: %s",
            task.key,
            task.scheduled_time,
            when,
            text,
        )
        return
    log.warning("retry schedule=%s scheduled_time=%d (%s): %s", task.key, task.scheduled_time, when, text)
