"""Tags under races and lost acknowledgements, on SQLite, MariaDB and PostgreSQL: tags go
with their task when a tag change races the purge of that task, a submit that purges its key or
a run's keep; concurrent tag changes never exceed the limit; a retried commit whose
acknowledgement was lost neither duplicates nor loses tags."""

from __future__ import annotations

import threading

import sqlalchemy as sa
from lock_waits import race_a_paused_transaction
from test_submit_faults import _commit_ack_lost_on_the_transaction

from queue_core.errors import NotFoundError, ValidationError

# Tags go with their task also when ``tag()`` races the purge of the same task
# ; concurrent tag() never exceeds 32 tags.


T0 = 1_700_000_000.0


def orphan_tag_rows(q) -> list[tuple[str, int]]:
    """Tag rows whose task row is gone."""
    t, tg = q.store.t, q.store.tags_t
    stmt = sa.select(tg.c.tag, tg.c.task_id).where(~sa.exists().where(t.c.id == tg.c.task_id))
    return q.db.run(lambda c: [tuple(r) for r in c.execute(stmt)])


def _pause_purger_after_forget_tags(q, monkeypatch):
    """The thread named 'purger' stops right after its transaction deleted the tag rows of the
    task rows it is about to delete (before its DELETE of the task rows), until ``go`` is set."""
    forgot, go = threading.Event(), threading.Event()
    original = q.store.tags.forget_tags

    def forget_tags(conn, ids):
        original(conn, ids)
        if threading.current_thread().name == "purger" and not forgot.is_set():
            forgot.set()
            go.wait(10)

    monkeypatch.setattr(q.store.tags, "forget_tags", forget_tags)
    return forgot, go


def _race_tag_against(q, purge) -> tuple[list, list]:
    forgot, go = q._purger_pause
    out: list = []
    errors: list = []

    def purger():
        try:
            purge()
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    def tagger():
        try:
            out.append(q["k"].tag("late"))
        except NotFoundError as exc:
            out.append(exc)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    # the tagger commits while the purger is paused, or waits on its locks (SQLite: its write
    # lock; its tag() then finds no task)
    race_a_paused_transaction(
        threading.Thread(target=purger, name="purger"), forgot, go, threading.Thread(target=tagger, name="tagger")
    )
    return out, errors


def test_tag_racing_cleanup_leaves_no_tag_row_of_a_deleted_task(queue, monkeypatch):
    """Interleaving: finished task k (tag 'old') past retention; cleanup's
    transaction deletes k's tag rows, then (before its DELETE of k's row) an operator's tag(k,
    'late') runs in another transaction and commits; cleanup then deletes k's row. Afterwards no
    tag row may name a task row that no longer exists (else it is a tag of a deleted task)."""
    queue.submit("k", "t", tags=["old"], now=T0)
    queue.poll(now=T0).finish(now=T0)
    later = T0 + queue.config["retention_time"] + 10
    queue._purger_pause = _pause_purger_after_forget_tags(queue, monkeypatch)
    out, errors = _race_tag_against(queue, lambda: queue.cleanup(now=later))
    assert errors == []
    assert orphan_tag_rows(queue) == [], out


def test_tag_racing_a_submit_that_purges_the_key_leaves_no_tag_of_the_old_task(queue, monkeypatch):
    """Interleaving: finished task k (tag 'old') past retention; a submit of k
    (tag 'new') purges the old row in its transaction: deletes its tag rows, then (before its
    DELETE of the old row) tag(k, 'late') commits on the old row; the submit deletes the old row
    and inserts the new one. No tag row may be left naming the deleted old row."""
    queue.submit("k", "t", tags=["old"], now=T0)
    queue.poll(now=T0).finish(now=T0)
    later = T0 + queue.config["retention_time"] + 10
    queue._purger_pause = _pause_purger_after_forget_tags(queue, monkeypatch)
    out, errors = _race_tag_against(queue, lambda: queue.submit("k", "t", tags=["new"], now=later))
    assert errors == []
    assert orphan_tag_rows(queue) == [], out
    assert queue["k"].metadata(now=later).tags in (("new",), ("late", "new"))


