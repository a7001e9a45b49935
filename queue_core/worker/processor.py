"""A processor: one poll loop that leases tasks, runs their handlers and settles the outcomes.

A worker child runs one (:mod:`queue_core.worker.main`); thread mode runs several in one process
(:mod:`queue_core.worker.thread_worker`). Each has a task monitor thread (:mod:`queue_core.worker.monitor`) and
finishes its successes in batches (:mod:`queue_core.worker.settler`).
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from typing import Any

from ..api import tracing
from ..api.app import served_types
from ..api.queue import Queue
from ..api.worker_registry import registration_of
from ..config import DEFAULTS
from ..errors import AlreadyFinishedError, DatabaseError, PreemptedError, TaskError
from ..rules import policy
from ..rules.tracebacks import traceback_text
from ..rules.validate import _error_text
from .burst import AfterEmpty, BurstBoard, after_empty_claim, holds_nothing
from .lease_ledger import LeaseLedger, NoLedger
from .listener import start_listener
from .monitor import TaskMonitor, run_handler
from .periodic import Chore
from .service import EXIT_OK, EXIT_RECYCLE, IMMEDIATE_GRACE, LoopControl, OutageWait, exit_now
from .settler import Settler

log = logging.getLogger("queue_core.worker")

#: a processor leases as many short tasks as it expects to finish in this time (seconds)
BATCH_WINDOW = 0.1
#: the longest an immediate stop waits for its processors to give back what they have not started
GIVE_BACK_TIME = 0.75 * IMMEDIATE_GRACE

_QUEUE_KEYS = set(DEFAULTS)


def open_queue(settings: dict) -> Queue:
    """The queue a worker's settings describe."""
    return Queue(**{k: v for k, v in settings.items() if k in _QUEUE_KEYS})


def open_checked(settings: dict) -> Queue:
    """The queue of ``settings`` once it has connected and may write its table (an UPDATE of no
    row), tried once: ConfigError for a URL option the driver refuses as it connects,
    ForeignTableError, AccessDeniedError, or the DatabaseError of an outage; what it opened is
    closed then. The start-up check of a worker and of a reloaded configuration."""
    queue = open_queue({**settings, "max_retry_count": 0})
    try:
        queue.check_writable()
    except BaseException:
        queue.close()
        raise
    return queue


