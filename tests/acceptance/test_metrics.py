"""Prometheus metrics on SQLite, MariaDB and PostgreSQL: what ``queue_core.ops.metrics``
and ``perfectqueue metrics`` expose (parsed back with prometheus_client's own parser), the
schedule lag and workflow runs that perfectsched and pqflow add, and a real server process that
answers a scrape and stops on SIGTERM."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.engine import make_url
from test_perfectqueue_cli import assert_error, pq, ready  # noqa: F401 - pq, ready: the fixtures

import pqflow
from queue_core.ops import metrics
from queue_core.store.workers import WorkerIdentity

GAP = 60.0


def L(**labels) -> tuple:  # noqa: N802 - the labels of a sample, as scrape() keys them
    return tuple(sorted(labels.items()))


def scrape(queue, **options) -> dict[tuple[str, tuple], float]:
    text = metrics.exposition(queue, options).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_gauges_counters_and_histograms_say_what_the_queue_holds_and_did(queue, clock):
    for i in range(3):
        queue.submit(f"b{i}", "invoice", queue="billing")
    queue.submit("later", "report", run_at=clock.now() + 600)
    clock.advance(5)
    a, b = queue.poll_multi(2, alive_time=60, queues="billing")
    clock.advance(2)
    a.finish()
    b.retry(retry_wait=0, error=ValueError("x"))
    queue.pause("billing")
    queue.store.worker_register(WorkerIdentity("h:1", "h", 1, '["billing"]', None, "t"), clock.now())
    clock.advance(GAP + 1)
    queue.roll_up_stats()
    got = scrape(queue)
    billing = L(queue="billing", type="invoice")
    assert got[("pq_tasks", L(queue="billing", status="waiting", type="invoice"))] == 2
    assert got[("pq_tasks", L(queue="default", status="scheduled", type="report"))] == 1
    assert got[("pq_oldest_waiting_age_seconds", L(queue="billing"))] == pytest.approx(GAP + 1 + 7, abs=0.01)
    assert got[("pq_tasks_started_total", billing)] == 2
    assert got[("pq_tasks_finished_total", L(queue="billing", type="invoice", outcome="success"))] == 1
    assert got[("pq_tasks_finished_total", L(queue="billing", type="invoice", outcome="failure"))] == 0
    assert got[("pq_tasks_retried_total", billing)] == 1
    assert got[("pq_task_wait_seconds_count", billing)] == 2
    assert got[("pq_task_wait_seconds_sum", billing)] == pytest.approx(10.0)
    assert got[("pq_task_wait_seconds_bucket", L(queue="billing", type="invoice", le="+Inf"))] == 2
    assert got[("pq_task_wait_seconds_bucket", L(queue="billing", type="invoice", le="1.0"))] == 0
    assert got[("pq_task_wait_seconds_bucket", L(queue="billing", type="invoice", le="5.0"))] == 2
    assert got[("pq_task_run_seconds_count", billing)] == 2
    assert got[("pq_queue_paused", L(queue="billing"))] == 1
    assert got[("pq_workers", ())] == 0  # its row is older than registry_timeout now


def test_a_hostile_task_type_is_escaped_in_the_exposition(queue, clock):
    nasty = 'a"b\\c</script>'
    queue.submit("k", nasty)
    text = metrics.exposition(queue).decode()
    assert 'type="a\\"b\\\\c</script>"' in text
    got = scrape(queue)
    assert got[("pq_tasks", L(queue="default", status="waiting", type=nasty))] == 1


def test_schedule_lag_and_workflow_runs_come_from_the_packages_above(queue, sched, clock, table_name):
    sched.add("nightly", "report", cron="0 3 * * *")
    flow = pqflow.Workflow(f"metrics_flow_{table_name}")

    @flow.step()
    def only(ctx):
        return 1

    flow.start("run-1", queue=queue)
    due = next(m for m in sched.list() if m.key == "nightly").next_run_time
    clock.set(due + 90)  # 90 s late: no scheduler ran
    got = scrape(queue, schedule_table=sched.table)
    assert got[("pq_schedule_lag_seconds", L(schedule="nightly"))] == pytest.approx(90)
    assert got[("pq_schedule_set_aside", L(schedule="nightly"))] == 0
    assert got[("pq_workflow_runs", L(status="running", workflow=flow.name))] == 1
    assert not any(name == "pq_schedule_lag_seconds" for name, _ in scrape(queue, schedule_table="nope"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_the_metrics_command_serves_a_scrape_and_stops_on_sigterm(wq):
    wq.submit("k", "t")
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "queue_core.cli",
            "metrics",
            "-D",
            wq.config["url"],
            "--table",
            wq.table,
            "--listen",
            f"127.0.0.1:{port}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline, body = time.monotonic() + 30, None
        while body is None and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    body, ctype = r.read().decode(), r.headers["Content-Type"]
            except OSError:
                time.sleep(0.1)
        assert body is not None, proc.stderr.read() if proc.poll() is not None else "no answer"
        assert ctype.startswith("text/plain")
        assert 'pq_tasks{queue="default",status="waiting",type="t"} 1.0' in body
        password = make_url(wq.config["url"]).password
        assert password is None or password not in body
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "serving metrics" in err and "Traceback" not in err


def test_metrics_inputs_are_one_line_errors(ready):  # noqa: F811
    assert_error(ready("metrics", "--listen", "nowhere"), 2, "HOST:PORT")
    assert_error(ready("metrics", "--listen", "127.0.0.1:99999"), 2, "HOST:PORT")
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        assert_error(ready("metrics", "--listen", f"127.0.0.1:{port}"), 1, "cannot listen")
    assert "# TYPE pq_tasks gauge" in ready.ok("metrics", "--once")
