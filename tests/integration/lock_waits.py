"""Letting a racing thread go as far as it can: wait until it ends, or until one of its
statements is waiting in the database (for a lock held by the transaction the test paused),
instead of a fixed wait that a blocked thread always uses up."""

from __future__ import annotations

import contextlib
import threading
import time

import sqlalchemy as sa


@contextlib.contextmanager
def statement_in_flight(name: str):
    """Yields a dict whose "since" is when the statement the thread named ``name`` is running
    was sent (None while it runs none); every engine of the process is watched."""
    state: dict = {"since": None}

    def sent(*_args) -> None:
        if threading.current_thread().name == name:
            state["since"] = time.monotonic()

    def ended(*_args) -> None:
        if threading.current_thread().name == name:
            state["since"] = None

    listeners = [("before_cursor_execute", sent), ("after_cursor_execute", ended), ("handle_error", ended)]
    for event, fn in listeners:
        sa.event.listen(sa.engine.Engine, event, fn)
    try:
        yield state
    finally:
        for event, fn in listeners:
            sa.event.remove(sa.engine.Engine, event, fn)


def join_unless_blocked(thread: threading.Thread, in_flight: dict, timeout: float = 3.0, blocked_after: float = 0.5):
    """Wait until ``thread`` ends, or until one of its statements has waited ``blocked_after`` s
    in the database (for a lock the paused transaction holds: it goes on only once that ends),
    at most ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while thread.is_alive() and time.monotonic() < deadline:
        since = in_flight["since"]
        if since is not None and time.monotonic() - since >= blocked_after:
            return
        thread.join(0.02)


def race_a_paused_transaction(
    paused: threading.Thread, reached: threading.Event, go: threading.Event, racer: threading.Thread
) -> None:
    """Start ``paused`` until it sets ``reached`` (its transaction paused, waiting for ``go``), then
    ``racer``, which commits meanwhile or waits on the paused one's locks (SQLite: its write lock;
    ``join_unless_blocked``); then let ``paused`` go and wait for both."""
    with statement_in_flight(racer.name) as in_flight:  # watched until both threads ended
        paused.start()
        assert reached.wait(10)
        racer.start()
        join_unless_blocked(racer, in_flight)
        go.set()
        paused.join(20)
        racer.join(20)
