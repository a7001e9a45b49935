"""A handler raising an error whose text holds a NUL, with max_attempts=2, on real workers: it runs
twice (one retry) and ends failed with its error. On PostgreSQL the retry's write is refused (text
fields cannot contain NUL), the settle fails, the lease expires and the handler runs again, each
run charged as a crash, the error lost ("lease expired")."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from procs import finish, start_worker, wait_for  # noqa: E402

HANDLERS = str(Path(__file__).with_name("nul_error_handlers.py"))


def test_a_handler_error_with_a_nul_retries_then_fails_with_its_error(wq, tmp_path):
    log = tmp_path / "runs.log"
    wq.submit("n", "nul_error", {"log": str(log)}, max_attempts=2)
    proc = start_worker(wq.config["url"], wq.table, target="nul_error", _file=HANDLERS, alive_time=2.0, processors=1)
    try:
        wait_for(lambda: wq["n"].metadata().status == "finished", timeout=60, what="the task's end")
    finally:
        proc.send_signal(signal.SIGTERM)
        code, out = finish(proc, timeout=60)
    m = wq["n"].metadata()
    assert (m.outcome, m.error and m.error.startswith("ValueError: unexpected byte")) == ("failure", True), (
        m.error,
        out[-2500:],
    )
    assert len(log.read_text().splitlines()) == 2