class Processor:
    """One poll loop: lease tasks, run their handlers, settle the outcome."""

    def __init__(
        self,
        target: Any,
        settings: dict,
        *,
        burst: bool = False,
        queue=None,
        beat_fd: int | None = None,
        name: str = "processor",
        ledger: LeaseLedger | None = None,
        board: BurstBoard | None = None,
        slot: int = 0,
    ):
        self.target = target
        self.types = served_types(target)  # leased: only tasks of these types (None: any)
        self.settings = settings
        self.burst = burst
        self.name = name
        #: the busy slots of this worker's processors (burst): one ends only once all are idle
        self.board, self.slot = board, slot
        self.queue = queue or open_queue(settings)
        self.settler = Settler(self.queue)
        names = list(self.queue.served_queues[0])
        self.registration = registration_of(self.queue, names, None if self.types is None else list(self.types))
        self.monitor = TaskMonitor(settings, beat_fd, self.settler)
        #: what this processor holds, kept where the process replacing it can read it should it die
        self.ledger: LeaseLedger | NoLedger = ledger or NoLedger()
        self.settler.release = self.monitor.drop
        self.control = LoopControl()
        self.processed = 0
        self.db_backoff = OutageWait()
        self._avg_task_time: float | None = None
        #: how long the last batch's prefetch took: the start grace it promises covers it
        self._prefetch_time = 0.0
        self.chores = self._chores()
        #: the current batch's tasks whose handler has not started; taken under the lock, by the
        #: loop to start the next one or by an immediate stop to give them back
        self._unstarted: list = []
        self._batch_lock = threading.Lock()
        #: set while an immediate stop gives back what this processor holds: its loop, once ended,
        #: waits for it (up to GIVE_BACK_TIME) before the process may end on its own
        self._giving_back = threading.Event()
        self._given_back = threading.Event()
        #: what the last claim noted (rate_wait: seconds until a rate limit lets a held-back task start)
        self._notes: dict = {}
        self._settled_with_claim = False  # the last claim also wrote successes (their hooks ran after it read)
        #: the lease token of a claim whose batch this processor has not learnt (it is running, or
        #: it raised: its COMMIT may have happened all the same); the ledger keeps it too
        self._claim_token: int | None = None
        #: a release of unstarted tasks failed: their leases are still held, the ledger keeps them
        self._unreleased = False

    def _chores(self) -> list[Chore]:
        """The purge of finished rows past retention (the events it deletes counted first) and,
        more often, the roll-up of the statistics."""
        cleanup = Chore("cleanup", self.settings["cleanup_interval"], self.queue.cleanup)
        cleanup.done = lambda n: f"purged {n} finished tasks past retention" if n else None
        if not self.settings.get("stats_interval"):
            return [cleanup]
        return [cleanup, Chore("statistics roll-up", self.settings["stats_interval"], self.queue.roll_up_stats)]

    @property
    def stopping(self) -> bool:
        return self.control.stopping

    def stop(self) -> None:
        """Stop after the current task. Takes no lock: safe from any thread, even a signal handler."""
        self.control.stop()

    def wake(self) -> None:
        """Poll now instead of at the end of the idle wait (called from other threads)."""
        self.control.wake()

    def run(self, *, listen: bool = True) -> int:
        """Run until stopped, burst-empty or recycled. Returns an exit code.

        ``listen``: start this processor's own wake-up listener (thread workers share one).
        """
        self.monitor.start()
        tracing.warm()  # its import, once, before the first claim: not inside a start grace
        self.registration.join()
        listener = start_listener(self.queue, self.wake) if listen and not self.burst else None
        try:
            give_back_orphans(self.queue, self.ledger)
            return self._loop()
        finally:
            if listener is not None:
                listener.stop()
            self.monitor.stop()
            self.monitor.join(5)
            self.settler.flush()
            given_back = self._give_back_claim() and not self._unreleased
            if not self.settler.waiting and given_back:  # else given back by whoever follows
                self.ledger.clear()
            self.registration.leave()
            if self._giving_back.is_set():
                self._given_back.wait(GIVE_BACK_TIME)

    def batch_size(self) -> int:
        """How many tasks to lease: as many as this processor expects to finish in
        BATCH_WINDOW seconds (at least 1 + task_prefetch, at most batch_size)."""
        s = self.settings
        n = 1 + s["task_prefetch"]
        if self._avg_task_time is not None:
            fit = int(BATCH_WINDOW / max(self._avg_task_time, 1e-5))
            n = max(n, min(s["batch_size"], fit))
        if s.get("max_request_per_child"):
            n = min(n, max(1, s["max_request_per_child"] - self.processed))
        return n

    def _loop(self) -> int:
        limit = self.settings.get("max_request_per_child")
        while not self.stopping:
            for chore in self.chores:
                chore.run_if_due()
            written = self.settler.writes
            tasks = self._claim()
            if tasks:
                if self.board is not None:
                    self.board.mark(self.slot, True)
                self._run_batch(tasks)
            elif tasks is not None and self._after_empty_claim(written):
                return EXIT_OK
            if limit and self.processed >= limit:
                return EXIT_RECYCLE
        return EXIT_OK

    def _after_empty_claim(self, written: int) -> bool:
        """After a claim that leased nothing: whether the burst is done (:func:`burst.after_empty_claim`).
        More may be due that the claim could not see: rows it only ended (more are due behind
        them), successes it wrote (what their after-commit hooks submit), successes written on
        their own since ``written`` (what they set off: a workflow's next steps). This processor
        is idle once it holds nothing of that, and waits while a sibling is busy."""
        rate_wait = self._notes.get("rate_wait")
        facts = {
            "ended_rows": bool(self._notes.get("ended_rows")),
            "wrote": self.burst and (self._settled_with_claim or self.settler.wrote_since(written)),
            "rate_limited": rate_wait is not None,
        }
        if self.board is not None and holds_nothing(**facts):
            self.board.mark(self.slot, False)
        siblings_busy = self.board is not None and self.board.others_busy(self.slot)
        step = after_empty_claim(burst=self.burst, siblings_busy=siblings_busy, **facts)
        if step is AfterEmpty.WAIT:
            self.control.idle(min(self.settings["poll_interval"], rate_wait or math.inf))
        return step is AfterEmpty.END

    def _claim(self) -> list | None:
        """Lease the next batch, finishing the waiting successes in the same transaction: the
        batch's unstarted tasks (under the batch lock, so that an immediate stop either comes
        before the claim or gives back what it leased). None after a database error (backed off)."""
        with self._batch_lock:
            if self.stopping:
                return []
            try:
                self._unstarted = self._lease()
                return list(self._unstarted)
            except DatabaseError as exc:
                wait = self.db_backoff.failed()
                error = exc
        log.error("poll failed (will retry in %.1fs): %s", wait, error)
        self.control.idle(wait)
        return None

    def _announce(self, token: int) -> None:
        self._claim_token = token
        self.ledger.claiming(token)

    def _give_back_claim(self) -> bool:
        """Give back what the last claim leased if it raised (its COMMIT may have happened, its
        acknowledgement lost); whether nothing of it is left held."""
        if self._claim_token is None:
            return True
        try:
            self.queue.release_leases([], claims=[self._claim_token])
        except DatabaseError as exc:
            log.warning("could not give back what a failed claim may have leased: %s", exc)
            return False
        self._claim_token = None
        self.ledger.claimed()
        return True

    def _lease(self) -> list:
        if not self._give_back_claim():
            raise DatabaseError("the last claim's leases could not be given back")
        settled = self.settler.take()
        self._notes = {}
        try:
            tasks = self.queue.poll_multi(
                self.batch_size(),
                alive_time=self.settings["alive_time"],
                finish=[t for t, _ in settled],
                types=self.types,
                notes=self._notes,
                start_within=policy.start_grace(self._prefetch_time),
                announce=self._announce,
                ended_by_claim=getattr(self.target, "ended_by_claim", None),
            )
        except DatabaseError:
            self.settler.put_back(settled)
            raise
        self.ledger.record(tasks)
        self._claim_token = None
        self.db_backoff.succeeded()
        self.settler.report(settled)
        self._settled_with_claim = bool(settled)
        return tasks

    def _run_batch(self, tasks: list) -> None:
        for t in tasks:
            self.monitor.hold(t)
        with self._batch_lock:
            if not self._giving_back.is_set():  # else an immediate stop gave them back already
                self._unstarted = list(tasks)
        self.ledger.running_all()  # a crash in code run for the whole batch is charged to all of it
        began = time.monotonic()
        prefetch(self.target, self.queue, tasks)
        self._prefetch_time = time.monotonic() - began  # the next claim's grace covers it
        self.ledger.running(None)
        while (t := self._next_unstarted()) is not None:
            self.process(t)
            self.processed += 1
            if policy.write_success_at_once(t.max_attempts):  # before the next handler runs
                self.settler.flush()

    def _next_unstarted(self):
        """The batch's next task to run; None once it is done, or stopping (the rest released)."""
        with self._batch_lock:  # released under the lock: an immediate stop waits for it to end
            if not self.stopping and self._unstarted:
                return self._unstarted.pop(0)
            rest, self._unstarted = self._unstarted, []
            self._release(rest)
        return None

    def give_back_now(self) -> None:
        """An immediate stop, from another thread (the process ends next): write the successes
        waiting in the settler, and release the batch's tasks whose handler has not started, their
        attempts given back; the running handler is abandoned, its lease left to expire. Best
        effort: whoever stops the process at once may kill it first."""
        self._giving_back.set()
        self.control.stop()  # first: the loop starts no handler once this was called
        try:
            with self._batch_lock:  # waits for a claim or a release under way
                self._give_back_claim()  # a claim that raised: what it may have leased
                rest, self._unstarted = self._unstarted, []
                self._release(rest)  # before the successes: one of their rows may be locked
            self.settler.flush()  # waits for a flush under way in the monitor thread
        finally:
            self._given_back.set()

    def _release(self, tasks) -> None:
        """Give back the batch's tasks not started (stopping), in one statement."""
        for t in tasks:
            self.monitor.drop(t)
        if not tasks:
            return
        held, lost = [t for t in tasks if not t.lost], [t for t in tasks if t.lost]
        if held:
            self._release_held(held)
        for t in lost:  # lease lost while it waited: released or its attempt given back
            self._settle(t, None, 0.0, started=False)  # alone, so no later lease gets a second attempt back

    def _release_held(self, held) -> None:
        """The tasks still held go first, in one transaction per claim: a lost task's row may be
        locked by the worker that took it over, and must not hold back the release of the others.
        One taken over before the monitor noticed (not released) gives its attempt back after."""
        try:
            n = self.queue.release_many(held)
        except TaskError as exc:
            log.warning("release of %d tasks failed (their leases will expire): %s", len(held), exc)
            self._unreleased = True  # the ledger keeps them for whoever follows
            return
        for t in held:
            if t.done:
                log.info("released task=%s type=%s (stopping)", t.key, t.type)
        if n < len(held):
            log.info("%d of the %d tasks to release were taken over or finished meanwhile", len(held) - n, len(held))
        for t in [t for t in held if not t.done]:  # taken over before the monitor noticed: its attempt goes back
            t.lost = True
            self._settle(t, None, 0.0, started=False)

    def process(self, task) -> None:
        if task.lost or policy.cancels_unrun(task.cancel_requested, task.owned):  # learned while it waited
            self.monitor.drop(task)
            return self._settle(task, None, 0.0, started=False)
        if policy.too_late_to_start(task.started_at, task.start_by, self.queue.now()):
            return self._give_back_late(task)
        log.debug("acquired task=%s type=%s attempt=%d", task.key, task.type, task.attempts)
        with tracing.attempt_span(task) as span:
            started = time.monotonic()
            self.ledger.running(task)  # should the process die now, this task alone is charged
            error = run_handler(self.target, task, self.monitor)  # KeyboardInterrupt included: the task's error
            self.ledger.running(None)
            elapsed = time.monotonic() - started
            avg = self._avg_task_time
            self._avg_task_time = elapsed if avg is None else 0.8 * avg + 0.2 * elapsed
            self._settle(task, error, elapsed)
            tracing.ended(span, task, error)

    def _give_back_late(self, task) -> None:
        """A rate-limited task not started by the time its start was counted at: starting it now
        could put more starts in a window than the limit; it is given back unrun (due now, its
        attempt given back), its counted start deleted with it (it never started)."""
        self.monitor.drop(task)
        try:
            task.give_back_unstarted()
        except TaskError as exc:
            log.warning("could not give back task=%s (its lease will expire): %s", task.key, exc)
            return
        log.warning("gave back task=%s type=%s: not started by its rate limit's start time", task.key, task.type)

    def _settle(self, task, error, elapsed, started: bool = True) -> None:
        try:
            if getattr(task, "lost", False) and not started:
                task.lost_before_start()  # the monitor logged the lease lost; it never ran here
            elif getattr(task, "lost", False):
                log.warning(
                    "task=%s type=%s finished its run after losing the lease; result dropped", task.key, task.type
                )
            elif task.done:
                log.info("%s task=%s type=%s (%.3fs)", _verb(task), task.key, task.type, elapsed)
            elif task.deferred is not None and error is None:
                self.monitor.hold(task)  # its handler's own finish, written with the next batch
                self.settler.add(task, elapsed)
            elif policy.ends_cancelled(task.cancel_requested):
                task.finish(outcome="cancelled")
                log.info("cancelled task=%s type=%s", task.key, task.type)
            elif error is not None:
                _log_error(task, error, task.retry_or_fail(error))
            else:
                self.monitor.hold(task)  # heartbeated until its finish is written
                self.settler.add(task, elapsed)  # finished with the next claim, or by the monitor
        except (PreemptedError, AlreadyFinishedError) as exc:
            log.warning("could not settle task=%s: %s", task.key, exc)
        except TaskError as exc:
            log.error("could not settle task=%s (lease will expire and it will run again): %s", task.key, exc)
        except Exception:  # noqa: BLE001 - nothing a handler left behind may end the processor
            log.exception("could not settle task=%s (lease will expire and it will run again)", task.key)


