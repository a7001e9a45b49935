"""Signal handlers of a worker child must never hang it.

A child's handlers run in its main thread at any bytecode. ``threading.Event.set()`` from a
handler deadlocks when the signal lands while the main thread holds that event's lock (in its
idle ``wait``/``clear``): the child then hangs, alive and beating, and a graceful restart never
completes (a CI run caught this as a restart that never finished). The tests flood a real
process with signals, while its main thread waits: on a wake-up its handlers set, in a worker
child's processor, and in the shared module every service catches its signals with
(``queue_core.service``), whose only handler appends and writes to a pipe.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

FLOOD = textwrap.dedent("""
    import os, signal, time

    def flood(sig, seconds, then=None):
        # a forked child sends `sig` to us as fast as it can, then `then` once
        parent = os.getpid()
        if os.fork() == 0:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                try:
                    os.kill(parent, sig)
                except OSError:
                    os._exit(0)
            if then is not None:
                os.kill(parent, then)
            os._exit(0)
""")

WAKEUP = FLOOD + textwrap.dedent("""
    from queue_core.wakeup import Wakeup
    w = Wakeup()
    signal.signal(signal.SIGUSR1, lambda s, f: w.set())
    flood(signal.SIGUSR1, 2.0)
    end, turns = time.monotonic() + 3.0, 0
    while time.monotonic() < end:
        w.wait(0.0001)
        w.clear()
        turns += 1
    print("survived", turns)
""")

PROCESSOR = FLOOD + textwrap.dedent("""
    import sys
    from queue_core import config
    from queue_core.queue import Queue
    from queue_core.worker import Processor, install_child_signals
    url, table = sys.argv[1], sys.argv[2]
    q = Queue(url=url, table=table)
    q.init()
    proc = Processor(lambda task: None, config.build({"url": url, "table": table, "poll_interval": 0.0001}), queue=q)
    install_child_signals(proc)   # the handlers a worker child runs with
    signal.signal(signal.SIGUSR2, lambda s, f: proc.wake())  # a wake-up from signal context, as stop() does
    flood(signal.SIGUSR2, 2.0, then=signal.SIGTERM)
    print("exit", proc.run())
""")

# The shared module every service catches its signals with (queue_core.service), both ways it
# is read: by a main loop that only waits, and by a signal thread while the main thread works
# (here: waits on the threading.Event the stop action sets, taking and releasing its lock).
SERVICE = FLOOD + textwrap.dedent("""
    import sys, threading
    from queue_core.service import WORKER_SIGNALS, Intent, Signals
    reopened, stopped = [], threading.Event()
    actions = {Intent.STOP: stopped.set, Intent.STOP_NOW: lambda: os._exit(3), Intent.RESTART: lambda: None,
               Intent.RESTART_NOW: lambda: None, Intent.REOPEN_LOGS: lambda: reopened.append(1)}
    signals = Signals(WORKER_SIGNALS, actions)
    deadline = time.monotonic() + 30
    flood(signal.SIGUSR2, 2.0, then=signal.SIGTERM)
    if sys.argv[1] == "main-loop":
        while not signals.stopping and time.monotonic() < deadline:
            signals.wait(0.0001)
    else:
        signals.act_in_thread()
        while not stopped.is_set() and time.monotonic() < deadline:
            stopped.wait(0.0001)
    signals.close()
    print("stopped" if stopped.is_set() else "still running", len(reopened) > 0)
""")


def _run(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=60)


def test_a_wakeup_set_from_a_signal_handler_never_deadlocks():
    done = _run(WAKEUP)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("survived ")
    assert int(done.stdout.split()[1]) > 100  # it kept waiting and clearing while flooded


def test_an_idle_processor_flooded_with_signals_still_stops_on_sigterm(tmp_path):
    done = _run(PROCESSOR, f"sqlite:///{tmp_path / 'q.db'}", "signals")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "exit 0"


def test_a_service_loop_flooded_with_signals_still_stops_on_sigterm():
    done = _run(SERVICE, "main-loop")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["stopped", "True"]


def test_a_signal_thread_flooded_with_signals_still_stops_on_sigterm():
    done = _run(SERVICE, "signal-thread")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["stopped", "True"]