def test_concurrent_tag_calls_never_exceed_32_tags_nor_raise_driver_errors(queue):
    """4 threads each add 12 distinct tags to one task with 0 tags (one Queue, its
    pool): at most two can succeed; the others get ValidationError; never more than 32 tags,
    never another error. 5 rounds."""
    for r in range(5):
        key = f"k{r}"
        queue.submit(key, "t", now=T0)
        barrier = threading.Barrier(4)
        errors: list = []
        refused: list = []

        def go(i, key=key, barrier=barrier, errors=errors, refused=refused):
            barrier.wait()
            try:
                tags = queue[key].tag(*[f"t{i}-{j}" for j in range(12)])
                assert len(tags) <= 32
            except ValidationError:
                refused.append(i)
            except Exception as exc:  # noqa: BLE001
                errors.append(exc)

        threads = [threading.Thread(target=go, args=(i,)) for i in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert errors == []
        assert len(queue[key].metadata().tags) == 24 and len(refused) == 2


def test_cleanup_racing_keep_group_never_strips_the_tags_of_a_row_it_does_not_delete(queue, monkeypatch):
    """Tags go with their task, and only with its delete. Interleaving: step row s
    of run group g (tag 'keep') finished, its run ended (keep_group: purge at T0+5), past that;
    cleanup's transaction reads s's id and deletes s's tag rows; before its DELETE of s, the run
    runs again: keep_group(g) (purge never) commits; cleanup's DELETE re-checks the purge
    condition and keeps s. Then s must still have its tag (or, if cleanup won outright, be gone
    with it)."""
    queue.transaction(
        lambda tx: tx.submit_rows([{"key": "s", "type": "t", "group": "g", "tags": ["keep"], "workflow": '{"w": 1}'}]),
        now=T0,
    )
    queue.poll(now=T0).finish(now=T0)
    queue.transaction(lambda tx: tx.store.run_group_keep(tx.conn, ["g"], T0 + 5), now=T0)  # the run ended
    later = T0 + 10
    forgot, go = _pause_purger_after_forget_tags(queue, monkeypatch)
    errors: list = []

    def purger():
        try:
            queue.cleanup(now=later)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    def keeper():
        try:
            queue.transaction(lambda tx: tx.store.run_group_keep(tx.conn, ["g"]), now=later)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    race_a_paused_transaction(
        threading.Thread(target=purger, name="purger"), forgot, go, threading.Thread(target=keeper, name="keeper")
    )
    assert errors == []
    row = queue.store.task_get("s")
    if row is not None:
        assert queue["s"].metadata(now=later).tags == ("keep",)
        assert [m.key for m in queue.list(tag="keep", now=later)] == ["s"]


# A commit whose acknowledgement is lost: the retry neither duplicates nor loses tags
# (submit_many, tag past a near-full task, a key re-used after retention).


def tag_rows(q):
    tg = q.store.tags_t
    return q.db.run(lambda c: sorted(tuple(r) for r in c.execute(sa.select(tg.c.tag, tg.c.task_id))))


def test_lost_ack_of_a_tagged_submit_many_stores_each_tag_once(queue):
    """submit_many of 3 tagged tasks commits, its ack is lost, the retry runs."""
    with _commit_ack_lost_on_the_transaction(queue) as state:
        queue.submit_many([{"key": f"k{i}", "type": "t", "tags": [f"a{i}", "b"]} for i in range(3)], now=T0)
    assert state["fired"] == 1
    assert [queue[f"k{i}"].metadata().tags for i in range(3)] == [(f"a{i}", "b") for i in range(3)]
    assert len(tag_rows(queue)) == 6


def test_lost_ack_of_tag_at_the_limit_is_not_refused_on_retry(queue):
    """A task with 30 tags; tag('x', 'y') commits (32), its ack is lost; the
    retry finds 32 (its own two) and returns them, no ValidationError, no change."""
    tags = [f"t{i:02d}" for i in range(30)]
    queue.submit("k", "t", tags=tags, now=T0)
    with _commit_ack_lost_on_the_transaction(queue) as state:
        got = queue["k"].tag("x", "y")
    assert state["fired"] == 1
    assert got == sorted([*tags, "x", "y"])
    assert len(tag_rows(queue)) == 32


def test_lost_ack_of_a_tagged_submit_re_using_an_expired_key(queue):
    """k (tag 'old') finished past retention; submit of k with tag 'new'
    purges and re-inserts in one transaction, its ack is lost; the retry finds its own task:
    tags ('new',) once, no 'old'."""
    queue.submit("k", "t", tags=["old"], now=T0)
    queue.poll(now=T0).finish(now=T0)
    later = T0 + queue.config["retention_time"] + 10
    with _commit_ack_lost_on_the_transaction(queue) as state:
        queue.submit("k", "t", {"v": 2}, tags=["new"], now=later)
    assert state["fired"] == 1
    assert queue["k"].metadata(now=later).tags == ("new",)
    assert [t for t, _ in tag_rows(queue)] == ["new"]
