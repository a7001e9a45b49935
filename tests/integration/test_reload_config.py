"""A reloaded configuration that cannot be opened (a URL whose driver does not exist) is kept out:
the service keeps its old one, as ``service.reload_settings`` decides for the worker (threads and
processes) and ``perfectsched run`` alike, on the three databases (the thread worker must not end
on USR1)."""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa

from queue_core import config


def test_thread_worker_keeps_its_config_when_the_reloaded_one_cannot_be_opened(queue):
    """Thread mode (``ThreadWorker._restarted``) opened the new config unguarded, so a config file
    edited to a URL whose driver does not exist ended the worker on USR1, where ``perfectsched
    run`` kept running on its old config."""
    from queue_core.worker.thread_worker import ThreadWorker

    old = config.build({"url": queue.config["url"], "table": queue.table, "processors": 1})
    broken = {**old, "url": "postgresql+nosuchdriver://u@127.0.0.1/db"}
    tw = ThreadWorker(lambda task: None, dict(old), burst=True, config_loader=lambda: dict(broken))
    tw.restart_pending = True  # what USR1 sets (ThreadWorker._restart), the old processors done
    try:
        assert tw._restarted() is True  # raises ConfigError today: the worker process ends
        assert tw.settings["url"] == old["url"]
    finally:
        tw._stop()
        for t in tw.threads:
            t.join(10)
        tw.close()


# the processor thread's ConfigError
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_reloaded_mysql_url_whose_option_the_driver_refuses_is_kept_out(backend, queue):
    """MariaDB/MySQL: PyMySQL refuses ``?sslmode=`` only when it connects. The reload opened the
    new config without connecting (``opens=open_queue``), took it, and each new processor
    thread's first poll raised ConfigError: the threads ended and the worker returned as if
    done. The reload connects and checks (``open_checked``).

    Interleaving: thread worker running on a good URL; the config file is edited to add
    ``?sslmode=require`` (a PostgreSQL habit); USR1."""
    if backend != "mysql":
        pytest.skip("PyMySQL refuses unknown URL options at connect time")
    from queue_core.worker.thread_worker import ThreadWorker

    old = config.build({"url": queue.config["url"], "table": queue.table, "processors": 1})
    url = old["url"] + ("&" if "?" in old["url"] else "?") + "sslmode=require"
    broken = {**old, "url": url}
    tw = ThreadWorker(lambda task: None, dict(old), burst=False, config_loader=lambda: dict(broken))
    tw.restart_pending = True
    polled: set[str] = set()  # the threads that ran a statement: their first poll went through

    def ran(*_args) -> None:
        polled.add(threading.current_thread().name)

    sa.event.listen(sa.engine.Engine, "after_cursor_execute", ran)
    try:
        assert tw._restarted() is True
        deadline = time.monotonic() + 3
        for t in tw.threads:  # a processor on the refused URL ends at its first poll
            while t.is_alive() and t.name not in polled and time.monotonic() < deadline:
                t.join(0.02)
        alive = tw._running()
        assert tw.settings["url"] == old["url"] and alive, (
            f"reload accepted {tw.settings['url']!r}; processor threads alive: {alive}"
        )
    finally:
        tw._stop()
        for t in tw.threads:
            t.join(10)
        tw.close()
        sa.event.remove(sa.engine.Engine, "after_cursor_execute", ran)
