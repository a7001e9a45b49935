"""pqweb.charts (pure): the timeline (Gantt) of a run's steps."""

from __future__ import annotations

from pqweb.charts import timeline


def test_bars_share_one_scale_and_a_running_step_reaches_now():
    t = timeline([("a", "succeeded", 100.0, 110.0), ("b", "running", 110.0, None), ("c", "pending", None, None)], 140.0)
    a, b, c = t.bars
    assert (a.x, a.width, a.seconds) == (0.0, 150.0, 10.0)
    assert (b.x, b.width, b.seconds) == (150.0, 450.0, 30.0)
    assert (c.width, c.seconds) == (0.0, None)
    assert [bar.y for bar in t.bars] == [0, 20, 40] and t.height == 60 and t.span == 40.0


def test_no_step_started_and_an_instant_step():
    assert timeline([("a", "pending", None, None)], 5.0).span == 0.0
    (bar,) = timeline([("a", "succeeded", 5.0, 5.0)], 5.0).bars
    assert bar.width == 1.0  # still visible
    assert timeline([], 5.0).bars == ()
