"""Signal handlers of a worker child must never hang it.

A child's handlers run in its main thread at any bytecode. ``threading.Event.set()`` from a
handler deadlocks when the signal lands while the main thread holds that event's lock (in its
idle ``wait``/``clear``): the child then hangs, alive and beating, and a graceful restart never
completes (a CI run caught this as a restart that never finished). The tests flood a real
process with signals, while its main thread waits: on a wake-up its handlers set, in a worker
child's processor, and in the shared module every service catches its signals with
(``queue_core.worker.service``), whose only handler appends and writes to a pipe.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

FLOOD = textwrap.dedent("""
    import os, signal, time

    def flood(sig, seconds, then=None, gap=0.0):
        # a forked child sends `sig` (or each of a tuple in turn) to us as fast as it can (or with
        # `gap` seconds between two), then `then` once. A Python-level handler (a test's own: pq's
        # run in C, through the wakeup fd) runs again inside itself for a signal that lands while
        # it runs, and a flood with no gap can nest it until RecursionError kills the process,
        # whatever the code under test does: floods of such handlers leave a gap.
        parent, sigs = os.getpid(), sig if isinstance(sig, tuple) else (sig,)
        if os.fork() == 0:
            end, n = time.monotonic() + seconds, 0
            while time.monotonic() < end:
                try:
                    os.kill(parent, sigs[n % len(sigs)])
                except OSError:
                    os._exit(0)
                n += 1
                if gap:
                    time.sleep(gap)
            if then is not None:
                os.kill(parent, then)
            os._exit(0)
""")

WAKEUP = FLOOD + textwrap.dedent("""
    from queue_core.worker.wakeup import Wakeup
    w = Wakeup()
    signal.signal(signal.SIGUSR1, lambda s, f: w.set())
    flood(signal.SIGUSR1, 2.0, gap=0.0001)
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
    from queue_core.api.queue import Queue
    from queue_core.worker.main import Processor, install_child_signals
    url, table = sys.argv[1], sys.argv[2]
    q = Queue(url=url, table=table)
    q.init()
    proc = Processor(lambda task: None, config.build({"url": url, "table": table, "poll_interval": 0.0001}), queue=q)
    install_child_signals(proc)   # the handlers a worker child runs with
    signal.signal(signal.SIGUSR2, lambda s, f: proc.wake())  # a wake-up from signal context, as stop() does
    flood(signal.SIGUSR2, 2.0, then=signal.SIGTERM, gap=0.0001)
    print("exit", proc.run())
""")

# A worker child logging to a file while USR2 (reopen the log files) floods it. Its USR2 handler
# used to reopen the files itself, inside the handler: while the main thread was writing a log line
# the reopen failed ("reentrant call inside <_io.BufferedWriter>": "--- Logging error ---"), and
# handlers nesting in handlers ended the child (RecursionError). The signal thread reopens them now.
CHILD_LOGS = FLOOD + textwrap.dedent("""
    import logging, sys
    from queue_core import config
    from queue_core.worker.logs import setup_logging
    from queue_core.api.queue import Queue
    from queue_core.worker.main import Processor, install_child_signals
    url, table, logfile = sys.argv[1:4]
    setup_logging(logfile)
    q = Queue(url=url, table=table)
    q.init()
    q.submit_many([{"key": f"k{i}", "type": "t"} for i in range(2000)])
    proc = Processor(lambda task: [logging.getLogger("handler").info("task %s", task.key) for _ in range(5)],
                     config.build({"url": url, "table": table}), queue=q, burst=True)
    install_child_signals(proc)   # the handlers a worker child runs with
    flood(signal.SIGUSR2, 2.0)
    print("exit", proc.run(), q.stats()["finished"], flush=True)
    os._exit(0)  # as a worker child ends: the interpreter's shutdown would restore SIG_DFL under the flood
""")

# ``perfectsched run`` shares the service module: a flood of USR2 (reopen the log file, in its
# signal thread) and USR1 (restart, in its main loop) while it runs a handler that logs, then TERM.
SCHEDULER = FLOOD + textwrap.dedent("""
    import logging, sys
    import perfectsched
    from perfectsched.runner import run_scheduler
    url, table, logfile = sys.argv[1:4]
    with perfectsched.open(url, table + "_s", table) as sc:
        sc.init()
        sc.add("s", "job", cron="* * * * *", next_time=time.time() - 86400)  # 1440 occurrences due
    def handler(task):
        for _ in range(5):
            logging.getLogger("handler").info("occurrence %s", task.scheduled_time)
    settings = {"url": url, "table": table, "schedule_table": table + "_s", "log": logfile}
    for early in (signal.SIGUSR1, signal.SIGUSR2):  # until run_scheduler installs its handlers
        signal.signal(early, signal.SIG_IGN)
    flood((signal.SIGUSR2, signal.SIGUSR1), 2.0, then=signal.SIGTERM)
    print("exit", run_scheduler(settings, target=handler, config_loader=lambda: settings))
""")

# A worker child stopped before it installed its own handlers: the stop waited for the
# supervisor's next TERM (child_kill_interval later), as the first one reached the handler the
# child inherited from the supervisor. The child holds the signals until its own handlers are set.
EARLY_STOP = textwrap.dedent("""
    import os, signal, sys
    from queue_core.worker.service import WORKER_SIGNALS, Intent, Signals
    from queue_core.worker.supervisor import Supervisor
    gate_r, gate_w = os.pipe()

    def child_main(settings, beat_fd, slot, ledger):
        os.read(gate_r, 1)  # a slow start: the stop comes before the child's own handlers
        stopped = []
        signals = Signals({signal.SIGTERM: Intent.STOP}, {Intent.STOP: lambda: stopped.append(1)})
        signals.wait(10.0)
        return 0 if stopped else 1

    sup = Supervisor(child_main, {"child_fork_frequency_limit": 0}, burst=False, config_loader=None)
    nothing = lambda: None
    sup.signals = Signals(WORKER_SIGNALS, dict.fromkeys(Intent, nothing))  # the handlers a child inherits
    sup.spawn(0)
    (pid, child), = sup.children.items()
    sup.ask_to_stop(child)  # TERM, once
    os.write(gate_w, b"go")
    print("exit", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
""")

# The shared module every service catches its signals with (queue_core.worker.service), both ways it
# is read: by a main loop that only waits, and by a signal thread while the main thread works
# (here: waits on the threading.Event the stop action sets, taking and releasing its lock).
SERVICE = FLOOD + textwrap.dedent("""
    import sys, threading
    from queue_core.worker.service import WORKER_SIGNALS, Intent, Signals
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


def test_a_worker_child_flooded_with_usr2_while_logging_reopens_its_log_file_and_stops(tmp_path):
    logfile = tmp_path / "worker.log"
    done = _run(CHILD_LOGS, f"sqlite:///{tmp_path / 'q.db'}", "t", str(logfile))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["exit", "0", "2000"]
    assert "Logging error" not in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert logfile.read_text().count("finished task=") == 2000


def test_the_scheduler_flooded_with_reopens_and_restarts_still_stops_on_sigterm(tmp_path):
    logfile = tmp_path / "sched.log"
    done = _run(SCHEDULER, f"sqlite:///{tmp_path / 's.db'}", "t", str(logfile))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "exit 0"
    assert "Logging error" not in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]
    lines = logfile.read_text()
    assert "restarted" in lines and "log files reopened" in lines and "stop signal SIGTERM" in lines


def test_a_stop_sent_before_a_child_installed_its_handlers_still_stops_it():
    done = _run(EARLY_STOP)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "exit 0"
