"""A reloaded configuration that cannot be opened (a URL whose driver does not exist) is kept out:
the service keeps its old one, as ``service.reload_settings`` decides for the worker (threads and
processes) and ``perfectsched run`` alike. Found by the issue-18 review (failed before its fix on
the three databases: the thread worker ended on USR1)."""

from __future__ import annotations

from queue_core import config


def test_thread_worker_keeps_its_config_when_the_reloaded_one_cannot_be_opened(queue):
    """Thread mode (``ThreadWorker._restarted``) opened the new config unguarded, so a config file
    edited to a URL whose driver does not exist ended the worker on USR1, where ``perfectsched
    run`` kept running on its old config."""
    from queue_core.thread_worker import ThreadWorker

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
