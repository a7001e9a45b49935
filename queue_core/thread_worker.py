"""Thread mode (``processor_type = "thread"``): the processors are threads of one process.

They share one queue (one connection pool) and one wake-up listener. Signals as in process
mode (docs/worker.md), but a restart is always graceful: a thread cannot be killed, so HUP
waits for the current tasks as USR1 does; an immediate stop ends the process at once.
"""

from __future__ import annotations

import logging
import os
import threading

from .listener import WakeupListener, start_listener
from .logs import reopen_logs
from .processor import Processor, open_queue
from .service import EXIT_OK, WORKER_SIGNALS, Intent, Signals, reload_settings

log = logging.getLogger("queue_core.worker")


class ThreadWorker:
    def __init__(self, target, settings, *, burst, config_loader):
        self.target, self.settings, self.burst, self.config_loader = target, settings, burst, config_loader
        self.processors: list[Processor] = []
        self.threads: list[threading.Thread] = []
        self.listener: WakeupListener | None = None

    def run(self) -> int:
        signals = Signals(WORKER_SIGNALS, {
            Intent.STOP: self._stop, Intent.STOP_NOW: _exit_now, Intent.RESTART: self._restart,
            Intent.RESTART_NOW: self._restart, Intent.REOPEN_LOGS: reopen_logs,
        })
        try:
            self._start()
            while any(t.is_alive() for t in self.threads):
                signals.wait(0.2)
            return EXIT_OK
        finally:
            signals.close()

    def _start(self) -> None:
        q = open_queue(self.settings)
        self.processors = [Processor(self.target, self.settings, burst=self.burst, queue=q, name=f"thread-{i}")
                           for i in range(self.settings["processors"])]
        self.threads = [threading.Thread(target=p.run, kwargs={"listen": False}, name=p.name, daemon=True)
                        for p in self.processors]
        if self.listener is not None:
            self.listener.stop()
        processors = self.processors
        self.listener = None if self.burst else start_listener(q, lambda: [p.wake() for p in processors])
        for t in self.threads:
            t.start()
        log.info("worker started: %d thread processors pid=%d", len(self.threads), os.getpid())

    def _stop(self) -> None:
        for p in self.processors:
            p.stop()

    def _restart(self) -> None:
        """Stop the processors after their current task, then start them with the settings re-read."""
        self._stop()
        for t in self.threads:
            t.join()
        self.settings = reload_settings(self.config_loader, self.settings)
        self._start()


def _exit_now() -> None:
    log.warning("immediate stop: exiting")
    logging.shutdown()
    os._exit(EXIT_OK)
