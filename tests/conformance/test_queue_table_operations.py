"""The Store protocol's operations on what a queue table keeps beside its tasks (its tables, named
queues, workers, events, streams, statistics, failures, wake-ups), on SQLite, MariaDB and
PostgreSQL alike."""

from __future__ import annotations

import threading

import pytest
from store_support import T0, claimed, in_tx, submitted

from queue_core.store.protocol import WorkerIdentity


def test_the_tables_of_an_initialised_store_are_current_and_writable(queue):
    s = queue.store
    version = s.tables_version()
    assert isinstance(version, int) and version > 0
    assert in_tx(queue, lambda c: s.tables_exist(c)) is True
    assert in_tx(queue, lambda c: s.tables_missing_indexes(c)) == set()
    s.tables_require_current()
    s.tables_check_writable()
    submitted(s, "kept")
    s.tables_init()  # idempotent: the rows stay
    assert s.task_get("kept") is not None and s.tables_version() == version


def test_named_queues_are_paused_limited_and_listed_with_their_settings(queue):
    s = queue.store
    submitted(s, "a", queue="billing")
    assert (s.queue_known("billing"), s.queue_known("nowhere")) == (True, False)
    paused = s.queue_set_paused("billing", True, T0)
    assert (paused.name, paused.paused) == ("billing", True)
    assert s.task_claim(1, 30.0, T0 + 1, "host:1", queues=["billing"]) == []
    limited = s.queue_set_limits("billing", T0, concurrency=2, rate_limit=10, rate_window=60.0, rate_key=None)
    assert (limited.paused, limited.concurrency, limited.rate_limit, limited.rate_window) == (True, 2, 10, 60.0)
    assert s.queue_settings_all()["billing"] == limited
    s.queue_set_paused("billing", False, T0 + 2)
    assert [r["key"] for r in s.task_claim(1, 30.0, T0 + 3, "host:1", queues=["billing"])] == ["a"]


def test_workers_register_renew_and_are_swept_once_silent(queue):
    s = queue.store
    w = WorkerIdentity("h:1", "h", 1, '["default"]', None, "1.0")
    s.worker_register(w, T0)
    s.worker_renew(w, T0, T0 + 5)
    (row,) = s.worker_rows(T0 - 10, T0 + 6)
    assert (row["owner"], row["started_at"], row["last_seen"], row["held"]) == ("h:1", T0, T0 + 5, 0)
    assert s.worker_sweep(T0 + 1) == 0  # seen since
    assert s.worker_sweep(T0 + 6) == 1
    assert s.worker_rows(T0 - 10, T0 + 6) == []
    s.worker_renew(w, T0, T0 + 7)  # swept while cut off: written again
    assert [r["owner"] for r in s.worker_rows(T0, T0 + 8)] == ["h:1"]
    s.worker_remove("h:1")
    assert s.worker_rows(T0, T0 + 8) == []


def test_events_are_recorded_read_newest_first_and_streamed_in_id_order(queue):
    s = queue.store
    start = s.stream_end("events")
    submitted(s, "a", "b")
    a, b = claimed(s, 2)
    s.task_retry(a["id"], a["lease_token"], T0 + 50, T0 + 2, error="boom")
    s.task_finish(b["id"], b["lease_token"], "success", None, T0 + 100, T0 + 3)
    newest = s.event_newest(2)
    assert [e["kind"] for e in newest] == ["finished", "retried"]
    rows = s.stream_rows("events", start, [], 100)
    assert [(r["key"], r["kind"]) for r in rows][-2:] == [("a", "retried"), ("b", "finished")]
    assert [r["id"] for r in rows] == sorted(r["id"] for r in rows)
    assert s.stream_end("events") == rows[-1]["id"]
    assert s.stream_start("events", T0 + 3) == rows[-2]["id"]  # before the first row at or after T0 + 3
    copy = {**rows[-1]}
    copy.pop("id")
    in_tx(queue, lambda c: s.event_record(c, [{**copy, "kind": "moved", "at": T0 + 4}]))
    assert [e["kind"] for e in s.event_newest(1)] == ["moved"]


def test_statistics_roll_up_the_events_into_buckets_that_are_read_and_pruned(queue):
    s = queue.store
    submitted(s, "a", "b")
    a, b = claimed(s, 2)
    s.task_finish(a["id"], a["lease_token"], "success", None, T0 + 100, T0 + 3)
    s.task_finish(b["id"], b["lease_token"], "failure", "boom", T0 + 100, T0 + 4)
    assert s.stats_roll_up(T0 + 10, 5.0) > 0
    assert s.stats_roll_up(T0 + 11, 5.0) == 0  # nothing new to count
    ((_key, total),) = [(k, t) for k, t in s.stats_totals() if k[2:] == ("default", "t")]
    assert (total.started, total.succeeded, total.failed) == (2, 1, 1)
    minute = s.stats_rows(60, T0 - 60, T0 + 60)
    assert sum(t.succeeded for _k, t in minute) == 1 and all(k[0] == 60 for k, _t in minute)
    assert s.stats_prune([(60, T0 + 3600)]) >= 1
    assert s.stats_rows(60, T0 - 60, T0 + 60) == []


def test_failed_tasks_are_grouped_paged_sampled_and_requeued(queue):
    s = queue.store
    submitted(s, "a", "b", "ok")
    a, b, ok = claimed(s, 3)
    s.task_finish(a["id"], a["lease_token"], "failure", "disk full", T0 + 100, T0 + 2, traceback="Traceback: a")
    s.task_finish(b["id"], b["lease_token"], "failure", "disk full", T0 + 100, T0 + 3)
    s.task_finish(ok["id"], ok["lease_token"], "success", None, T0 + 100, T0 + 3)
    (head,) = s.failure_heads()
    assert (head["queue"], head["type"], head["count"]) == ("default", "t", 2)
    assert (head["first_seen"], head["last_seen"]) == (T0 + 2, T0 + 3)
    page = s.failure_page()
    assert [(r["key"], r["error"]) for r in page] == [("a", "disk full"), ("b", "disk full")]
    assert s.failure_samples([a["id"]])[a["id"]]["key"] == "a"
    tracebacks = in_tx(queue, lambda c: s.event_last_tracebacks(c, [a["id"], b["id"]]))
    assert list(tracebacks) == [a["id"]] and tracebacks[a["id"]]["traceback"] == "Traceback: a"
    assert s.failure_requeue([a["id"], ok["id"]], T0 + 5) == [a["id"]]
    assert (s.task_get("a")["state"], [r["key"] for r in s.failure_page()]) == (0, ["b"])


def test_a_listener_is_woken_by_a_submit(queue):
    """By notification where the database has them (PostgreSQL), else by its probe of the highest id."""
    s = queue.store
    woken, stop = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def listen():
        try:
            s.wakeup_listen(woken.set, stop, timeout=0.1, probe_interval=0.05)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    listener = threading.Thread(target=listen)
    listener.start()
    try:
        for i in range(100):  # until it hears one (a submit before it listens is not heard)
            submitted(s, f"k{i}")
            if woken.wait(0.1):
                break
    finally:
        stop.set()
        listener.join(10)
    assert woken.is_set() and errors == [] and not listener.is_alive()


def test_a_listener_without_notifications_or_probe_is_refused(queue):
    s = queue.store
    s.channel = None  # as a queue configured with notify = false
    with pytest.raises(ValueError, match="no wake-up probe"):
        s.wakeup_listen(lambda: None, threading.Event(), probe_interval=0.0)