def _log_error(task, error: BaseException, what: str) -> None:
    """A handler's error, once per attempt, with its traceback (capped as stored): WARNING when
    the task will run again, ERROR when it failed for good."""
    level, verb = (logging.ERROR, "failed") if what == "failure" else (logging.WARNING, "retry")
    text = traceback_text(error) or _error_text(error)
    log.log(level, "%s task=%s type=%s attempt=%d: %s", verb, task.key, task.type, task.attempts, text)


def stop_at_once(processors: list[Processor], code: int) -> None:
    """An immediate stop of a worker process: each processor writes its waiting successes and
    releases the tasks it has not started (:meth:`Processor.give_back_now`), then the process
    ends with ``code``, its running handlers abandoned (their leases expire; they run again)."""
    givers = [threading.Thread(target=_give_back, args=(p,), name="pq-give-back", daemon=True) for p in processors]
    for g in givers:  # side by side: one processor stuck on a locked row holds back no other
        g.start()
    end = time.monotonic() + GIVE_BACK_TIME  # a claim or write stuck on the database does not hold the stop
    for g in givers:
        g.join(max(0.0, end - time.monotonic()))
    exit_now(code, f"worker pid={os.getpid()}: immediate stop: exiting (running tasks' leases will expire)")


def _give_back(proc: Processor) -> None:
    try:
        proc.give_back_now()
    except Exception as exc:  # noqa: BLE001 - best effort: the stop must happen regardless
        log.warning("could not give back unstarted tasks at an immediate stop: %s", exc)


