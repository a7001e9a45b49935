"""Counters and failure counts follow finished tasks at once, on SQLite, MariaDB and PostgreSQL:
the Prometheus counters exist at 0 for a queue and type before its first task ends, count an end
as soon as it commits (no roll-up needed), never go back over a purge or a roll-up; the
dashboard's "Failed (1h)" counts a failure that no roll-up has counted yet."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from test_metrics import L, scrape

sys.path.insert(0, str(Path(__file__).parents[1] / "web"))
from web_support import client  # noqa: E402

DEFAULT = L(queue="default", type="invoice")


def finished(got: dict, outcome: str) -> float | None:
    return got.get(("pq_tasks_finished_total", L(queue="default", type="invoice", outcome=outcome)))


def test_counters_exist_at_zero_before_the_first_end(queue, clock):
    queue.submit("a", "invoice")
    got = scrape(queue)
    assert finished(got, "success") == 0 and finished(got, "failure") == 0 and finished(got, "cancelled") == 0
    assert got[("pq_tasks_started_total", DEFAULT)] == 0
    assert got[("pq_tasks_retried_total", DEFAULT)] == 0
    assert got[("pq_task_run_seconds_count", DEFAULT)] == 0


def test_counters_count_an_end_at_once_and_never_go_back_over_a_purge(queue, clock):
    queue.config["retention_time"] = 60
    queue.config["failure_retention"] = 60
    for key in ("ok", "bad"):
        queue.submit(key, "invoice")
    clock.advance(1)
    queue.poll().finish()
    queue.poll().fail(ValueError("declined"))
    seen = [scrape(queue)]  # no roll-up has run
    assert (finished(seen[0], "success"), finished(seen[0], "failure")) == (1, 1)
    assert seen[0][("pq_tasks_started_total", DEFAULT)] == 2
    clock.advance(3600)
    assert queue.cleanup() >= 2  # the rows and their events are purged
    seen.append(scrape(queue))
    queue.roll_up_stats()
    queue.prune_stats(now=clock.now() + 10 * 86400)
    seen.append(scrape(queue))
    for got in seen[1:]:
        assert (finished(got, "success"), finished(got, "failure")) == (1, 1)
        assert got[("pq_tasks_started_total", DEFAULT)] == 2


def test_failed_in_the_last_hour_counts_a_failure_no_roll_up_has_counted(queue, clock):
    queue.submit("bad", "invoice", queue="billing")
    queue.poll(queues="billing").fail(ValueError("declined"))
    page = client(queue, actions=False).get("/live/overview")
    assert page.status_code == 200
    row = re.search(r'<tr data-queue="billing">.*?</tr>', page.text, re.S)
    assert row is not None, page.text
    failed = re.search(r'class="num failed"><a [^>]*>(\d+)</a>', row.group(0))
    assert failed is not None and failed.group(1) == "1", row.group(0)
