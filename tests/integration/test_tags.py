"""Tags and tracking on SQLite, MariaDB and PostgreSQL: submitted with the task,
changed later, found through an index, combined with the other filters of a list and paged in id
order, deleted with the task, never carried over to a new task that takes a purged task's key;
tracking kept for the task's life; hostile tags refused with a typed error, nothing half-written;
a submission whose key is taken adds none of its tags to the task holding the key."""

from __future__ import annotations

import threading
import unicodedata

import pytest
import sqlalchemy as sa
from conftest import downgrade
from plans import analyze, mysql_rows_read, postgres_rows_read, sent_statements, sqlite_indexes
from test_submit_faults import _commit_ack_lost_on_the_transaction

import queue_core
from queue_core.errors import CorruptRowError, IdempotentAlreadyExistsError, NotFoundError, SchemaError, ValidationError

# Tags and tracking on SQLite, MariaDB and PostgreSQL: submitted with the task, changed later, found
# through an index, deleted with the task, never carried over to a new task that takes a purged
# task's key; hostile tags refused with a typed error, nothing half-written.

# Interleavings covered: a submission whose key is taken (its tags are not added to the other task),
# a commit whose acknowledgement is lost (the retry finds the task and its tags once), a key re-used
# after retention (the new task has only its own tags), a change past the limit (nothing changed), a
# table of the previous schema (refused until init upgrades it).


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
        sent = sent_statements(queue, run)
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


# Tracking survives the task's life, a hand-edited tracked value is a CorruptRowError,
# tags are exact and limited, list(tag=...) combines with the other filters and pages
# correctly.


def test_tracking_survives_claim_retry_release_finish_and_all_states(queue):
    """Track a waiting task; claim, retry, claim, release, claim, finish; it stays
    tracked throughout; untrack of a finished task works; track is idempotent."""
    queue.submit("k", "t", now=T0)
    queue.submit("other", "t", now=T0 + 1000)
    queue["k"].track()
    task = queue.poll(now=T0, types=["t"])
    assert task.key == "k"
    assert keys(queue.list(tracked=True, status="running", now=T0)) == ["k"]
    task.retry(retry_wait=0, now=T0)
    assert queue["k"].metadata(now=T0).tracked
    task = queue.poll(now=T0 + 1)
    task.release(now=T0 + 1)
    assert queue["k"].metadata(now=T0 + 1).tracked
    queue.poll(now=T0 + 2).finish(now=T0 + 2)
    assert queue["k"].metadata(now=T0 + 2).tracked
    assert keys(queue.list(tracked=True, now=T0 + 2)) == ["k"]
    queue["k"].track()
    queue["k"].untrack()
    queue["k"].untrack()
    assert keys(queue.list(tracked=True, now=T0 + 2)) == []


@pytest.mark.parametrize("value", [2, -1])
def test_a_hand_edited_tracked_value_is_a_corrupt_row(queue, value):
    """Tracked set to a value pq never writes (by hand): metadata and list report
    CorruptRowError (not a crash, not a silent True); track() repairs it."""
    queue.submit("k", "t", now=T0)
    t = queue.store.t
    queue.db.run(lambda c: c.execute(sa.update(t).where(t.c.key == "k").values(tracked=value)))
    with pytest.raises(CorruptRowError):
        queue["k"].metadata()
    with pytest.raises(CorruptRowError):
        list(queue.list())
    queue["k"].track()
    assert queue["k"].metadata().tracked


