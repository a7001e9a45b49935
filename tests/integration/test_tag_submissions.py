"""A submission whose key is taken must add none of its tags to the task holding the key
(guarantee 1), and a task must be written with its own tags (atomicity)."""

from __future__ import annotations

import threading

import sqlalchemy as sa

import queue_core
from queue_core.errors import IdempotentAlreadyExistsError

T0 = 1_700_000_000.0


def tag_rows(q) -> list[tuple[str, int]]:
    tg = q.store.tags_t
    return q.db.run(lambda c: [tuple(r) for r in c.execute(sa.select(tg.c.tag, tg.c.task_id).order_by(tg.c.tag))])


def test_submit_many_with_a_taken_key_and_a_new_key_adds_no_tags_to_the_taken_task(queue):
    """Guarantee 1. Interleaving: task k submitted (tags ['first']) at T0; later a submit_many at
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
    """Guarantees 1 and 2 (atomic: a task with its own tags). One submit_many holding key k twice:
    the first entry is inserted, the second is skipped (its key is taken, by the first). The
    task must carry the first entry's tags, and none of the skipped second entry's."""
    n = queue.submit_many(
        [{"key": "k", "type": "t", "tags": ["mine"]}, {"key": "k", "type": "t", "tags": ["skipped"]}], now=T0
    )
    assert n == 1
    assert queue["k"].metadata().tags == ("mine",)


def test_submit_many_with_one_key_twice_of_other_types_keeps_the_first_entrys_tags(queue):
    """Guarantee 2 (atomic): the same batch with key k twice, first of type 'a' (tags ['mine']),
    then of type 'b' (skipped). The inserted task (type 'a') must have its tags, not none."""
    n = queue.submit_many(
        [{"key": "k", "type": "a", "tags": ["mine"]}, {"key": "k", "type": "b", "tags": ["other"]}], now=T0
    )
    assert n == 1
    m = queue["k"].metadata()
    assert m.type == "a"
    assert m.tags == ("mine",)


def test_concurrent_submit_many_of_a_taken_key_at_the_same_instant_adds_none_of_its_tags(db_url, table_name, backend):
    """Guarantee 1/7, concurrent: process-like queue A submits k (tags ['a']) at T0; queue B (its
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
