"""Named queues on the three databases: a task belongs to one queue, a claim reads the queues it
serves in order (strict or weighted), a paused queue hands out nothing, a queue's concurrency limit
is never exceeded; the fair share and the other claim rules hold inside and across queues."""

from __future__ import annotations

import random

import pytest
import sqlalchemy as sa

import queue_core
from queue_core.errors import ConfigError, ValidationError
from queue_core.rules import policy

T0 = 1_700_000_000.0


def keys(tasks) -> list[str]:
    return [t.key for t in tasks]


def limit(queue, name, concurrency):
    queue.store.queue_set_limits(name, T0, concurrency=concurrency, rate_limit=None, rate_window=None, rate_key=None)


def submit(queue, key, queue_name="default", **opts):
    queue.submit(key, "t", {}, queue=queue_name, now=opts.pop("now", T0 - 10), **opts)


def test_a_task_is_leased_only_by_a_claim_serving_its_queue(queue):
    submit(queue, "b1", "billing")
    submit(queue, "d1")
    assert keys(queue.poll_multi(10, now=T0)) == ["d1"]  # the default: the queue "default" only
    assert queue.poll_multi(10, now=T0, queues="reports") == []
    got = queue.poll_multi(10, now=T0, queues=["billing"])
    assert keys(got) == ["b1"] and got[0].queue_name == "billing"
    assert queue["b1"].metadata(now=T0).queue_name == "billing"


def test_strict_order_takes_a_queue_before_the_next_whatever_their_priorities(queue):
    submit(queue, "low-urgent", "low", priority=100, now=T0 - 1000)
    submit(queue, "crit-1", "critical", now=T0 - 1)
    submit(queue, "crit-2", "critical", now=T0 - 2)
    submit(queue, "def-1", now=T0 - 50)
    order = "critical,default,low"
    assert keys(queue.poll_multi(2, now=T0, queues=order)) == ["crit-2", "crit-1"]
    # a batch larger than the first queue fills from the next ones, in order
    assert keys(queue.poll_multi(5, now=T0, queues=order)) == ["def-1", "low-urgent"]


def test_an_empty_or_future_queue_never_blocks_the_next(queue):
    submit(queue, "later", "critical", run_at=T0 + 3600)
    submit(queue, "now", "default")
    assert keys(queue.poll_multi(1, now=T0, queues="critical,default")) == ["now"]


def test_priorities_and_due_times_order_tasks_inside_a_queue(queue):
    for i, prio in enumerate([0, 5, 0, 5]):
        submit(queue, f"k{i}", "q", priority=prio, now=T0 - 100 + i)
    assert keys(queue.poll_multi(4, now=T0, queues="q")) == ["k1", "k3", "k0", "k2"]


def test_weighted_order_follows_the_weights(queue):
    for i in range(300):
        for q in ("a", "b"):
            submit(queue, f"{q}{i}", q)
    queue.rng = random.Random(7)
    firsts = [queue.poll_multi(1, now=T0, queues="a=3,b=1")[0].queue_name for _ in range(200)]
    share = firsts.count("a") / len(firsts)
    assert 0.65 < share < 0.85, share  # 3:1 -> 0.75


def test_weighted_order_is_a_pure_function_of_the_draws():
    class Draws:
        def __init__(self, *values):
            self.values = list(values)

        def random(self):
            return self.values.pop(0)

    assert policy.queue_order(["a", "b", "c"], None, Draws()) == ["a", "b", "c"]
    # weights 5, 3, 1 (total 9): 0.6 * 9 = 5.4 falls in b's share; then a, c (total 6): 0.9 * 6 = 5.4 in c's
    assert policy.queue_order(["a", "b", "c"], [5, 3, 1], Draws(0.6, 0.9, 0.0)) == ["b", "c", "a"]
    assert policy.queue_order(["a", "b"], [1, 1], Draws(0.0, 0.0)) == ["a", "b"]
    counts = {"a": 0, "b": 0, "c": 0}
    rng = random.Random(1)
    for _ in range(9000):
        counts[policy.queue_order(["a", "b", "c"], [5, 3, 1], rng)[0]] += 1
    assert abs(counts["a"] - 5000) < 300 and abs(counts["b"] - 3000) < 300 and abs(counts["c"] - 1000) < 200