def test_tags_of_100_four_byte_characters_and_unicode_forms_are_exact(queue):
    """A 100-character tag of 4-byte characters is stored and found (MariaDB:
    VARBINARY must hold 400 bytes); composed and decomposed 'é' are two tags; 'ß' vs 'ss',
    'ǅ' vs 'Ǆ', fullwidth 'Ａ' vs 'A' are distinct."""
    big = "\U0001f600" * 100
    e1, e2 = "caf\u00e9", unicodedata.normalize("NFD", "caf\u00e9")
    tags = [big, e1, e2, "stra\u00dfe", "strasse", "\u01c5", "\u01c4", "\uff21", "A"]
    queue.submit("k", "t", tags=tags, now=T0)
    queue.submit("j", "t", tags=[e2, "strasse", "\u01c4", "A"], now=T0)
    assert set(queue["k"].metadata().tags) == set(tags)
    assert keys(queue.list(tag=big)) == ["k"]
    assert keys(queue.list(tag=e1)) == ["k"]
    assert keys(queue.list(tag="stra\u00dfe")) == ["k"]
    assert keys(queue.list(tag="\u01c5")) == ["k"]
    assert keys(queue.list(tag="\uff21")) == ["k"]
    assert queue["j"].untag(e1, "stra\u00dfe", "\u01c5", "\uff21") == sorted([e2, "strasse", "\u01c4", "A"])
    assert queue["k"].untag(e2) == sorted(set(tags) - {e2})


@pytest.mark.parametrize("bad", ["a\u00a0", "\u2003a", "x\u0085", "\x9f", "a\x7f", "\ud83d", "a\udcff"])
def test_tags_with_unicode_spaces_controls_or_surrogates_are_refused_everywhere(queue, bad):
    """trailing/leading Unicode spaces, C1 controls, lone surrogates: ValidationError
    from submit, tag, untag and list; nothing written."""
    queue.submit("k", "t", now=T0)
    with pytest.raises(ValidationError):
        queue.submit("x", "t", tags=["ok", bad], now=T0)
    with pytest.raises(ValidationError):
        queue["k"].tag("ok", bad)
    with pytest.raises(ValidationError):
        queue["k"].untag(bad)
    with pytest.raises(ValidationError):
        list(queue.list(tag=bad))
    assert keys(queue.list()) == ["k"] and queue["k"].metadata().tags == ()


def test_a_task_at_32_tags_keeps_them_when_one_more_is_refused_and_retagging_is_fine(queue):
    """At 32 tags, re-adding present ones is fine (still 32), one new tag is refused
    and nothing changes, untag one then tag one works."""
    tags = [f"t{i:02d}" for i in range(32)]
    queue.submit("k", "t", tags=tags, now=T0)
    assert queue["k"].tag(*tags[:5]) == tags
    with pytest.raises(ValidationError):
        queue["k"].tag("t00", "new")
    assert list(queue["k"].metadata().tags) == tags
    assert len(queue["k"].untag("t00")) == 31
    assert len(queue["k"].tag("new")) == 32


def test_list_by_tag_combines_with_filters_and_pages_past_1000_in_id_order(queue):
    """2500 tagged tasks over 2 types / 2 users / 2 queues, some finished, some
    tracked; list(tag=...) with each filter (and limit 1500) equals the filtered plain list,
    each task once, in id order."""
    items = []
    for i in range(2500):
        items.append(
            {
                "key": f"k{i:05d}",
                "type": f"ty{i % 2}",
                "user": f"u{i % 3}",
                "queue": "default" if i % 5 else "q2",
                "tags": ["x"] if i % 4 else ["x", "y"],
            }
        )
    items.append({"key": "untagged", "type": "ty0"})
    queue.submit_many(items, now=T0)
    for task in queue.poll_multi(300, now=T0, queues="default,q2"):
        task.finish(now=T0)
    for i in range(0, 2500, 7):
        queue[f"k{i:05d}"].track()
    for filters in (
        {},
        {"type": "ty1"},
        {"user": "u2"},
        {"queue": "q2"},
        {"status": "finished"},
        {"status": "waiting", "type": "ty0"},
        {"tracked": True},
        {"limit": 1500},
        {"status": "waiting", "limit": 1001},
    ):
        expected = [
            k for k in keys(queue.list(now=T0, **{k: v for k, v in filters.items() if k != "limit"})) if k != "untagged"
        ][: filters.get("limit")]
        got = keys(queue.list(tag="x", now=T0, **filters))
        assert got == expected, filters
        assert len(set(got)) == len(got)