def give_back_orphans(queue, ledger: LeaseLedger | NoLedger) -> None:
    """Give back what the dead process whose ledger this is held (:mod:`queue_core.worker.lease_ledger`):
    each lease but the one whose handler was running goes back uncharged, due now
    (:func:`policy.crash_end`); that one is left to expire, a crash charged. Best effort: a lease
    not given back expires, charged too."""
    held, claim = ledger.read(), ledger.unrecorded_claim()
    if not held and claim is None:
        return
    back = [(i, token) for i, token, running in held if not policy.spends_attempt(policy.crash_end(running))]
    charged = [i for i, _, running in held if policy.spends_attempt(policy.crash_end(running))]
    try:
        n = queue.release_leases(back, claims=[claim] if claim is not None else [])
    except DatabaseError as exc:
        log.warning("could not give back the tasks a dead processor held (their leases expire): %s", exc)
        return
    finally:
        ledger.clear()
    ids = ", ".join(map(str, charged))
    blamed = f"charged a crash (a handler was running): task {ids}" if charged else "none charged (no handler ran)"
    unrecorded = " and a claim it had not recorded" if claim is not None else ""
    log.info("a processor died holding %d task(s)%s: %d given back uncharged; %s", len(held), unrecorded, n, blamed)


def prefetch(target: Any, queue, tasks: list) -> None:
    """Let a handler class read what a whole batch needs at once (``target.prefetch(queue,
    tasks)``, e.g. the inputs of workflow steps); a failure only means each reads its own."""
    fn = getattr(target, "prefetch", None)
    if fn is None or not callable(fn):
        return
    try:
        fn(queue, tasks)
    except Exception:  # noqa: BLE001 - an optimisation: handlers read what is missing themselves
        log.exception("prefetch of %d tasks failed (each will read its own)", len(tasks))


def _verb(task) -> str:
    if task.status == "finished":
        return {"success": "finished", "failure": "failed", "cancelled": "cancelled"}.get(task.outcome, "finished")
    return "settled by its handler"  # a retry, a release, or a workflow step's own end
