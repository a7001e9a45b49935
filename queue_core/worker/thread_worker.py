"""Thread mode (``processor_type = "thread"``): the processors are threads of one process.

They share one queue (one connection pool) and one wake-up listener. Signals as in process
mode (docs/worker.md), but a restart is always graceful: a thread cannot be killed, so HUP
waits for the current tasks as USR1 does; an immediate stop ends the process at once, also
while a restart waits for those tasks.
"""

from __future__ import annotations

import logging
import os
import threading

from .burst import BurstBoard
from .listener import WakeupListener, start_listener
from .logs import reopen_logs
from .processor import Processor, open_checked, open_queue, stop_at_once
from .service import EXIT_OK, EXIT_RECYCLE, WORKER_SIGNALS, Intent, Signals, reload_settings

log = logging.getLogger("queue_core.worker")


class ThreadWorker:
    def __init__(self, target, settings, *, burst, config_loader):
        self.target, self.settings, self.burst, self.config_loader = target, settings, burst, config_loader
        self.processors: list[Processor] = []
        self.threads: list[threading.Thread] = []
        self.listener: WakeupListener | None = None
        self.restart_pending = False  # the processors stop for a restart: start new ones once they did
        self.signals: Signals | None = None
        self.queue = None  # the processors' queue (one pool), closed when they are done
        self.board: BurstBoard | None = None  # burst: which processors are busy

    def close(self) -> None:
        """Close the queue of the processors (they are done): its pooled connections with it."""
        if self.listener is not None:
            self.listener.stop()
            self.listener = None
        if self.queue is not None:
            self.queue.close()
            self.queue = None

    def run(self) -> int:
        """The main thread only waits for signals (acting on them) until the processors are done."""
        self.signals = Signals(
            WORKER_SIGNALS,
            {
                Intent.STOP: self._stop,
                Intent.STOP_NOW: self._stop_now,
                Intent.RESTART: self._restart,
                Intent.RESTART_NOW: self._restart,
                Intent.REOPEN_LOGS: reopen_logs,
            },
        )
        try:
            self._start()
            while self._running() or self._restarted():
                self.signals.wait(0.2)
            return EXIT_OK
        finally:
            self.signals.close()
            self.close()

    def _running(self) -> bool:
        return any(t.is_alive() for t in self.threads)

    def _start(self) -> None:
        self.close()  # the queue of processors that are done (a restart)
        q = self.queue = open_queue(self.settings)
        n = self.settings["processors"]
        self.board = BurstBoard(n) if self.burst else None
        self.processors = [self._processor(i) for i in range(n)]
        self.threads = [
            threading.Thread(target=self._serve, args=(i,), name=p.name, daemon=True)
            for i, p in enumerate(self.processors)
        ]
        processors = self.processors  # its slots are refilled in place when a processor recycles

        def wake_all() -> None:
            for p in processors:
                p.wake()

        self.listener = None if self.burst else start_listener(q, wake_all)
        for t in self.threads:
            t.start()
        log.info("worker started: %d thread processors pid=%d", len(self.threads), os.getpid())

    def _processor(self, i: int) -> Processor:
        return Processor(
            self.target, self.settings, burst=self.burst, queue=self.queue, name=f"thread-{i}", board=self.board, slot=i
        )

    def _serve(self, i: int) -> None:
        """Run processor ``i``; one that recycles (``max_request_per_child`` tasks done) is
        replaced by a new one in the same thread, as a process worker replaces its child, unless
        the worker is stopping or restarting."""
        board = self.board
        try:
            while self.processors[i].run(listen=False) == EXIT_RECYCLE and not self._winding_down():
                p = self.processors[i] = self._processor(i)
                if self._winding_down():  # a stop that began meanwhile may have stopped the old one only
                    p.stop()
        finally:
            if board is not None:  # ended, even by an error: its siblings may end their burst
                board.mark(i, False)

    def _winding_down(self) -> bool:
        stopping = self.signals is not None and self.signals.stopping
        return stopping or self.restart_pending

    def _stop(self) -> None:
        for p in self.processors:
            p.stop()

    def _stop_now(self) -> None:
        """QUIT, or a second stop: what the processors have not started goes back, then the process ends."""
        stop_at_once(self.processors, EXIT_OK)

    def _restart(self) -> None:
        """Stop the processors after their current task; :meth:`_restarted` starts new ones.

        Not waiting for them here keeps the main thread acting on signals meanwhile: a stop
        signal cancels the restart, a second one (or QUIT) stops at once."""
        self.restart_pending = True
        self._stop()

    def _restarted(self) -> bool:
        """Once the old processors are done: start new ones, the settings re-read (True), unless
        a stop began meanwhile (False: the worker is done)."""
        stop_began = self.signals is not None and self.signals.stopping
        if not self.restart_pending or stop_began:
            return False
        self.restart_pending = False
        self.settings = reload_settings(self.config_loader, self.settings, opens=open_checked)
        self._start()
        return True
