"""The pure core of the event stream (queue_core/api/event_stream.py): where a read leaves a reader, which
ids it waits for, and the exact cursor after each event it delivers."""

from __future__ import annotations

import pytest

from queue_core.api import event_stream as stream
from queue_core.api.event_stream import Cursor, Position, SourceReader
from queue_core.errors import ValidationError


def rows(*ids, at=None):
    return [
        {
            "id": i,
            "created_at": at if at is not None else float(i),
            "at": float(i),
            "key": f"k{i}",
            "queue": "default",
            "type": "t",
            "run_at": 0.0,
            "tracked": 0,
        }
        for i in ids
    ]


def event_rows(*ids):
    return [
        {
            "id": i,
            "task_id": 1,
            "key": f"e{i}",
            "queue": "default",
            "type": "t",
            "kind": "claimed",
            "at": float(i) + 0.5,
            "attempt": 1,
            "owner": None,
            "outcome": None,
            "detail": None,
            "waited": None,
            "ran": None,
            "due_at": None,
            "tracked": 0,
        }
        for i in ids
    ]


def test_a_cursor_reads_back_as_itself():
    c = Cursor(Position(12, (3, 7)), Position(0, ()))
    assert str(c) == "t12-3-7.e0"
    assert Cursor.parse(str(c)) == c
    assert Cursor.parse("t5.e9") == Cursor(Position(5), Position(9))


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "t1",
        "t1.e",
        "x1.e2",
        "t1.e2.",
        "t-1.e2",
        "t1.e2 ",
        "t1..e2",
        "t" + "1" * 20 + ".e0",
        12,
        None,
        "t1-" + "-".join(["9"] * 10000) + ".e0",
    ],
)
def test_anything_else_is_not_a_cursor(bad):
    with pytest.raises(ValidationError):
        Cursor.parse(bad)


def test_ids_a_read_passes_over_are_waited_for_then_forgotten():
    r = SourceReader(Position(2))
    assert [x["id"] for x in r.take(rows(3, 6), now=100, gap_timeout=60)] == [3, 6]
    assert r.position == Position(6, (4, 5))
    assert [x["id"] for x in r.take(rows(5, 7), now=130, gap_timeout=60)] == [5, 7]  # 5 came late
    assert r.position == Position(7, (4,))
    assert r.take([], now=159, gap_timeout=60) == [] and r.position.missing == (4,)
    r.take([], now=160, gap_timeout=60)
    assert r.position == Position(7, ())


def test_a_reader_remembers_at_most_max_missing_ids():
    r = SourceReader(Position(0))
    r.take(rows(stream.MAX_MISSING + 10), now=0, gap_timeout=60)
    assert len(r.position.missing) == stream.MAX_MISSING
    assert r.position.missing[-1] == stream.MAX_MISSING + 9  # the newest kept, the oldest forgotten


def test_both_sources_merge_by_time_each_in_its_own_order():
    tasks, events = rows(1, 2, 4), event_rows(1, 3)
    merged = [(s, r["id"]) for s, r in stream.merged(tasks, events)]
    assert merged == [("tasks", 1), ("events", 1), ("tasks", 2), ("events", 3), ("tasks", 4)]


class Store:
    """A stream source of fixed rows per read."""

    def __init__(self, reads):
        self.reads = reads

    def stream_rows(self, source, after, missing, limit):
        return self.reads[source].pop(0) if self.reads[source] else []


def test_the_cursor_after_each_event_resumes_exactly_after_it():
    # read 1: tasks 1, 3 (2 passed over), events 1; read 2: task 2 late, task 4
    store = Store({"tasks": [rows(1, 3), rows(2, 4, at=10.0)], "events": [event_rows(1), []]})
    got = list(
        stream.follow(
            store,
            Cursor(),
            stream.StreamFilter(),
            clock=lambda: 0.0,
            follow=True,
            wait=lambda s: None,
            poll_interval=1,
            gap_timeout=60,
            stop=_StopAfter(2),
        )
    )
    assert [(e.kind, e.key, e.cursor) for e in got] == [
        ("submitted", "k1", "t1.e0"),
        ("claimed", "e1", "t1.e1"),
        ("submitted", "k3", "t3-2.e1"),
        ("submitted", "k2", "t3.e1"),
        ("submitted", "k4", "t4.e1"),
    ]


class _StopAfter:
    """A stop event set after ``n`` reads have been asked whether to stop."""

    def __init__(self, n):
        self.n = n

    def is_set(self):
        self.n -= 1
        return self.n < 0
