"""perfectsched.preview: the fire times ``perfectsched next`` prints and the dashboard shows, and
perfectsched.history's reading of occurrence task keys."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

from perfectsched import preview
from perfectsched.history import occurrence_time

BERLIN = ZoneInfo("Europe/Berlin")


def test_a_spring_gap_is_marked_shifted_and_a_fold_repeated():
    start = dt.datetime(2026, 3, 27, tzinfo=BERLIN).timestamp()
    fires = preview.fires_after("30 2 * * *", start, 4, "Europe/Berlin")
    assert [f.local for f in fires] == [
        "2026-03-27T02:30:00+01:00",
        "2026-03-28T02:30:00+01:00",
        "2026-03-29T03:00:00+02:00",
        "2026-03-30T02:30:00+02:00",
    ]
    assert [f.mark for f in fires] == ["", "", "shifted (DST gap)", ""]
    assert fires[2].utc == "2026-03-29T01:00:00Z"
    autumn = dt.datetime(2026, 10, 25, 1, tzinfo=BERLIN).timestamp()
    fold = preview.fires_after("*/30 2 * * *", autumn, 4, "Europe/Berlin")
    assert [f.mark for f in fold] == ["", "", "repeated (DST fold)", "repeated (DST fold)"]


def test_fires_from_includes_the_stored_next_time():
    first = int(dt.datetime(2026, 1, 1, 3, tzinfo=dt.UTC).timestamp())
    assert [f.time for f in preview.fires_from("0 3 * * *", first, 2)] == [first, first + 86400]


def test_occurrence_time_reads_only_the_schedules_own_keys():
    assert occurrence_time("a", "a.1700000000") == 1700000000
    assert occurrence_time("a", "a.b.1700000000") is None
    assert occurrence_time("a", "ab.1") is None
    assert occurrence_time("a", "a.") is None
    assert occurrence_time("a", "a.１２") is None  # not ASCII digits
