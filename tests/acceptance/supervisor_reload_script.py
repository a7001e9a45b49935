"""Run a real Supervisor (process mode) whose reload reads ``argv[3]``'s URL/table; print READY
(tests/acceptance/test_reload_hangs.py). argv: url table new_url new_table"""

import os
import signal
import sys
import time

from queue_core import config
from queue_core.worker.supervisor import Supervisor


def child_main(settings, beat_fd, slot, ledger):
    signal.signal(signal.SIGTERM, lambda *a: os._exit(0))
    signal.signal(signal.SIGQUIT, lambda *a: os._exit(0))
    signal.pthread_sigmask(
        signal.SIG_UNBLOCK,
        [signal.SIGTERM, signal.SIGQUIT, signal.SIGHUP, signal.SIGUSR1, signal.SIGINT, signal.SIGUSR2],
    )
    while True:
        os.write(beat_fd, b".")
        time.sleep(0.2)


url, table, new_url, new_table = sys.argv[1:5]
old = config.build({"url": url, "table": table, "processors": 1})
new = config.build({"url": new_url, "table": new_table, "processors": 1})
sup = Supervisor(child_main, old, burst=False, config_loader=lambda: dict(new))
print("READY", flush=True)
sys.exit(sup.run())
