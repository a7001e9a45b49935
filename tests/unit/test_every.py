"""Interval schedules (``@every:15m+5m``): parsing and the pure arithmetic of their occurrences."""

from __future__ import annotations

import pytest

from perfectsched import cron
from perfectsched.errors import InvalidCronError
from perfectsched.every import Every, normalise, parse, with_offset

T0 = 1_700_000_000 - 1_700_000_000 % 86400  # a UTC midnight


@pytest.mark.parametrize(
    ("text", "interval", "offset"),
    [
        ("@every:15m", 900, 0),
        ("@every:1h30m", 5400, 0),
        ("@every:90s", 90, 0),
        ("@every:1d+2h", 86400, 7200),
        ("@EVERY: 15m + 5m", 900, 300),
        ("@every:1s", 1, 0),
        ("@every:366d", 366 * 86400, 0),
    ],
)
def test_parse(text, interval, offset):
    assert parse(text) == Every(interval, offset)


@pytest.mark.parametrize(
    "text",
    [
        "@every:",
        "@every:15",
        "@every:15x",
        "@every:0s",
        "@every:367d",
        "@every:15m+15m",
        "@every:1h+2h",
        "@every:-5m",
        "@every:1.5h",
        "@every:15m+",
        "@every:m",
        "@every:15m;drop",
    ],
)
def test_bad_intervals_are_refused_with_an_example(text):
    with pytest.raises(InvalidCronError, match=r"invalid interval|offset must be shorter"):
        cron.validate_cron(text)


def test_normalised_forms_and_offsets():
    assert normalise("@Every: 15m + 5m") == "@every:15m+5m"
    assert with_offset("@every:15m", "5m") == "@every:15m+5m"
    with pytest.raises(InvalidCronError, match="--offset needs an interval"):
        with_offset("0 * * * *", "5m")
    with pytest.raises(InvalidCronError, match="--offset needs an interval"):
        with_offset("@every:15m+1m", "5m")


def test_occurrences_are_aligned_to_the_epoch_plus_the_offset():
    assert cron.cron_time("@every:15m+5m", T0) == T0 + 300
    assert cron.cron_time("@every:15m+5m", T0 + 300) == T0 + 300  # inclusive
    assert cron.next_time("@every:15m+5m", T0 + 300) == T0 + 1200  # strictly after
    assert cron.next_time("@every:15m+5m", T0 + 299.5) == T0 + 300
    assert cron.next_time("@every:15m+5m", T0 + 300.25) == T0 + 1200
    assert cron.upcoming("@every:1h", T0 - 1, 3) == [T0, T0 + 3600, T0 + 7200]
    assert cron.upcoming("@every:7s", 0, 3) == [7, 14, 21]


def test_an_interval_counts_real_seconds_through_dst_in_any_timezone():
    fall_back = 1446368400  # 2015-11-01T09:00:00Z, 01:00 PST after the fold in Los Angeles
    times = cron.upcoming("@every:30m", fall_back - 7200, 6, "America/Los_Angeles")
    assert [b - a for a, b in zip(times, times[1:], strict=False)] == [1800] * 5
    assert times == cron.upcoming("@every:30m", fall_back - 7200, 6, "UTC")
    marks = cron.occurrences("@every:30m", fall_back - 7200, 6, "America/Los_Angeles")
    assert not any(o.shifted for o in marks)
    assert [o.repeated for o in marks].count(True) == 2  # 01:00 and 01:30 shown a second time


def test_exhaustive_small_intervals_agree_with_a_brute_force_walk():
    for interval in (1, 7, 60, 97):
        for offset in (0, 1, interval - 1):
            every = Every(interval, offset)
            for ts in [x / 4 for x in range(-8, 4 * 3 * interval)]:
                expect_incl = next(
                    t for t in range(-3 * interval, 10 * interval) if t >= ts and t % interval == offset % interval
                )
                expect_excl = next(
                    t for t in range(-3 * interval, 10 * interval) if t > ts and t % interval == offset % interval
                )
                assert every.find(ts, True) == expect_incl, (interval, offset, ts)
                assert every.find(ts, False) == expect_excl, (interval, offset, ts)
