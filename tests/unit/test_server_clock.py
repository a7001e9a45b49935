"""ServerClock: the server's time carried by the monotonic clock (pure: fake readings and a fake
monotonic clock; the real servers are in tests/integration/test_one_clock.py)."""

from __future__ import annotations

import pytest

from queue_core.clock import SERVER_CLOCK_MAX_RTT, SERVER_CLOCK_RETRY, ClockReading, ServerClock
from queue_core.errors import DatabaseError


class Mono:
    def __init__(self, t: float = 100.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


class Server:
    """A server clock reading that can fail, and can take time (moving the monotonic clock)."""

    def __init__(self, mono: Mono, offset: float, rtt: float = 0.0):
        self.mono, self.offset, self.rtt, self.fail, self.reads = mono, offset, rtt, False, 0

    def __call__(self, monotonic) -> ClockReading:
        assert monotonic is self.mono  # timed by the clock's own monotonic source
        self.reads += 1
        self.mono.t += 0.05  # connecting: not part of the timed round trip
        if self.fail:
            raise DatabaseError("server unreachable")
        before = monotonic()
        self.mono.t += self.rtt / 2
        value = self.mono.t + self.offset
        self.mono.t += self.rtt / 2
        return ClockReading(value, (before + monotonic()) / 2, monotonic() - before)


def test_tells_the_servers_time_and_moves_with_the_monotonic_clock():
    mono = Mono()
    server = Server(mono, offset=1_800_000_000.0)
    clock = ServerClock(server, refresh=60, monotonic=mono)
    assert clock.now() == pytest.approx(mono.t + 1_800_000_000.0)
    mono.t += 12.5
    assert clock.now() == pytest.approx(mono.t + 1_800_000_000.0)
    assert server.reads == 1  # read once, then carried by the monotonic clock


def test_reads_again_after_refresh_and_follows_a_step_of_the_servers_clock():
    mono = Mono()
    server = Server(mono, offset=1_000.0)
    clock = ServerClock(server, refresh=60, monotonic=mono)
    assert clock.now() == pytest.approx(mono.t + 1_000.0)
    server.offset = 1_000.0 - 30  # the server's clock was stepped back 30 s (NTP)
    mono.t += 59.9
    assert clock.now() == pytest.approx(mono.t + 1_000.0)  # not yet read again
    mono.t += 0.2
    assert clock.now() == pytest.approx(mono.t + 970.0)
    assert server.reads == 2


def test_a_reading_is_dated_at_the_middle_of_its_round_trip():
    mono = Mono()
    server = Server(mono, offset=500.0, rtt=0.2)
    clock = ServerClock(server, refresh=60, monotonic=mono)
    # the server read its clock in the middle of the round trip, after connecting
    assert clock.now() == pytest.approx(mono.t + 500.0)
    assert mono.t == pytest.approx(100.25)


def test_a_failed_reading_keeps_the_last_one_and_tries_again_soon():
    mono = Mono()
    server = Server(mono, offset=10.0)
    clock = ServerClock(server, refresh=60, monotonic=mono)
    assert clock.now() == pytest.approx(mono.t + 10.0)
    server.fail = True
    mono.t += 60
    assert clock.now() == pytest.approx(mono.t + 10.0)  # carried on from the last reading
    assert server.reads == 2
    mono.t += SERVER_CLOCK_RETRY / 2
    clock.now()
    assert server.reads == 2  # not asked again at every call
    server.fail = False
    server.offset = 20.0
    mono.t += SERVER_CLOCK_RETRY
    assert clock.now() == pytest.approx(mono.t + 20.0)
    assert server.reads == 3


def test_a_clock_never_read_raises_the_databases_error():
    mono = Mono()
    server = Server(mono, offset=0.0)
    server.fail = True
    clock = ServerClock(server, monotonic=mono)
    with pytest.raises(DatabaseError):
        clock.now()
    server.fail = False
    assert clock.now() == pytest.approx(mono.t)  # the next call reads it


def test_a_slow_reading_does_not_replace_a_good_one():
    mono = Mono()
    server = Server(mono, offset=1_000.0)
    clock = ServerClock(server, refresh=60, monotonic=mono)
    assert clock.now() == pytest.approx(mono.t + 1_000.0)
    server.rtt = SERVER_CLOCK_MAX_RTT * 4  # a reading stuck behind a lock: +-1 s imprecise
    server.offset = 1_003.0
    mono.t += 60
    assert clock.now() == pytest.approx(mono.t + 1_000.0)  # the old reading carried on
    server.rtt = 0.0
    mono.t += SERVER_CLOCK_RETRY
    assert clock.now() == pytest.approx(mono.t + 1_003.0)


def test_the_hosts_wall_clock_is_never_read(monkeypatch):
    import time

    def wall():
        raise AssertionError("ServerClock read the host's wall clock")

    monkeypatch.setattr(time, "time", wall)
    mono = Mono()
    clock = ServerClock(Server(mono, offset=7.0), monotonic=mono)
    assert clock.now() == pytest.approx(mono.t + 7.0)