def test_a_paused_queue_hands_out_nothing_and_takes_submits(queue):
    submit(queue, "b1", "billing")
    queue.store.queue_set_paused("billing", True, T0)
    submit(queue, "b2", "billing")  # submits still succeed
    submit(queue, "d1")
    assert keys(queue.poll_multi(10, now=T0, queues="billing,default")) == ["d1"]
    queue.store.queue_set_paused("billing", False, T0)
    assert sorted(keys(queue.poll_multi(10, now=T0, queues="billing"))) == ["b1", "b2"]


def test_a_concurrency_limit_caps_the_leases_of_a_queue_across_claims(queue):
    for i in range(10):
        submit(queue, f"k{i}", "api")
    limit(queue, "api", 3)
    first = queue.poll_multi(2, now=T0, queues="api")
    second = queue.poll_multi(10, now=T0, queues="api")
    assert len(first) == 2 and len(second) == 1
    assert queue.poll_multi(10, now=T0, queues="api") == []
    first[0].finish(now=T0)
    assert len(queue.poll_multi(10, now=T0, queues="api")) == 1
    # an expired lease no longer holds a slot (its holder is taken for dead)
    later = T0 + queue.config["alive_time"] + 1
    assert len(queue.poll_multi(10, now=later, queues="api")) == 3


def test_a_limited_queue_lets_the_batch_fill_from_the_next_queue(queue):
    for i in range(4):
        submit(queue, f"api{i}", "api")
        submit(queue, f"d{i}")
    limit(queue, "api", 1)
    got = queue.poll_multi(3, now=T0, queues="api,default")
    assert [t.queue_name for t in got] == ["api", "default", "default"]


def test_a_users_cap_counts_its_running_tasks_in_every_queue(queue):
    submit(queue, "a1", "a", user="acme", max_running=2)
    submit(queue, "b1", "b", user="acme", max_running=2)
    submit(queue, "b2", "b", user="acme", max_running=2)
    assert keys(queue.poll_multi(5, now=T0, queues="a")) == ["a1"]
    assert len(queue.poll_multi(5, now=T0, queues="b")) == 1  # acme holds 2 now


def test_a_task_with_max_attempts_is_only_first_in_its_batch_across_queues(queue):
    submit(queue, "d1")
    submit(queue, "limited", "second", max_attempts=3)
    got = queue.poll_multi(5, now=T0, queues="default,second")
    assert keys(got) == ["d1"]
    assert keys(queue.poll_multi(5, now=T0, queues="default,second")) == ["limited"]


def test_types_and_queues_together(queue):
    queue.submit("x1", "invoice", {}, queue="billing", now=T0)
    queue.submit("x2", "email", {}, queue="billing", now=T0)
    queue.submit("x3", "invoice", {}, now=T0)
    got = queue.poll_multi(5, now=T0, queues="billing", types=["invoice"])
    assert keys(got) == ["x1"]


@pytest.mark.parametrize(
    ("queues", "message"),
    [
        ("", "not a queue name"),
        ("a,,b", "not a queue name"),
        ("a b", "not a queue name"),
        ("a=3,b", "every queue a weight or none"),
        ("a=x", "not a whole number"),
        ("a=0", "at least 1"),
        ("a,a", "names a queue twice"),
        ("-a", "not a queue name"),
        ("x" * 65, "not a queue name"),
        ("<script>", "not a queue name"),
    ],
)
def test_bad_queue_lists_are_refused(queue, queues, message):
    with pytest.raises(ValidationError, match=message):
        queue.poll_multi(1, now=T0, queues=queues)


@pytest.mark.parametrize("name", ["", "a b", "a,b", "a=1", "x" * 65, "\x00", 5, None, "é"])
def test_bad_queue_names_are_refused_at_submit(queue, name):
    with pytest.raises(ValidationError):
        queue.submit("k", "t", {}, queue=name, now=T0)
    assert not queue["k"].exists()


def test_the_config_names_the_queues_a_worker_serves(db_url, table_name, queue):
    submit(queue, "b1", "billing")
    submit(queue, "d1")
    with queue_core.open(db_url, table_name, clock=queue.clock, queues="billing") as q:
        assert keys(q.poll_multi(5, now=T0)) == ["b1"]
    with pytest.raises(ConfigError, match="config queues"):
        queue_core.open(db_url, table_name, queues="a=1,b")


