"""What the conformance tests share: rows made through the Store protocol itself."""

from __future__ import annotations

from queue_core.store.protocol import NewTask

T0 = 1_700_000_000.0


def new(key: str, type: str = "t", **values) -> NewTask:
    """A task due at T0 unless told otherwise (the API gives ``run_at``; a bare NewTask would be due
    since 1970, which the statistics would count as decades of waiting)."""
    return NewTask(key=key, type=type, data=values.pop("data", "{}"), run_at=values.pop("run_at", T0), **values)


def submitted(store, *keys: str, now: float = T0, **values) -> None:
    assert store.task_submit([new(k, **values) for k in keys], now) == len(keys)


def claimed(store, n: int = 1, now: float = T0 + 1, owner: str = "host:1", **options) -> list[dict]:
    rows = store.task_claim(n, 30.0, now, owner, **options)
    assert len(rows) == n, rows
    return rows


def in_tx(owner, fn):
    """``fn(conn)`` in one write transaction of the database of ``owner`` (a queue or a scheduler)."""
    return owner.db.run(fn, what="conformance")


def column(store, key: str, name: str):
    row = store.task_get(key)
    return None if row is None else row[name]
