"""The worker supervisor's clock-driven duties, on real child processes and an injected clock.

What the supervisor does with time (docs/worker.md, "Signals"): a child silent for
``child_heartbeat_limit`` is SIGKILLed; a child asked to stop gets TERM again every
``child_kill_interval`` and SIGKILL after ``child_graceful_kill_limit``. The clock only moves
when a test moves it, so nothing here waits for time to pass.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from queue_core.clock import FakeClock
from queue_core.worker.supervisor import Child, Supervisor

#: counts the TERMs it gets on stdout, one line each, and otherwise waits to be killed
COUNTS_TERMS = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda s, f: print('term', flush=True))\n"
    "print('ready', flush=True)\n"
    "while True:\n"
    "    time.sleep(60)\n"
)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1000.0)  # the supervisor's monotonic clock


@pytest.fixture
def child():
    p = subprocess.Popen(
        [sys.executable, "-c", COUNTS_TERMS], stdout=subprocess.PIPE, text=True, start_new_session=True
    )  # a process group of its own, as the supervisor's children
    assert p.stdout.readline() == "ready\n"
    yield p
    if p.poll() is None:
        p.kill()
    p.wait()
    p.stdout.close()


def supervising(p: subprocess.Popen, clock: FakeClock, **settings) -> tuple[Supervisor, Child]:
    settings = {
        "child_heartbeat_limit": 60.0,
        "child_kill_interval": 2.0,
        "child_graceful_kill_limit": None,
        **settings,
    }
    sup = Supervisor(lambda *_: 0, settings, burst=False, config_loader=None, clock=clock.now)
    c = sup.children[p.pid] = Child(0, p.pid, beat_fd=-1, now=clock.now())
    return sup, c


def test_a_child_silent_past_the_heartbeat_limit_is_killed(child, clock):
    sup, c = supervising(child, clock, child_heartbeat_limit=10.0)
    clock.advance(10.0)
    sup.keepalive()
    assert child.poll() is None  # at the limit, not past it
    c.last_beat = clock.now()  # it beats
    clock.advance(6.0)
    sup.keepalive()
    assert child.poll() is None
    clock.advance(5.0)
    sup.keepalive()
    assert child.wait(timeout=10) == -signal.SIGKILL


def test_a_child_asked_to_stop_gets_term_again_every_kill_interval(child, clock):
    sup, c = supervising(child, clock, child_kill_interval=2.0)
    sup.ask_to_stop(c)
    assert child.stdout.readline() == "term\n"
    for _ in range(3):
        clock.advance(1.0)
        c.last_beat = clock.now()
        sup.keepalive()  # within the interval: nothing sent
        clock.advance(1.5)
        c.last_beat = clock.now()
        sup.keepalive()
        assert child.stdout.readline() == "term\n"
    os.kill(child.pid, signal.SIGUSR1)  # ends it (default action): its stdout ends after the TERMs counted
    assert child.wait(timeout=10) == -signal.SIGUSR1
    assert child.stdout.read() == ""  # no TERM more than those read


def test_a_child_still_running_past_the_graceful_kill_limit_is_killed(child, clock):
    sup, c = supervising(child, clock, child_kill_interval=100.0, child_graceful_kill_limit=5.0)
    sup.ask_to_stop(c)
    assert child.stdout.readline() == "term\n"
    clock.advance(5.0)
    c.last_beat = clock.now()
    sup.keepalive()
    assert child.poll() is None
    clock.advance(0.5)
    sup.keepalive()
    assert child.wait(timeout=10) == -signal.SIGKILL