def test_init_upgrades_a_version_2_table_to_named_queues(queue):
    """A table of the release before named queues: init adds the queue column (existing rows in
    the queue "default"), the settings and start tables, and replaces the claim indexes."""
    from conftest import downgrade

    queue.submit("old", "t", {"a": 1}, now=T0)
    store = queue.store
    downgrade(store, ("queue",), 2)
    assert store.tables_version() == 2
    queue.init()
    assert store.tables_version() == 10  # the current version: every upgrade on the way
    with queue.db.engine.connect() as conn:
        names = {ix["name"] for ix in sa.inspect(conn).get_indexes(queue.table)}
        assert sa.inspect(conn).has_table(f"{queue.table}_queues")
    assert {f"ix_{queue.table}_{x}" for x in ("queue", "qtype", "qtype_user", "quser", "running")} <= names
    assert not {f"ix_{queue.table}_{x}" for x in ("claim", "type", "type_user", "user")} & names
    assert queue["old"].metadata(now=T0).queue_name == "default"
    assert keys(queue.poll_multi(5, now=T0)) == ["old"]
    queue.init()  # idempotent


# -- rate limits ----------------------------------------------------------------------------------
def rate(queue, name, spec, key=None):
    queue.limit(name, rate=spec, rate_key=key, now=T0)


def starts_rows(queue):
    st = queue.store.starts_t
    return queue.db.run(lambda c: c.execute(sa.select(st.c.rate_key, st.c.started_at)).all(), write=False)


def take(queue, now, queues="api", n=10) -> list:
    """Everything the claims at ``now`` hand out until one hands out nothing (a rate-limited
    queue gives one task per claim)."""
    got: list = []
    while batch := queue.poll_multi(n, now=now, queues=queues):
        got += batch
    return got


def test_a_rate_limit_holds_over_a_sliding_window(queue):
    for i in range(20):
        submit(queue, f"k{i:02}", "api")
    rate(queue, "api", "3/10s")
    assert len(queue.poll_multi(5, now=T0, queues="api")) == 1  # one task per claim
    assert len(queue.poll_multi(5, now=T0, queues="api")) == 1
    assert len(take(queue, T0 + 6)) == 1  # 3 in (T0-4, T0+6]
    assert take(queue, T0 + 9.9) == []
    assert len(take(queue, T0 + 10)) == 2  # the two of T0 left the window
    assert take(queue, T0 + 15.9) == []  # T0+6 and T0+10 (x2) still in it
    assert len(take(queue, T0 + 16)) == 1


def test_a_task_refused_by_the_rate_waits_without_spending_an_attempt(queue):
    submit(queue, "a", "api", max_attempts=1)
    submit(queue, "b", "api", max_attempts=1)
    rate(queue, "api", "1/60s")
    assert keys(take(queue, T0)) == ["a"]
    for _ in range(3):
        assert queue.poll_multi(5, now=T0 + 1, queues="api") == []
    m = queue["b"].metadata(now=T0 + 1)
    assert (m.status, m.attempts) == ("waiting", 0)
    assert keys(take(queue, T0 + 60)) == ["b"]


def test_every_lease_counts_as_a_start_a_retry_too(queue):
    submit(queue, "a", "api")
    rate(queue, "api", "2/60s")
    queue.poll(now=T0, queues="api").retry(retry_wait=0, now=T0)
    assert keys(take(queue, T0 + 1)) == ["a"]
    submit(queue, "b", "api")
    assert take(queue, T0 + 2) == []


def test_a_rate_limited_queue_gives_one_task_per_claim_and_the_batch_fills_from_the_next(queue):
    for i in range(3):
        submit(queue, f"api{i}", "api")
        submit(queue, f"d{i}")
    rate(queue, "api", "100/s")
    got = queue.poll_multi(4, now=T0, queues="api,default")
    assert [t.queue_name for t in got] == ["api", "default", "default", "default"]


def test_a_rate_per_user_never_lets_one_user_block_the_others(queue):
    for i in range(6):
        submit(queue, f"a{i}", "api", user="acme", now=T0 - 100 + i)  # acme's tasks are due first
        submit(queue, f"b{i}", "api", user="bolt", now=T0 - 50 + i)
        submit(queue, f"n{i}", "api", now=T0 - 10 + i)
    rate(queue, "api", "2/60s", key="user")
    got = take(queue, T0) + take(queue, T0 + 1)
    by_user = {u: sum(1 for t in got if t.user == u) for u in ("acme", "bolt", None)}
    assert by_user == {"acme": 2, "bolt": 2, None: 2}, by_user  # tasks without a user share one rate
    assert take(queue, T0 + 59) == []
    assert len(take(queue, T0 + 60)) == 6


