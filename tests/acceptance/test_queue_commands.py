"""``perfectqueue queues|pause|resume|limit|move`` and ``--queue`` on submit, list and stats, on
SQLite and one server database (marker ``one_server``): what they print, what they change, their one-line errors."""

from __future__ import annotations

import json

import pytest
from test_perfectqueue_cli import PQ, assert_error, invoke

pytestmark = pytest.mark.one_server

T0 = 1_700_000_000.0


@pytest.fixture
def ready(db_url, table_name, backend):
    pq = PQ(db_url, table_name)
    pq.ok("init")
    yield pq
    if backend != "sqlite":
        from conftest import drop_tables

        drop_tables(db_url, table_name)


def queues(pq) -> dict:
    return {q["name"]: q for q in pq.json("queues")}


def test_submit_list_and_stats_name_the_queue(ready):
    pq = ready
    pq.ok("submit", "b1", "invoice", "--queue", "billing")
    pq.ok("submit", "d1", "email")
    listed = pq.json("list", "--queue", "billing")
    assert [t["key"] for t in listed] == ["b1"] and listed[0]["queue_name"] == "billing"
    table = pq.ok("list")
    assert "billing" in table and "default" in table
    assert pq.json("stats", "--queue", "default")["total"] == 1
    assert pq.json("stats")["total"] == 2


def test_queues_lists_every_queue_with_its_state_and_counts(ready):
    pq = ready
    for i in range(3):
        pq.ok("submit", f"b{i}", "invoice", "-q", "billing", "-t", str(T0))
    pq.ok("submit", "d1", "email")
    pq.ok("limit", "reports", "--concurrency", "2")  # settings, no task yet
    found = queues(pq)
    assert set(found) == {"billing", "default", "reports"}
    assert found["billing"]["waiting"] == 3 and found["billing"]["paused"] is False
    assert found["billing"]["oldest_waiting_age"] > 0  # due since T0
    assert found["reports"]["concurrency"] == 2 and found["reports"]["waiting"] == 0
    out = pq.ok("queues")
    assert out.splitlines()[0].split()[:3] == ["queue", "state", "waiting"]
    assert out.rstrip().endswith("3 queues.")


def test_pause_and_resume_change_what_workers_get(ready):
    pq = ready
    pq.ok("submit", "b1", "invoice", "-q", "billing")
    assert pq.ok("pause", "billing") == "paused billing\n"
    assert queues(pq)["billing"]["paused"] is True
    assert "paused" in pq.ok("queues")
    with pq.queue() as q:
        assert q.poll_multi(5, queues="billing") == []
        assert pq.ok("resume", "billing") == "resumed billing\n"
        assert [t.key for t in q.poll_multi(5, queues="billing")] == ["b1"]


@pytest.mark.parametrize("command", ["pause", "resume"])
def test_pausing_an_unknown_queue_is_not_found(ready, command):
    assert_error(ready(command, "bilin"), 4, "queue 'bilin' not found")


@pytest.mark.parametrize("rate", ["100", "100/", "ten/s", "100/60y", "0/s", "100/0s", "-1/s", "100/999999h", "1e3/s"])
def test_a_bad_rate_is_a_usage_error_with_an_example(ready, rate):
    result = ready("limit", "api", "--rate", rate)
    assert result.exit_code == 2, (result.exit_code, result.stderr)
    assert "100/60s" in result.stderr  # the right form, shown
    assert ready.json("queues") == []  # nothing written


@pytest.mark.parametrize("name", ["a b", "<script>", "x" * 65, "a,b", ""])
def test_a_bad_queue_name_is_a_usage_error(ready, name):
    for args in (("pause", name), ("limit", name, "--concurrency", "2"), ("submit", "k", "t", "-q", name)):
        result = ready(*args)
        assert result.exit_code == 2, (args, result.exit_code, result.stderr)
        assert "queue name" in result.stderr
    assert ready.json("list") == []


def test_limit_sets_keeps_and_lifts_limits(ready):
    pq = ready
    assert pq.ok("limit", "api", "--concurrency", "10") == "api: concurrency 10, rate -\n"
    assert pq.ok("limit", "api", "--rate", "100/60s", "--rate-key", "user") == (
        "api: concurrency 10, rate 100/60s per user\n"
    )
    found = queues(pq)["api"]
    assert (found["concurrency"], found["rate_limit"], found["rate_window"], found["rate_key"]) == (10, 100, 60, "user")
    assert pq.ok("limit", "api", "--rate", "5/s") == "api: concurrency 10, rate 5/1s per user\n"  # key kept
    assert pq.ok("limit", "api", "--rate-key", "type") == "api: concurrency 10, rate 5/1s per type\n"  # rate kept
    assert pq.ok("limit", "api", "--rate-key", "queue") == "api: concurrency 10, rate 5/1s\n"  # whole queue
    assert pq.ok("limit", "api", "--no-concurrency") == "api: concurrency -, rate 5/1s\n"
    assert pq.ok("limit", "api", "--no-rate") == "api: concurrency -, rate -\n"
    result = pq("limit", "api", "--rate-key", "user")
    assert result.exit_code == 2 and "--rate-key needs a rate" in result.stderr


def test_move_moves_a_waiting_task_and_refuses_a_running_one(ready):
    pq = ready
    pq.ok("submit", "k1", "t")
    pq.ok("submit", "k2", "t")
    assert pq.ok("move", "k1", "slow") == "moved k1 to slow\n"
    assert pq.json("show", "k1")["queue_name"] == "slow"
    with pq.queue() as q:
        held = q.poll_multi(5)
        assert [t.key for t in held] == ["k2"]
        assert_error(pq("move", "k2", "slow"), 1, "task 'k2' is running", "only a waiting task")
        held[0].finish()
    assert_error(pq("move", "k2", "slow"), 1, "already finished")
    assert_error(pq("move", "nope", "slow"), 4, "not found")
    assert pq.json("show", "k2")["queue_name"] == "default"


def test_run_takes_its_queues_from_the_option(ready, tmp_path):
    result = invoke("run", "x:y", "-D", ready.url, "--table", ready.table, "--queues", "a=1,b")
    assert_error(result, 6, "every queue a weight or none")
    config = tmp_path / "pq.toml"
    config.write_text(f'[development]\nurl = "{ready.url}"\ntable = "{ready.table}"\nqueues = "a=x"\n')
    assert_error(invoke("run", "x:y", "-c", str(config)), 6, "not a whole number")


def test_queues_json_is_plain_json(ready):
    ready.ok("submit", "k", "t", "-q", "q1")
    parsed = json.loads(ready.ok("queues", "--format", "json"))
    assert parsed[0]["name"] == "q1" and parsed[0]["waiting"] == 1 and parsed[0]["rate"] is None
