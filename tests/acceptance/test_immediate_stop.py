"""An immediate stop (QUIT) gives back what a worker has not started and
writes the successes it holds. Real worker processes (thread and process mode), real signals;
the database is held from the test (a SQLite write lock) to pin the interleavings."""

from __future__ import annotations

import signal
import sqlite3
import time
from pathlib import Path

import pytest
from procs import finish, runs, start_worker, wait_for

HANDLERS = str(Path(__file__).with_name("gate_handlers.py"))


@pytest.fixture
def sqlite_q(tmp_path):
    import queue_core

    url = f"sqlite:///{tmp_path / 'q.db'}"
    q = queue_core.open(url, "q")
    q.init()
    yield q
    q.close()


def _worker(q, **settings):
    return start_worker(q.config["url"], q.table, _file=HANDLERS, **settings)


@pytest.mark.parametrize("processor_type", ["thread", "process"])
def test_a_success_being_written_by_the_monitor_thread_at_quit_is_lost(sqlite_q, tmp_path, processor_type):
    """Interleaving: task a succeeds and waits in the settler; the processor starts b (long); the
    monitor thread takes a from the settler and writes its finish, which waits on the database
    (a write lock the test holds for a moment); QUIT arrives. give_back_now's settler.flush()
    finds the settler empty (the monitor holds a) and returns at once, and the process ends
    without waiting for the write in flight: a's success is never written, though the database
    came back 0.5 s later, well within IMMEDIATE_GRACE. The claim "successes held in the settler
    are written before the process ends" does not hold; a runs a second time after its lease
    expires."""
    q, log, gate = sqlite_q, tmp_path / "runs.log", tmp_path / "gate"
    q.submit("a", "t", {"log": str(log), "gate": str(gate)}, priority=1)
    q.submit("b", "t", {"log": str(log), "sleep": 30})
    p = _worker(
        q, processors=1, task_prefetch=1, processor_type=processor_type, alive_time=60, task_heartbeat_interval=20
    )  # no heartbeat in the way of the monitor's flush
    blocker = sqlite3.connect(str(tmp_path / "q.db"), isolation_level=None, timeout=30)
    try:
        wait_for(lambda: ("a",) == tuple(k for k, _ in runs(log)), what="a running")
        blocker.execute("BEGIN IMMEDIATE")  # the next write waits
        gate.touch()  # a succeeds; b starts; the monitor's write of a's finish waits on the lock
        wait_for(lambda: [k for k, _ in runs(log)] == ["a", "b"], what="b running")
        time.sleep(0.5)  # the monitor thread (settler delay 0.05 s) is inside finish_many
        p.send_signal(signal.SIGQUIT)
        time.sleep(0.5)  # a short stall, well within IMMEDIATE_GRACE
        blocker.execute("ROLLBACK")
        code, out = finish(p, timeout=30)
    finally:
        blocker.close()
        if p.poll() is None:
            p.kill()
    assert "immediate stop" in out, out
    a = q["a"].metadata()
    assert (a.status, a.outcome) == ("finished", "success"), f"a is {a.status}/{a.outcome}:\n{out[-2000:]}"


