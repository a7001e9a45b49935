"""A task its holder finished alone before listing it in a batch gets one ``finished`` event, not
a second (counted twice): a batch's settle must not take every row FINISHED under its token for
one it finished itself, as ``task.finish()`` a second time raises IdempotentAlreadyFinishedError."""

from __future__ import annotations

from test_settle_events_after_changes_while_held import T0, _claim, _finished, _submit


def test_a_task_finished_alone_then_listed_in_a_batch_gets_one_event(queue):
    _submit(queue, 3)
    held = _claim(queue, 3, T0 + 1)
    held[0].finish(now=T0 + 2)
    assert queue.finish_many(held, now=T0 + 3) == []
    assert [r["task_id"] for r in _finished(queue)] == [h._id for h in held]
