"""The supervisor of a worker's child processes (``processor_type = "process"``, the default).

It forks ``processors`` children, each running ``child_main(settings, beat_fd, slot, ledger)`` in
a process group of its own, beating ``beat_fd`` while alive and keeping in ``ledger`` (memory of
the supervisor's, one per slot: :mod:`queue_core.worker.lease_ledger`) the leases it holds, and keeps them:

* a child silent for ``child_heartbeat_limit`` is SIGKILLed with its process group and replaced;
  a child that exits is replaced (in burst mode, not once it exited 0); a slot is forked again
  ``child_fork_frequency_limit`` seconds after its previous fork at the soonest; the child that
  replaces a dead one first gives back what the dead one held without running it, uncharged
  (one that is not replaced has it given back from a process of its own);
* a stop or a graceful restart reaches each child as TERM, resent every ``child_kill_interval``
  until it exits, and escalated to SIGKILL after ``child_graceful_kill_limit`` (if set); an
  immediate stop or restart reaches each child as QUIT (it gives back what it has not started
  and exits), and SIGKILL follows ``IMMEDIATE_GRACE`` seconds later for one still there; a child
  that ended at once has its process group (its handlers' subprocesses) killed after it; USR2 is
  passed on to them.

What each signal does: :data:`queue_core.worker.service.WORKER_SIGNALS` (docs/worker.md, "Signals").
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import signal
import time
from collections.abc import Callable

from .burst import BurstBoard
from .forked_check import CheckApart, fork_holding
from .lease_ledger import LeaseLedger
from .logs import reopen_logs
from .processor import give_back_orphans, open_checked, open_queue
from .service import EXIT_OK, IMMEDIATE_GRACE, WORKER_SIGNALS, Intent, Signals, reload_settings

log = logging.getLogger("queue_core.worker")

#: a child's work: (settings, beat_fd, slot, ledger) -> exit code
ChildMain = Callable[[dict, int, int, LeaseLedger], int]
#: the longest the supervisor waits for the give-back of what a child it does not replace held
GIVE_BACK_LIMIT = 5.0


class Child:
    def __init__(self, slot: int, pid: int, beat_fd: int, now: float):
        self.slot, self.pid, self.beat_fd = slot, pid, beat_fd
        self.last_beat = now
        self.stopping_since: float | None = None  # when it was first asked to stop
        self.last_signal = 0.0  # when it was last sent TERM
        self.quit_since: float | None = None  # when it was told to stop at once (QUIT)


class Supervisor:
    def __init__(
        self,
        child_main: ChildMain,
        settings: dict,
        *,
        burst: bool,
        config_loader: Callable[[], dict] | None,
        clock: Callable[[], float] = time.monotonic,
        board: BurstBoard | None = None,
    ):
        self.child_main, self.settings, self.burst, self.config_loader = child_main, settings, burst, config_loader
        self.clock = clock
        self.board = board  # burst: a slot is busy from its fork until its child claims nothing or exits
        self.children: dict[int, Child] = {}  # pid -> child
        self.slots_done: set[int] = set()
        self.last_fork: dict[int, float] = {}
        self.ledgers: dict[int, LeaseLedger] = {}  # slot -> the leases of its child, shared with it
        self.restart_pending: set[int] = set()
        self.signals: Signals | None = None

    def run(self) -> int:
        self.signals = Signals(
            WORKER_SIGNALS,
            {
                Intent.STOP: self._stop,
                Intent.STOP_NOW: self._kill_all,
                Intent.RESTART: self._restart,
                Intent.RESTART_NOW: self._restart_now,
                Intent.REOPEN_LOGS: self._reopen_logs,
            },
            wake_on=(signal.SIGCHLD,),
        )
        log.info("supervisor started pid=%d processors=%d", os.getpid(), self.settings["processors"])
        try:
            for slot in range(self.settings["processors"]):
                self.spawn(slot)
            while not self._done():
                self.signals.wait(0.2, [c.beat_fd for c in self.children.values()])
                self._read_beats()
                self._reap()
                self.keepalive()
            log.info("supervisor exiting")
            return EXIT_OK
        finally:
            self.signals.close()

    @property
    def stopping(self) -> bool:
        return self.signals is not None and self.signals.stopping

    def _done(self) -> bool:
        return not self.children and (self.stopping or len(self.slots_done) >= self.settings["processors"])

    # what signals do
    def _stop(self) -> None:
        for c in self.children.values():
            self.ask_to_stop(c)

    def _restart(self) -> None:
        self._replace_children(graceful=True)

    def _restart_now(self) -> None:
        self._replace_children(graceful=False)

    def _replace_children(self, *, graceful: bool) -> None:
        """Stop the running children (after their current task, or killed) to fork them again with
        the settings re-read; slots the new settings add start at once, and are not stopped."""
        running = list(self.children.values())
        self._reload()
        self.restart_pending = {c.slot for c in running}
        for c in running:
            if graceful:
                self.ask_to_stop(c)
            else:
                self.stop_at_once(c)

    def _reopen_logs(self) -> None:
        reopen_logs()
        for c in self.children.values():
            _send(c.pid, signal.SIGUSR2)

    def _reload(self) -> None:
        old_n = self.settings["processors"]
        self.settings = reload_settings(self.config_loader, self.settings, opens=open_checked, apart=True)
        for slot in range(old_n, self.settings["processors"]):
            self.spawn(slot)

    def ask_to_stop(self, c: Child) -> None:
        """TERM: stop after the current task (resent every child_kill_interval by keepalive)."""
        _send(c.pid, signal.SIGTERM)
        c.stopping_since = c.stopping_since or self.clock()
        c.last_signal = self.clock()

    def stop_at_once(self, c: Child) -> None:
        """QUIT: give back what it has not started and exit now; SIGKILLed past IMMEDIATE_GRACE."""
        _send(c.pid, signal.SIGQUIT)
        c.quit_since = c.quit_since or self.clock()

    def _kill_all(self) -> None:
        for c in self.children.values():
            self.stop_at_once(c)

    # children
    def spawn(self, slot: int) -> None:
        """Fork the child of ``slot``, ``child_fork_frequency_limit`` s after its previous fork at the soonest."""
        wait = self.settings["child_fork_frequency_limit"] - (self.clock() - self.last_fork.get(slot, -1e9))
        if wait > 0:
            time.sleep(min(wait, 5))
        self.ledgers.setdefault(slot, LeaseLedger())  # before the first fork: shared with every child of the slot
        if self.board is not None:
            self.board.mark(slot, True)
        r, w = os.pipe()
        pid = fork_holding(WORKER_SIGNALS)  # the child's handlers catch what is sent before they are set
        if pid == 0:
            os.close(r)
            self._be_child(slot, w)
        os.close(w)
        os.set_blocking(r, False)
        self.last_fork[slot] = self.clock()
        self.children[pid] = Child(slot, pid, r, self.clock())
        log.info("processor %d started pid=%d", slot, pid)

    def _be_child(self, slot: int, beat_fd: int) -> None:
        """The forked child: run ``child_main`` and exit with its code, never return."""
        code = 1
        try:
            code = self.child_main(self.settings, beat_fd, slot, self.ledgers[slot])
        except BaseException:  # noqa: BLE001
            log.exception("processor crashed")
        finally:
            logging.shutdown()
            os._exit(code)

    def _read_beats(self) -> None:
        for c in self.children.values():
            try:
                while os.read(c.beat_fd, 4096):
                    c.last_beat = self.clock()
            except OSError:  # BlockingIOError included: nothing more to read
                pass

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                pid = 0
            if pid == 0:
                return
            c = self.children.pop(pid, None)
            if c is not None:
                os.close(c.beat_fd)
                if self.board is not None:  # what it ran is written or given up: its siblings may end
                    self.board.mark(c.slot, False)
                if c.quit_since is not None:  # what its handlers started dies with it, as under SIGKILL
                    _kill_group(c.pid)
                self._replace(c, os.waitstatus_to_exitcode(status))

    def _replace(self, c: Child, code: int) -> None:
        log.info("processor %d pid=%d exited with %s", c.slot, c.pid, code)
        if self.stopping:
            return self._give_back(c.slot)
        if c.slot in self.restart_pending:
            self.restart_pending.discard(c.slot)
        elif self.burst and code == EXIT_OK:
            self.slots_done.add(c.slot)
            return self._give_back(c.slot)
        if c.slot < self.settings["processors"]:
            self.spawn(c.slot)  # gives back what its predecessor held, as it starts
        else:
            self._give_back(c.slot)

    def _give_back(self, slot: int) -> None:
        """What the ended child of a slot nobody replaces held without running it, given back
        (:func:`~queue_core.worker.processor.give_back_orphans`) from a process of its own: the
        supervisor never connects (:mod:`queue_core.worker.forked_check`). Nothing to do after a clean end."""
        ledger = self.ledgers.get(slot)
        if ledger is None or (not ledger.read() and ledger.unrecorded_claim() is None):
            return
        work = functools.partial(_give_back_apart, self.settings, ledger)
        try:
            CheckApart(work, WORKER_SIGNALS).result(GIVE_BACK_LIMIT)
        except Exception as exc:  # noqa: BLE001 - best effort: their leases expire otherwise
            log.warning("could not give back what processor %d held (its leases expire): %s", slot, exc)
        ledger.clear()

    def keepalive(self) -> None:
        """Kill the children silent past ``child_heartbeat_limit``; resend TERM to those asked to
        stop every ``child_kill_interval``, and kill them past ``child_graceful_kill_limit``."""
        now = self.clock()
        limit = self.settings["child_heartbeat_limit"]
        kill_limit = self.settings["child_graceful_kill_limit"]
        for c in list(self.children.values()):
            if c.quit_since is not None:
                if now - c.quit_since > IMMEDIATE_GRACE:
                    _kill_tree(c.pid)
            elif now - c.last_beat > limit:
                log.error("processor %d pid=%d silent for %.0fs: killing it", c.slot, c.pid, now - c.last_beat)
                _kill_tree(c.pid)
                c.last_beat = now
            elif c.stopping_since is not None:
                if kill_limit is not None and now - c.stopping_since > kill_limit:
                    _kill_tree(c.pid)
                elif now - c.last_signal > self.settings["child_kill_interval"]:
                    _send(c.pid, signal.SIGTERM)
                    c.last_signal = now


def _give_back_apart(settings: dict, ledger: LeaseLedger) -> None:
    queue = open_queue(settings)
    try:
        give_back_orphans(queue, ledger)
    finally:
        queue.close()


def _send(pid: int, sig) -> None:
    try:
        os.kill(pid, sig)
    except OSError as exc:
        if exc.errno not in (errno.ESRCH, errno.EPERM):
            raise


def _kill_group(pgid: int) -> None:
    """SIGKILL what is left of a reaped child's process group (never a lone pid: it may be reused)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass


def _kill_tree(pid: int) -> None:
    """SIGKILL a child and everything in its process group."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        _send(pid, signal.SIGKILL)
