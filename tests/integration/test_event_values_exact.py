"""The event rows a change writes hold exactly the task's values on SQLite, MariaDB and PostgreSQL.

On MySQL/MariaDB the events of a change are read already written as SQL (each string a hex
literal, each number as the server prints it: ``store/mysql.py``) and inserted as known rows;
elsewhere by INSERT ... SELECT. Hostile strings (quotes, backslashes, ``%`` that a driver reads as
a parameter, NUL-free control characters, emoji, 4-byte UTF-8, a long error cut at DETAIL_LENGTH)
and doubles computed in the database (the wait and the run of an attempt: times with
sub-microsecond digits) must come back the same, byte for byte and bit for bit.
"""

from __future__ import annotations

import sqlalchemy as sa

from queue_core.store.events import DETAIL_LENGTH

T0 = 1_700_000_000.123456789

HOSTILE = [
    "plain",
    "it's a 'quote'",
    'dq "x"',
    "back\\slash\\",
    "100% %s %(x)s %%",
    "X'41' 0x41",
    "tab\tnew\nline\r",
    "\U0001f600 emoji ü é 漢字",
    "',NULL,0),(1,'x",
    "NULL",
]


def event_rows(q) -> list[dict]:
    e = q.store.events_t
    return q.db.run(lambda c: [dict(r._mapping) for r in c.execute(sa.select(e).order_by(e.c.id))])


def test_finished_and_retried_events_hold_the_tasks_strings_and_times_exactly(queue):
    for i, s in enumerate(HOSTILE):
        queue.submit(f"{s}#{i}", f"type {s}", now=T0 + i * 0.1234567)
    held = queue.poll_multi(len(HOSTILE), now=T0 + 7.7654321)
    errors = {}
    for i, task in enumerate(held):
        if i % 2:
            errors[task.key] = f"Err{HOSTILE[i]}: " + HOSTILE[i] * 200  # longer than DETAIL_LENGTH
            task.retry(30, now=T0 + 9.000001 + i, error=errors[task.key])
        else:
            task.finish(now=T0 + 9.000001 + i)
    rows = {r["key"]: r for r in event_rows(queue)}
    assert len(rows) == len(HOSTILE)
    for i, s in enumerate(HOSTILE):
        key = f"{s}#{i}"
        task = queue.store.task_get(key)
        ev = rows[key]
        assert (ev["type"], ev["queue"], ev["owner"]) == (f"type {s}", "default", queue.owner)
        assert ev["kind"] == ("retried" if i % 2 else "finished")
        assert ev["at"] == T0 + 9.000001 + i
        assert ev["ran"] == ev["at"] - (T0 + 7.7654321)  # the database's subtraction, bit for bit
        assert ev["waited"] == (T0 + 7.7654321) - (T0 + i * 0.1234567)
        if i % 2:
            assert ev["detail"] == errors[key][:DETAIL_LENGTH]
            assert ev["due_at"] == task["timeout"]
        else:
            assert ev["detail"] is None and ev["outcome"] == "success"