def test_tag_and_track_of_an_unknown_key_raise_not_found(queue):
    """Unknown keys for tag/untag/track/untrack, also with no tags to add."""
    for call in (
        lambda: queue["nope"].tag("a"),
        lambda: queue["nope"].untag("a"),
        lambda: queue["nope"].track(),
        lambda: queue["nope"].untrack(),
        lambda: queue["nope"].tag(),
    ):
        with pytest.raises(NotFoundError):
            call()


# A submission whose key is taken must add none of its tags to the task holding the key, and a task
# must be written with its own tags (atomicity).


def test_submit_many_with_a_taken_key_and_a_new_key_adds_no_tags_to_the_taken_task(queue):
    """Interleaving: task k submitted (tags ['first']) at T0; later a submit_many at
    the same instant T0 (an explicit ``now``, or the same clock reading) of [k (taken) with tag
    'intruder', n (new)]. k is skipped (1 new task), so none of its tags may be added to k."""
    queue.submit("k", "t", tags=["first"], now=T0)
    n = queue.submit_many(
        [{"key": "k", "type": "t", "tags": ["intruder"]}, {"key": "n", "type": "t", "tags": ["fresh"]}], now=T0
    )
    assert n == 1
    assert queue["n"].metadata().tags == ("fresh",)
    assert queue["k"].metadata().tags == ("first",)
    assert [m.key for m in queue.list(tag="intruder")] == []


def test_submit_many_with_one_key_twice_gets_the_tags_of_the_entry_that_was_inserted(queue):
    """One submit_many holding key k twice:
    the first entry is inserted, the second is skipped (its key is taken, by the first). The
    task must carry the first entry's tags, and none of the skipped second entry's."""
    n = queue.submit_many(
        [{"key": "k", "type": "t", "tags": ["mine"]}, {"key": "k", "type": "t", "tags": ["skipped"]}], now=T0
    )
    assert n == 1
    assert queue["k"].metadata().tags == ("mine",)


def test_submit_many_with_one_key_twice_of_other_types_keeps_the_first_entrys_tags(queue):
    """The same batch with key k twice, first of type 'a' (tags ['mine']),
    then of type 'b' (skipped). The inserted task (type 'a') must have its tags, not none."""
    n = queue.submit_many(
        [{"key": "k", "type": "a", "tags": ["mine"]}, {"key": "k", "type": "b", "tags": ["other"]}], now=T0
    )
    assert n == 1
    m = queue["k"].metadata()
    assert m.type == "a"
    assert m.tags == ("mine",)


def test_concurrent_submit_many_of_a_taken_key_at_the_same_instant_adds_none_of_its_tags(db_url, table_name, backend):
    """Concurrent: process-like queue A submits k (tags ['a']) at T0; queue B (its
    own connection pool) at the same instant submits [k with ['b'], its own new key]. Whatever
    order they commit in, k ends with exactly one submission's tags."""
    qa = queue_core.open(db_url, table_name)
    qa.init()
    qb = queue_core.open(db_url, table_name)
    try:
        errors: list = []
        for i in range(20):  # 20 rounds, a fresh key each: either commit order
            barrier = threading.Barrier(2)

            def a(i=i, barrier=barrier):
                barrier.wait()
                try:
                    qa.submit(f"k{i}", "t", tags=["a"], now=T0)
                except IdempotentAlreadyExistsError:
                    pass
                except Exception as exc:  # noqa: BLE001
                    errors.append(exc)

            def b(i=i, barrier=barrier):
                barrier.wait()
                try:
                    qb.submit_many(
                        [{"key": f"k{i}", "type": "t", "tags": ["b"]}, {"key": f"own{i}", "type": "t"}], now=T0
                    )
                except Exception as exc:  # noqa: BLE001
                    errors.append(exc)

            threads = [threading.Thread(target=a), threading.Thread(target=b)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
        assert errors == []
        got = {i: qa[f"k{i}"].metadata().tags for i in range(20)}
        assert all(tags in (("a",), ("b",)) for tags in got.values()), got
    finally:
        qa.close()
        qb.close()
        if backend != "sqlite":
            from conftest import drop_tables

            drop_tables(db_url, table_name)
