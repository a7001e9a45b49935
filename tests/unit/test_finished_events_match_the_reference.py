"""``store/events.py`` ``finished_events`` builds its events as one literal; they must be what the
reference formula of three merged dicts gives: the same keys (those of ``COLUMNS``), the same
values, of the same types, bit for bit."""

from __future__ import annotations

import struct

from queue_core.store.events import COLUMNS, finished_events
from queue_core.store.settles import HeldAttempt


def reference(held, at, outcome):
    """The reference formula: three merged dicts."""
    return [
        {"task_id": i, "key": h.key, "queue": h.queue, "type": h.type, "kind": "finished", "at": at}
        | {"attempt": h.attempt, "owner": h.owner, "outcome": outcome, "detail": None}
        | {"waited": h.started_at - h.due_at, "ran": at - h.started_at, "due_at": None, "tracked": 0, "traceback": None}
        for i, h in held
    ]


def _exact(v):
    return (type(v), struct.pack(">d", v)) if isinstance(v, float) else (type(v), v)


def test_finished_events_are_the_reference_key_for_key_bit_for_bit():
    held = [
        (1, HeldAttempt("k", "default", "t", 1, "h:1", 1_700_000_000.5, 1_700_000_000.25)),
        (2**62, HeldAttempt("k\udcff", "q", "t", 2**31 - 1, "h:2", 0.0, -0.0)),
        (3, HeldAttempt("", "q", "t", 0, "", 5e-324, 1e13)),
        (4, HeldAttempt("k", "q", "t", 3, "o", 1e13, 1e13)),
    ]
    for at, outcome in ((1_700_000_001.0, "success"), (-0.0, "cancelled"), (5e-324, "failure"), (1700000002, "x")):
        got, want = finished_events(held, at, outcome), reference(held, at, outcome)
        assert [list(e) for e in got] == [list(e) for e in want]
        assert all(set(e) == set(COLUMNS) for e in got)
        assert [[_exact(e[c]) for c in COLUMNS] for e in got] == [[_exact(e[c]) for c in COLUMNS] for e in want]


def test_no_held_attempt_no_event():
    assert finished_events([], 1.0, "success") == []
    assert finished_events(iter([]), 1.0, "success") == []
