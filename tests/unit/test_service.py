"""What every long-running service shares (queue_core.worker.service), without real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import queue_core
from queue_core.errors import AccessDeniedError, DatabaseError, ForeignTableError, SchemaError
from queue_core.rules import policy
from queue_core.worker.service import (
    CHILD_SIGNALS,
    SCHEDULER_SIGNALS,
    WORKER_SIGNALS,
    Dispatcher,
    Intent,
    OutageWait,
    Phase,
    SignalQueue,
    reload_settings,
)

TERM, INT, QUIT, USR1, HUP, USR2 = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGHUP,
    signal.SIGUSR2,
)


def recording(meaning=WORKER_SIGNALS, **options) -> tuple[Dispatcher, list[Intent]]:
    done: list[Intent] = []
    actions = {intent: (lambda intent=intent: done.append(intent)) for intent in set(meaning.values())}
    return Dispatcher(meaning, actions, **options), done


def test_each_worker_signal_asks_what_docs_worker_md_says():
    assert WORKER_SIGNALS == {
        TERM: Intent.STOP,
        INT: Intent.STOP,
        QUIT: Intent.STOP_NOW,
        USR1: Intent.RESTART,
        HUP: Intent.RESTART_NOW,
        USR2: Intent.REOPEN_LOGS,
    }


def test_a_worker_child_stops_on_what_restarts_its_worker_as_docs_worker_md_says():
    assert CHILD_SIGNALS == {
        TERM: Intent.STOP,
        INT: Intent.STOP,
        USR1: Intent.STOP,
        QUIT: Intent.STOP_NOW,
        HUP: Intent.STOP_NOW,
        USR2: Intent.REOPEN_LOGS,
    }


def test_the_scheduler_keeps_perfectscheds_meanings_as_docs_cron_md_says():
    assert SCHEDULER_SIGNALS == {
        TERM: Intent.STOP,
        INT: Intent.STOP,
        QUIT: Intent.STOP,
        USR1: Intent.RESTART,
        HUP: Intent.RESTART,
        USR2: Intent.REOPEN_LOGS,
    }


def test_signal_tables_and_immediate_exits_live_only_in_the_service_module():
    """One home: no other module maps signals to intents or ends its process with os._exit
    (but the forked children of the supervisor and of a forked check, which must never return into
    the parent's code)."""
    root = Path(queue_core.__file__).parent.parent
    for pkg in ("queue_core", "perfectsched", "pqflow"):
        for path in (root / pkg).rglob("*.py"):
            text = path.read_text()
            if path.name == "service.py":
                continue
            assert "dict[int, Intent]" not in text and "signal.SIGQUIT:" not in text, path
            exits = text.count("os._exit(")
            assert exits == (1 if path.name in ("supervisor.py", "forked_check.py") else 0), path


@pytest.mark.parametrize("code", [0, 137])
def test_exit_now_writes_its_line_and_ends_the_process_with_its_code_at_once(code):
    script = (
        "import atexit, sys\n"
        "from queue_core.worker.service import exit_now\n"
        "atexit.register(lambda: print('cleanup ran', file=sys.stderr))\n"
        f"exit_now({code}, 'worker pid=1: immediate stop: exiting')\n"
        "print('still running')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == code
    assert done.stderr == "worker pid=1: immediate stop: exiting\n" and done.stdout == ""


def test_a_second_stop_signal_stops_immediately():
    d, done = recording()
    d.dispatch(TERM)
    assert done == [Intent.STOP] and d.phase is Phase.STOPPING
    d.dispatch(INT)
    assert done == [Intent.STOP, Intent.STOP_NOW] and d.phase is Phase.STOPPING_NOW
    d.dispatch(TERM)  # and again: still immediate, never graceful again
    assert done[-1] is Intent.STOP_NOW


def test_an_immediate_stop_is_immediate_at_once():
    d, done = recording()
    d.dispatch(QUIT)
    assert done == [Intent.STOP_NOW] and d.stopping


def test_where_the_sender_repeats_a_stop_on_purpose_a_repeat_changes_nothing():
    d, done = recording(repeated_stop_is_immediate=False)
    for _ in range(3):
        d.dispatch(TERM)
    assert done == [Intent.STOP] and d.phase is Phase.STOPPING


def test_restarts_are_ignored_once_a_stop_began():
    d, done = recording()
    d.dispatch(USR1)
    d.dispatch(HUP)
    d.dispatch(TERM)
    d.dispatch(USR1)
    d.dispatch(HUP)
    assert done == [Intent.RESTART, Intent.RESTART_NOW, Intent.STOP]
    assert d.phase is Phase.STOPPING


def test_reopening_logs_changes_no_phase_and_a_timeout_or_other_signal_does_nothing():
    d, done = recording()
    for signum in (USR2, None, signal.SIGCHLD, USR2):
        d.dispatch(signum)
    assert done == [Intent.REOPEN_LOGS, Intent.REOPEN_LOGS] and d.phase is Phase.RUNNING


def _waiting(queue: SignalQueue) -> list[int]:
    got = []
    while (signum := queue.wait(0)) is not None:
        got.append(signum)
    return got


def test_a_signal_waits_at_most_twice_so_a_stop_after_a_flood_comes_soon():
    # real deliveries: a signal a process sends itself is handled before os.kill returns
    queue = SignalQueue([USR1, USR2, TERM])
    try:
        for _ in range(5000):
            os.kill(os.getpid(), USR1)
            os.kill(os.getpid(), USR2)
        os.kill(os.getpid(), TERM)
        assert _waiting(queue) == [USR1, USR2, USR1, USR2, TERM]
        os.kill(os.getpid(), USR2)  # acted on: the next one is queued again
        assert queue.wait(1.0) == USR2
    finally:
        queue.restore()


def test_a_second_stop_sent_while_the_reader_is_busy_still_escalates():
    # the reader is busy (a reload's check) while a TERM, a restart and a second TERM arrive
    queue = SignalQueue([USR1, TERM])
    try:
        for signum in (TERM, USR1, TERM, TERM):
            os.kill(os.getpid(), signum)
        got = _waiting(queue)
        assert got == [TERM, USR1, TERM]
        dispatcher, done = recording()
        for signum in got:
            dispatcher.dispatch(signum)
        assert done == [Intent.STOP, Intent.STOP_NOW] and dispatcher.phase is Phase.STOPPING_NOW
    finally:
        queue.restore()


def test_every_meaning_needs_an_action():
    with pytest.raises(ValueError, match="STOP_NOW"):
        Dispatcher({TERM: Intent.STOP, QUIT: Intent.STOP_NOW}, {Intent.STOP: lambda: None})


def test_backoff_doubles_up_to_its_limit_and_a_success_resets_it():
    b = OutageWait(policy.Backoff(0.1, cap=1.0, jitter=0.0))
    assert [b.failed() for _ in range(6)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    b.succeeded()
    assert b.failed() == 0.1
    default = OutageWait()
    assert [default.failed() for _ in range(9)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 10.0, 10.0])


def test_a_reload_keeps_the_old_config_when_the_new_one_is_broken(caplog):
    old = {"processors": 2}
    assert reload_settings(None, old) is old
    assert reload_settings(lambda: {"processors": 3}, old) == {"processors": 3}

    def broken() -> dict:
        raise ValueError("config line 3: not TOML")

    assert reload_settings(broken, old) is old
    assert "config reload failed, keeping the old config: config line 3: not TOML" in caplog.text


def test_a_reload_keeps_the_old_config_when_the_new_one_cannot_be_opened(caplog):
    """``opens`` is how the service opens its database: a config it cannot open is broken too, and
    what it could open is closed at once (the service reopens with the config it keeps)."""
    old, new = {"url": "sqlite:///old.db"}, {"url": "postgresql+nosuchdriver://u@h/db"}
    opened = []

    class Opened:
        def __init__(self, settings: dict):
            if "nosuchdriver" in settings["url"]:
                raise ValueError("cannot use database URL: no driver nosuchdriver")
            self.closed = False
            opened.append(self)

        def close(self) -> None:
            self.closed = True

    assert reload_settings(lambda: new, old, opens=Opened) is old
    assert "config reload failed, keeping the old config: cannot use database URL" in caplog.text
    fine = {"url": "sqlite:///new.db"}
    assert reload_settings(lambda: fine, old, opens=Opened) == fine
    assert [o.closed for o in opened] == [True]


@pytest.mark.parametrize(
    "error, kept",
    [
        (ForeignTableError("table t is not a queue table"), True),
        (AccessDeniedError("check refused by ***: read-only"), True),
        (SchemaError("table not found; run 'init' first"), False),  # the processors wait for init, as at start
        (DatabaseError("connection refused"), False),  # an outage: retried, as at start
    ],
)
def test_a_reload_whose_database_cannot_be_used_now_is_taken_unless_it_is_never_usable(caplog, error, kept):
    old, new = {"url": "sqlite:///old.db"}, {"url": "sqlite:///new.db"}

    def opens(settings: dict):
        raise error

    assert reload_settings(lambda: new, old, opens=opens) == (old if kept else new)
    assert ("keeping the old config" in caplog.text) is kept


def test_a_child_beats_while_its_monitor_is_idle_or_busy_for_less_than_its_stuck_limit():
    from queue_core.worker.monitor import beats

    assert beats(None, now=1000.0, stuck_limit=30.0)  # waiting for its next turn
    assert beats(990.0, now=1000.0, stuck_limit=30.0)  # a turn of 10 s: waiting on the database
    assert not beats(970.0, now=1000.0, stuck_limit=30.0)
    assert not beats(900.0, now=1000.0, stuck_limit=30.0)
    assert not beats(1000.0, now=1000.0, stuck_limit=0.0)  # no limit left: any turn stops the beats


def test_a_stuck_monitor_s_child_is_killed_before_the_leases_it_renewed_lapse():
    from queue_core import config
    from queue_core.worker.monitor import stuck_limit

    defaults = config.build({})
    limit = stuck_limit(defaults)  # 300 - 60 - 2 - 2
    assert limit == 236.0
    # the last renewal came at most one heartbeat interval before the turn began; the kill comes
    # at most a beat interval plus child_heartbeat_limit after the last beat
    kill_at = limit + defaults["child_heartbeat_interval"] + defaults["child_heartbeat_limit"]
    assert kill_at + defaults["task_heartbeat_interval"] <= defaults["alive_time"]
    assert stuck_limit({**defaults, "alive_time": 30.0}) == 0.0
