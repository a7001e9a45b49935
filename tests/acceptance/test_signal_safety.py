"""Signal handlers of a worker child must never hang it.

A child's handlers run in its main thread at any bytecode. ``threading.Event.set()`` from a
handler deadlocks when the signal lands while the main thread holds that event's lock (in its
idle ``wait``/``clear``): the child then hangs, alive and beating, and a graceful restart never
completes (a CI run caught this as a restart that never finished). Both tests flood a real
process with signals whose handlers set the wake-up, while its main thread waits on it.
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