def test_a_rate_per_type(queue):
    for i in range(4):
        queue.submit(f"x{i}", "invoice", {}, queue="api", now=T0 - 10)
        queue.submit(f"y{i}", "email", {}, queue="api", now=T0 - 5)
    rate(queue, "api", "1/60s", key="type")
    got = take(queue, T0) + take(queue, T0 + 1)
    assert sorted(t.type for t in got) == ["email", "invoice"]
    assert {r[0] for r in starts_rows(queue)} == {"email", "invoice"}


def test_rate_and_concurrency_together_and_old_starts_are_forgotten(queue):
    for i in range(10):
        submit(queue, f"k{i}", "api")
    queue.limit("api", concurrency=2, rate="5/10s", now=T0)
    first = take(queue, T0)
    assert len(first) == 2  # the concurrency limit is the tighter one
    queue.finish_many(first, now=T0)
    assert len(take(queue, T0 + 1)) == 2
    assert len(starts_rows(queue)) == 4
    queue.limit("api", rate="5/10s", now=T0)  # concurrency lifted
    assert len(take(queue, T0 + 25)) == 5
    assert len(starts_rows(queue)) == 9  # kept: a claimer whose clock reads behind may still count them
    assert len(take(queue, T0 + 400)) == 5  # a new window (the leases of T0+25 expired too)
    assert [r[1] for r in starts_rows(queue)] == [T0 + 400] * 5  # older than window + margin: forgotten


def test_a_paused_rate_limited_queue_records_no_start(queue):
    submit(queue, "a", "api")
    rate(queue, "api", "5/s")
    queue.pause("api", now=T0)
    assert queue.poll_multi(5, now=T0, queues="api") == [] and starts_rows(queue) == []


def test_a_claim_held_back_by_a_rate_notes_when_its_window_lets_one_start(queue):
    submit(queue, "a", "api")
    submit(queue, "b", "api")
    rate(queue, "api", "1/10s")
    assert len(take(queue, T0)) == 1
    notes: dict = {}
    assert queue.poll_multi(5, now=T0 + 4, queues="default,api", notes=notes) == []
    assert notes == {"rate_wait": 6.0}
    notes = {}
    assert queue.poll_multi(5, now=T0 + 4, queues="default", notes=notes) == [] and notes == {}
    notes = {}
    assert keys(queue.poll_multi(5, now=T0 + 10, queues="api", notes=notes)) == ["b"] and notes == {}


def test_queues_without_finished_counts_read_the_same_live_counts(queue):
    """``queues(finished=False)``, what a dashboard reads every few seconds through the indexes:
    the same waiting (due or later), running, pending counts and oldest wait as ``queues()``,
    the finished count not read (None); a queue with only finished rows is listed when named."""
    submit(queue, "a1", "alpha", now=T0 - 30)
    submit(queue, "a2", "alpha", now=T0 - 20)
    queue.submit("a3", "t", {}, queue="alpha", run_at=T0 + 60, now=T0 - 5)
    submit(queue, "b1", "beta")
    submit(queue, "c1", "gamma")
    running = queue.poll(queues="beta", alive_time=30, now=T0)
    done = queue.poll(queues="gamma", alive_time=30, now=T0)
    done.finish(now=T0)
    full = {i.name: i for i in queue.queues(now=T0)}
    live = {i.name: i for i in queue.queues(now=T0, finished=False)}
    assert set(full) == {"alpha", "beta", "gamma"} and set(live) == {"alpha", "beta"}
    for name in live:
        f, lv = full[name], live[name]
        assert (lv.waiting, lv.running, lv.pending, lv.oldest_waiting_age) == (
            f.waiting,
            f.running,
            f.pending,
            f.oldest_waiting_age,
        ), name
        assert lv.finished is None and f.finished == 0
    assert (live["alpha"].waiting, live["alpha"].oldest_waiting_age) == (3, 30.0)
    assert live["beta"].running == 1 and running is not None
    named = {i.name: i for i in queue.queues(now=T0, finished=False, also=["gamma", "nowhere"])}
    assert (named["gamma"].waiting, named["gamma"].finished) == (0, None) and "nowhere" in named
