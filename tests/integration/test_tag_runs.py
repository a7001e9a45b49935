"""A workflow run started again with the same id (RunRows.clear_group)
deletes its old rows' tags in the same transaction (guarantee 2)."""

from __future__ import annotations

import sqlalchemy as sa

T0 = 1_700_000_000.0
RUN = {"workflow": '{"w": 1}'}


def tag_rows(q):
    tg = q.store.tags_t
    return q.db.run(lambda c: sorted(tuple(r) for r in c.execute(sa.select(tg.c.tag, tg.c.task_id))))


def test_clear_group_takes_the_tags_of_the_rows_it_deletes_and_a_restart_has_only_new_tags(queue):
    """Guarantee 2. Run rows s1, s2 of group g tagged 'old' (s1 also tagged later by tag());
    a plain task naming g tagged 'plain'. In one transaction, the run restarts: clear_group(g)
    then submit_rows of s1 (tag 'new'). s1 shows only 'new', no row is listed under 'old', the
    plain task keeps 'plain', and no tag row names a deleted row."""
    queue.transaction(
        lambda tx: tx.submit_rows(
            [{"key": k, "type": "t", "group": "g", "tags": ["old"], **RUN} for k in ("s1", "s2")]
        ),
        now=T0,
    )
    queue["s1"].tag("later")
    queue.submit("plain", "t", group="g", tags=["plain"], now=T0)

    def restart(tx):
        tx.store.run_group_clear(tx.conn, "g")
        return tx.submit_rows([{"key": "s1", "type": "t", "group": "g", "tags": ["new"], **RUN}])

    assert queue.transaction(restart, now=T0) == 1
    assert queue["s1"].metadata().tags == ("new",)
    assert [m.key for m in queue.list(tag="old")] == []
    assert [m.key for m in queue.list(tag="later")] == []
    assert queue["plain"].metadata().tags == ("plain",)
    ids = {queue.store.task_get(k)["id"] for k in ("s1", "plain")}
    assert {task_id for _, task_id in tag_rows(queue)} == ids
