"""The dashboard's task page shows the traceback each failed attempt kept, with its attempt and
worker, escaped (it is user text). On SQLite, MariaDB and PostgreSQL."""

from __future__ import annotations

import markupsafe
from web_support import HOSTILE, client


def _fail_with(task, text: str) -> None:
    try:
        raise RuntimeError(text)
    except RuntimeError as exc:
        task.retry_or_fail(exc)


def test_the_task_page_shows_each_attempts_traceback_escaped(queue):
    queue.submit("k", "t", {}, max_attempts=2)
    for attempt, text in enumerate(HOSTILE[:2], start=1):
        task = queue.poll(now=queue.now() + 3600 * attempt)
        _fail_with(task, text)
    page = client(queue, actions=False).get("/task?key=k").text
    ends = [e for e in queue["k"].history() if e.traceback is not None]
    assert [e.attempt for e in ends] == [1, 2]
    for e, text in zip(ends, HOSTILE, strict=False):
        assert f"traceback of attempt {e.attempt} on worker {markupsafe.escape(e.owner)}" in page
        assert "in _fail_with" in page and str(markupsafe.escape(f"RuntimeError: {text}")) in page
        assert text not in page  # never as markup