@pytest.mark.parametrize("processor_type", ["thread", "process"])
def test_a_claim_in_flight_at_quit_starts_its_first_task_instead_of_giving_it_back(sqlite_q, tmp_path, processor_type):
    """Interleaving: the processor's claim waits on the database (the test's transaction holds the
    write lock and inserts four due tasks); QUIT arrives; the give-back thread waits for the batch
    lock, and only sets the stop flag once it holds it. The claim commits, _claim releases the batch
    lock, and the processor's own thread takes it back first in _next_unstarted: the flag is not
    set yet, so it pops k0 and starts its handler, after the stop signal. The process ends 1.5 s
    later at the most with k0 abandoned: an attempt spent by a handler started after QUIT, by a
    task (max_attempts=1) that then fails without having had its run. "A claim in flight at the
    signal is given back too" holds only for the rest of the batch."""
    q, log = sqlite_q, tmp_path / "runs.log"
    wlog = tmp_path / "worker.log"
    p = _worker(q, processors=1, task_prefetch=3, processor_type=processor_type, alive_time=60, log=str(wlog))
    wait_for(
        lambda: wlog.exists() and ("worker started" in wlog.read_text() or "running pid" in wlog.read_text()),
        what="the worker polling",
    )
    time.sleep(0.3)

    def submit_then_quit(tx):
        for i in range(4):  # due a minute ago: the claim's 'now', read before it waits, sees them due
            tx.submit(
                f"k{i}", "t", {"log": str(log), "sleep": 5}, run_at=tx.now - 60, max_attempts=1 if i == 0 else None
            )
        time.sleep(0.5)  # the worker's next claim now waits for this transaction's write lock
        p.send_signal(signal.SIGQUIT)
        time.sleep(0.5)  # a claim in flight at the signal

    try:
        q.transaction(submit_then_quit)
        code, out = finish(p, timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    out = wlog.read_text() + out
    assert "immediate stop" in out, out
    tasks = {m.key: (m.status, m.attempts) for m in q.list()}
    started = [k for k, _ in runs(log)]
    assert started == [] and tasks == {f"k{i}": ("waiting", 0) for i in range(4)}, (started, tasks, out[-2500:])


def test_an_unstarted_task_whose_lease_expired_spends_its_attempt_at_quit(sqlite_q, tmp_path):
    """Interleaving: a batch [a, b, c]; a runs (long), b and c wait their turn. The worker is
    paused (SIGSTOP, as a VM pause or a swap storm would) past alive_time, then resumed: its
    monitor's next heartbeat finds the leases expired and marks a, b and c lost (no other worker
    took them over: the row still carries this worker's token). QUIT: give_back_now hands b and c
    to _release, which sees t.lost and calls lost_before_start(); return_attempt is fenced by
    LATER_LEASE (lease_token <> ours), so it gives nothing back, and release() is never tried
    although it would succeed (fenced by the token alone, which still matches). b and c keep an
    attempt no handler used: after a burst worker ran them, attempts 2 for one run each."""
    q, log, gate = sqlite_q, tmp_path / "runs.log", tmp_path / "gate"
    q.submit("a", "t", {"log": str(log), "gate": str(gate)}, priority=1)
    for k in ("b", "c"):
        q.submit(k, "t", {"log": str(log)})
    p = _worker(
        q,
        processors=1,
        task_prefetch=2,
        processor_type="thread",
        alive_time=2,
        task_heartbeat_interval=0.3,
        log=str(tmp_path / "worker.log"),
    )
    try:
        wait_for(lambda: [k for k, _ in runs(log)] == ["a"], what="a running")
        p.send_signal(signal.SIGSTOP)
        time.sleep(3)  # past alive_time: the three leases expire, nobody takes them over
        p.send_signal(signal.SIGCONT)
        wait_for(lambda: (tmp_path / "worker.log").read_text().count("lease lost") >= 3, what="leases seen lost")
        p.send_signal(signal.SIGQUIT)
        code, out = finish(p, timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert code == 0, out
    gate.touch()  # a, run again by the burst worker, returns at once
    code, out = finish(_worker(q, burst=True, processors=1, alive_time=2), timeout=60)
    assert code == 0, out
    ran = [k for k, _ in runs(log)]
    attempts = {k: q[k].metadata().attempts for k in ("b", "c")}
    assert attempts == {k: ran.count(k) for k in ("b", "c")}, (attempts, ran)


@pytest.mark.parametrize("backend", ["mysql", "postgres"])
def test_one_processors_stuck_claim_keeps_the_other_processors_tasks_from_going_back(wq, tmp_path, backend):
    """Thread mode, two processors. thread-0 ran task a and its next claim, which finishes a in
    the same transaction, waits on a's row (locked by another client: the test). thread-1 holds
    a batch [b, c, d]: b runs, c and d wait their turn. QUIT: _give_back visits the processors
    one after the other; thread-0's give_back_now waits for its batch lock (held by the stuck
    claim) until GIVE_BACK_TIME ends the process, so thread-1's c and d, whose release would not
    have waited for anything (other rows), are never given back: each spent an attempt that no
    handler used. The stop is bounded, but one processor's stuck claim costs the others' tasks."""
    import sqlalchemy as sa

    q, log, gate, who = wq, tmp_path / "runs.log", tmp_path / "gate", tmp_path / "who"
    q.submit("a", "t", {"log": str(log), "gate": str(gate), "who": str(who), "only": "thread-0"})
    p = start_worker(
        q.config["url"], q.table, _file=HANDLERS, processors=2, task_prefetch=2, processor_type="thread", alive_time=60
    )
    engine = sa.create_engine(q.config["url"])
    locker = engine.connect()
    try:
        wait_for(lambda: who.exists() and who.read_text().strip(), what="a running")
        assert who.read_text().split() == ["a", "thread-0"]
        q.submit_many(
            [
                {"key": k, "type": "t", "data": {"log": str(log), "sleep": 30 if k == "b" else 0}}
                for k in ("b", "c", "d")
            ]
        )  # the idle thread-1 claims them in one batch and starts b
        wait_for(lambda: "b" in [k for k, _ in runs(log)], what="b running")
        t = q.store.t
        locker.execute(sa.select(t.c.id).where(t.c.key == "a").with_for_update())  # a's row, locked
        gate.touch()  # a succeeds; thread-0's next claim (finishing a first) waits on the row lock
        time.sleep(1.0)
        p.send_signal(signal.SIGQUIT)
        code, out = finish(p, timeout=30)
    finally:
        locker.rollback()
        locker.close()
        engine.dispose()
        if p.poll() is None:
            p.kill()
    assert "immediate stop" in out, out
    ran = [k for k, _ in runs(log)]
    spent = {k: q[k].metadata().attempts for k in ("c", "d")}
    assert spent == {k: ran.count(k) for k in ("c", "d")}, (spent, ran, out[-2500:])


def test_the_childs_own_normal_exit_cuts_its_give_back_short(sqlite_q, tmp_path):
    """Process mode. A batch [a, c0..c7]: a runs (it has written its own finish), the c's wait
    their turn. QUIT reaches the child: the give-back thread takes the c's out of the batch, sets
    the stop flag and releases them, one transaction each; the first one waits on the database
    (a write lock the test holds for 0.6 s, well within IMMEDIATE_GRACE). Meanwhile a's handler
    returns: the processor thread finds the stop flag in _next_unstarted (the give-back took the
    rest), leaves its loop, has nothing to flush, returns 0 from Processor.run, and _be_child ends
    the process with os._exit(0) without waiting for the give-back thread, which had not released
    one task yet: the c's keep the attempt their claim counted, with no run (and the child exits 0,
    not 137). Nothing but the processor's own exit stopped the give-back: the database came back
    0.3 s later."""
    q, log, gate = sqlite_q, tmp_path / "runs.log", tmp_path / "gate"
    q.submit("a", "t", {"log": str(log), "gate": str(gate), "finish_first": True}, priority=1)
    q.submit_many([{"key": f"c{i}", "type": "t", "data": {"log": str(log)}} for i in range(8)])
    wlog = tmp_path / "worker.log"
    p = _worker(
        q,
        processors=1,
        task_prefetch=8,
        processor_type="process",
        alive_time=60,
        task_heartbeat_interval=20,
        log=str(wlog),
    )
    blocker = sqlite3.connect(str(tmp_path / "q.db"), isolation_level=None, timeout=30)
    try:
        wait_for(lambda: [k for k, _ in runs(log)] == ["a"], what="a running")
        wait_for(lambda: q["a"].metadata().status == "finished", what="a's own finish")
        blocker.execute("BEGIN IMMEDIATE")
        p.send_signal(signal.SIGQUIT)
        time.sleep(0.3)  # the give-back thread holds the c's; its first release waits on the lock
        gate.touch()  # a returns; the processor thread sees the stop flag and heads for its exit
        time.sleep(0.3)
        blocker.execute("ROLLBACK")  # the database is back, 0.6 s into IMMEDIATE_GRACE
        code, out = finish(p, timeout=30)
    finally:
        blocker.close()
        if p.poll() is None:
            p.kill()
    out = wlog.read_text() + out
    ran = [k for k, _ in runs(log)]
    spent = {m.key: m.attempts for m in q.list() if m.key != "a"}
    assert spent == {f"c{i}": ran.count(f"c{i}") for i in range(8)}, (spent, ran, out[-2500:])


@pytest.mark.parametrize("processor_type", ["thread", "process"])
def test_an_immediate_stop_during_a_graceful_release_abandons_the_rest_of_it(sqlite_q, tmp_path, processor_type):
    """A batch [a, c0..c7]: a runs, the c's wait their turn. TERM (graceful): once a returns, the
    processor thread's _next_unstarted takes the c's out of the batch and releases them outside
    the batch lock, one transaction each; the first waits a moment on the database (a write lock
    the test holds). A second stop signal (TERM in thread mode, QUIT in process mode) comes
    meanwhile: give_back_now finds the batch empty (the processor thread holds the c's in its
    own list), has nothing to release, and the process ends at once, while the database came
    back 0.3 s later: the c's the graceful release had not reached keep an attempt and never ran.
    The give-back does not wait for a release already under way."""
    q, log, gate = sqlite_q, tmp_path / "runs.log", tmp_path / "gate"
    q.submit("a", "t", {"log": str(log), "gate": str(gate), "finish_first": True}, priority=1)
    q.submit_many([{"key": f"c{i}", "type": "t", "data": {"log": str(log)}} for i in range(8)])
    wlog = tmp_path / "worker.log"
    p = _worker(
        q,
        processors=1,
        task_prefetch=8,
        processor_type=processor_type,
        alive_time=60,
        task_heartbeat_interval=20,
        log=str(wlog),
    )
    blocker = sqlite3.connect(str(tmp_path / "q.db"), isolation_level=None, timeout=30)
    try:
        wait_for(lambda: [k for k, _ in runs(log)] == ["a"], what="a running")
        wait_for(lambda: q["a"].metadata().status == "finished", what="a's own finish")
        blocker.execute("BEGIN IMMEDIATE")
        p.send_signal(signal.SIGTERM)  # graceful: the c's go back once a returned
        time.sleep(0.3)
        gate.touch()  # a returns; the processor thread starts releasing the c's: the first waits
        time.sleep(0.3)
        p.send_signal(signal.SIGTERM if processor_type == "thread" else signal.SIGQUIT)  # now at once
        time.sleep(0.3)
        blocker.execute("ROLLBACK")  # the database is back, 0.3 s into IMMEDIATE_GRACE
        code, out = finish(p, timeout=30)
    finally:
        blocker.close()
        if p.poll() is None:
            p.kill()
    out = wlog.read_text() + out
    assert "immediate stop" in out, out
    ran = [k for k, _ in runs(log)]
    spent = {m.key: m.attempts for m in q.list() if m.key != "a"}
    assert spent == {f"c{i}": ran.count(f"c{i}") for i in range(8)}, (spent, ran, out[-2500:])


@pytest.mark.parametrize("backend", ["mysql", "postgres"])
def test_a_success_whose_row_is_locked_keeps_the_unstarted_tasks_from_going_back(wq, tmp_path, backend):
    """Process mode, one child, batch [a, b, c, d]. Another client holds a's row (SELECT ... FOR
    UPDATE: an operator's transaction, a decider's lock) while a runs: the monitor's heartbeat of a
    waits on it. a returns (its success waits in the settler: the monitor is stuck, it cannot
    write it), b starts, c and d wait their turn. QUIT: give_back_now first flushes the settler,
    whose write of a waits on the lock, and only then releases c and d; GIVE_BACK_TIME ends the
    process first. c and d, whose rows nobody locked, keep an attempt without a run: one
    success that cannot be written costs every unstarted task of the batch."""
    import sqlalchemy as sa

    q, log, gate = wq, tmp_path / "runs.log", tmp_path / "gate"
    q.submit("a", "t", {"log": str(log), "gate": str(gate)}, priority=2)
    q.submit("b", "t", {"log": str(log), "sleep": 30}, priority=1)
    q.submit_many([{"key": k, "type": "t", "data": {"log": str(log)}} for k in ("c", "d")])
    p = start_worker(
        q.config["url"],
        q.table,
        _file=HANDLERS,
        processors=1,
        task_prefetch=3,
        processor_type="process",
        alive_time=60,
        task_heartbeat_interval=0.3,
    )
    engine = sa.create_engine(q.config["url"])
    locker = engine.connect()
    try:
        wait_for(lambda: [k for k, _ in runs(log)] == ["a"], what="a running")
        t = q.store.t
        locker.execute(sa.select(t.c.id).where(t.c.key == "a").with_for_update())  # a's row, locked
        time.sleep(0.8)  # the monitor's next heartbeat of a waits on the lock
        gate.touch()  # a succeeds (in the settler), b starts
        wait_for(lambda: [k for k, _ in runs(log)] == ["a", "b"], what="b running")
        time.sleep(0.3)
        p.send_signal(signal.SIGQUIT)
        code, out = finish(p, timeout=30)
    finally:
        locker.rollback()
        locker.close()
        engine.dispose()
        if p.poll() is None:
            p.kill()
    assert "immediate stop" in out, out
    ran = [k for k, _ in runs(log)]
    spent = {k: q[k].metadata().attempts for k in ("c", "d")}
    assert spent == {k: ran.count(k) for k in ("c", "d")}, (spent, ran, out[-2500:])
