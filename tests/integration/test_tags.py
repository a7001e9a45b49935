"""Tags and tracking on SQLite, MariaDB and PostgreSQL: submitted with the task,
changed later, found through an index, deleted with the task, never carried over to a new task
that takes a purged task's key; hostile tags refused with a typed error, nothing half-written.

Interleavings covered: a submission whose key is taken (its tags are not added to the other
task), a commit whose acknowledgement is lost (the retry finds the task and its tags once), a
key re-used after retention (the new task has only its own tags), a change past the limit
(nothing changed), a table of the previous schema (refused until init upgrades it)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from conftest import downgrade
from plans import analyze, mysql_rows_read, postgres_rows_read, sent_selects, sqlite_indexes
from test_submit_faults import _commit_ack_lost_on_the_transaction

import queue_core
from queue_core.errors import IdempotentAlreadyExistsError, NotFoundError, SchemaError, ValidationError

T0 = 1_700_000_000.0


def tag_rows(q) -> list[tuple[str, int]]:
    tg = q.store.tags_t
    return q.db.run(lambda c: [tuple(r) for r in c.execute(sa.select(tg.c.tag, tg.c.task_id).order_by(tg.c.tag))])


def keys(tasks) -> list[str]:
    return [m.key for m in tasks]


def test_submitted_tags_are_listed_by_tag_in_submission_order(queue):
    queue.submit("a", "t", tags=["invoice", "customer:acme"], now=T0)
    queue.submit_many(
        [
            {"key": "b", "type": "t", "tags": ["customer:acme"]},
            {"key": "c", "type": "t"},
            {"key": "d", "type": "t", "tags": ("customer:zeta", "invoice")},
        ],
        now=T0,
    )
    assert queue["a"].metadata().tags == ("customer:acme", "invoice")
    assert queue["c"].metadata().tags == ()
    assert keys(queue.list(tag="customer:acme")) == ["a", "b"]
    assert keys(queue.list(tag="invoice")) == ["a", "d"]
    assert keys(queue.list(tag="invoice", status="waiting", type="t", limit=1)) == ["a"]
    assert list(queue.list(tag="nobody")) == []
    assert [m.tags for m in queue.list(queue="default")] == [
        ("customer:acme", "invoice"),
        ("customer:acme",),
        (),
        ("customer:zeta", "invoice"),
    ]


def test_a_taken_key_gets_none_of_the_second_submissions_tags(queue):
    queue.submit("k", "t", tags=["first"], now=T0)
    with pytest.raises(IdempotentAlreadyExistsError):
        queue.submit("k", "t", tags=["second"], now=T0)  # same instant, same type: still not ours
    assert queue.submit_many([{"key": "k", "type": "t", "tags": ["third"]}], now=T0 + 1) == 0
    assert queue["k"].metadata().tags == ("first",)
    assert [tag for tag, _ in tag_rows(queue)] == ["first"]


def test_tags_change_later_in_any_state_and_past_the_limit_nothing_changes(queue):
    queue.submit("k", "t", tags=["a"], now=T0)
    assert queue["k"].tag("c", "b", "a") == ["a", "b", "c"]
    assert queue["k"].untag("a", "nope") == ["b", "c"]
    queue.poll(now=T0).finish(now=T0)
    assert queue["k"].tag("done") == ["b", "c", "done"]  # finished: still taggable
    with pytest.raises(ValidationError, match="at most 32"):
        queue["k"].tag(*[f"x{i}" for i in range(30)])
    assert queue["k"].metadata().tags == ("b", "c", "done")
    with pytest.raises(NotFoundError):
        queue["missing"].tag("a")
    with pytest.raises(NotFoundError):
        queue["missing"].untag("a")


def test_a_purged_task_takes_its_tags_along_and_a_new_task_of_its_key_has_only_its_own(queue):
    queue.submit("k", "t", tags=["old", "shared"], now=T0)
    queue.submit("other", "t", tags=["shared"], now=T0)
    queue.poll_multi(2, now=T0)[0].finish(now=T0)
    later = T0 + queue.config["retention_time"] + 10
    queue.submit("k", "t", tags=["new"], now=later)  # the finished row's retention ended: purged, re-made
    assert queue["k"].metadata(now=later).tags == ("new",)
    assert keys(queue.list(tag="old", now=later)) == []
    assert keys(queue.list(tag="shared", now=later)) == ["other"]
    queue["other"].cancel_request(now=later)
    assert queue.cleanup(now=later + queue.config["retention_time"] + 10) == 1
    assert [tag for tag, _ in tag_rows(queue)] == ["new"]


def test_a_lost_acknowledgement_of_a_tagged_submit_stores_it_and_its_tags_once(queue):
    with _commit_ack_lost_on_the_transaction(queue) as state:
        queue.submit("k", "t", {"v": 1}, tags=["a", "b"], now=T0)
    assert state["fired"] == 1
    assert queue["k"].metadata().tags == ("a", "b")
    assert len(tag_rows(queue)) == 2


def test_list_by_tag_pages_through_more_than_a_page(queue):
    queue.submit_many(
        [{"key": f"k{i:05d}", "type": "t", "tags": ["bulk"] if i % 2 else ["odd"]} for i in range(2600)], now=T0
    )
    got = keys(queue.list(tag="bulk"))
    assert got == [f"k{i:05d}" for i in range(1, 2600, 2)]
    assert keys(queue.list(tag="bulk", limit=1001))[-1] == "k02001"


def test_tracking(queue):
    queue.submit_many([{"key": f"k{i}", "type": "t"} for i in range(5)], now=T0)
    queue["k3"].track()
    queue["k1"].track()
    queue["k1"].track()  # again: no change, no error
    assert keys(queue.list(tracked=True)) == ["k1", "k3"]
    assert queue["k1"].metadata().tracked and not queue["k0"].metadata().tracked
    queue["k1"].untrack()
    queue["k0"].untrack()  # not tracked: no change
    assert keys(queue.list(tracked=True)) == ["k3"]
    with pytest.raises(NotFoundError):
        queue["missing"].track()


@pytest.mark.parametrize(
    "tags, message",
    [
        ("customer:acme", "must be a list of tags"),
        (b"raw", "must be a list of tags"),
        ([""], "non-empty"),
        ([" padded"], "without spaces at either end"),
        (["x" * 101], "limit is 100"),
        (["x" * 10_000_000], "limit is 100"),
        (["tab\there"], "control characters"),
        (["nul\x00"], "control characters"),
        (["\ud800lone"], "lone surrogate"),
        ([7], "must be a string"),
        ([f"t{i}" for i in range(33)], "at most 32"),
    ],
)
def test_hostile_tags_are_refused_and_nothing_is_written(queue, tags, message):
    with pytest.raises(ValidationError, match=message):
        queue.submit("k", "t", tags=tags, now=T0)
    with pytest.raises(ValidationError, match=message):
        queue.submit_many([{"key": "ok", "type": "t"}, {"key": "k", "type": "t", "tags": tags}], now=T0)
    assert list(queue.list()) == [] and tag_rows(queue) == []
    if not isinstance(tags, (str, bytes)):
        queue.submit("there", "t", now=T0)
        with pytest.raises(ValidationError, match=message):
            queue["there"].tag(*tags)
        if message != "at most 32":  # one bad tag: refused as a filter too
            with pytest.raises(ValidationError, match=message):
                list(queue.list(tag=tags[0]))
        assert tag_rows(queue) == []


def test_tags_are_exact_strings_stored_verbatim(queue):
    odd = ["x'); DROP TABLE pq_tasks; --", "客户:ακμε", "A", "a", "a b", "<b>html</b>", "%_\\"]
    queue.submit("k", "t", tags=odd, now=T0)
    assert set(queue["k"].metadata().tags) == set(odd)
    for tag in odd:
        assert keys(queue.list(tag=tag)) == ["k"], tag
    assert (
        keys(queue.list(tag="%")) == [] and keys(queue.list(tag="a  b")) == [] and keys(queue.list(tag="\u00e1")) == []
    )


def test_list_by_tag_or_tracked_reads_through_their_indexes(queue, backend):
    """6000 untagged, untracked rows and 10 tagged and tracked ones: listing by tag reads the
    tag's key range and those rows only; listing tracked ones, the tracked index (analyzed)."""
    queue.submit_many(
        [{"key": f"o{i}", "type": "t", "tags": ["other"] if i % 3 == 0 else []} for i in range(6000)], now=T0
    )
    queue.submit_many([{"key": f"m{i}", "type": "t", "tags": ["mine"]} for i in range(10)], now=T0)
    for i in range(10):
        queue[f"m{i}"].track()
    analyze(queue)
    for run in (lambda: list(queue.list(tag="mine")), lambda: list(queue.list(tracked=True))):
        sent = sent_selects(queue, run)
        assert sent
        with queue.db.engine.connect() as conn:
            for statement, parameters in sent:
                if backend == "sqlite":
                    used = sqlite_indexes(conn, statement, parameters)
                    ours = {f"sqlite_autoindex_{queue.table}_tags_1", f"ix_{queue.table}_tracked", "PRIMARY"}
                    assert used and used <= ours, (used, statement)
                else:
                    measure = mysql_rows_read if backend == "mysql" else postgres_rows_read
                    assert measure(conn, statement, parameters) <= 200, statement


def test_a_table_of_the_previous_schema_is_refused_until_init_upgrades_it(queue, db_url, table_name):
    queue.submit("old", "t", now=T0)
    downgrade(queue.store, (), 3)
    with queue_core.open(db_url, table_name) as older, pytest.raises(SchemaError, match="run 'init'"):
        older.poll(now=T0)
    queue.init()
    assert queue["old"].metadata().tags == () and not queue["old"].metadata().tracked
    queue["old"].tag("later")
    queue["old"].track()
    assert keys(queue.list(tag="later")) == keys(queue.list(tracked=True)) == ["old"]
