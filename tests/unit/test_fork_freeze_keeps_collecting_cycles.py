"""``apart.fork_holding`` freezes the parent's objects (``gc.freeze``)
before each fork and never unfreezes them. Its docstring promises: "What the parent frees later
is freed as before; only cycles left unreachable at a fork stay". The parent that forks is a
long-lived supervisor (it forks again at every processor recycle, crash and restart, and a
reload check forks through ``CheckApart``). Each scenario runs in a fresh interpreter: a
freeze in the pytest process would change every later test."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])


def _run(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_a_cycle_alive_at_a_fork_and_dropped_later_is_collected_in_the_parent():
    """A reference cycle that the parent still uses at the fork (a settings object, an engine, an
    exception being handled) and drops afterwards must be collected by the parent's collector.
    gc.freeze moved it to the permanent generation, which no collection ever examines: it stays
    for the life of the supervisor, however often ``gc.collect()`` runs."""
    said = _run(
        """
        import gc, os, weakref
        from queue_core.worker.forked_check import fork_holding

        class Node:
            pass

        a, b = Node(), Node()
        a.other, b.other = b, a          # a cycle, alive (referenced by a and b)
        gone = weakref.ref(a)
        pid = fork_holding([])
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        del a, b                          # dropped by the parent after the fork
        gc.collect()
        print("collected" if gone() is None else "kept")
        """
    )
    assert said == "collected"


def test_a_supervisor_that_forks_again_and_again_does_not_grow_its_permanent_generation():
    """A supervisor recycling its processors (max_request_per_child) forks at each recycle; what it
    holds between two forks that becomes cyclic garbage must not pile up. 200 forks, each after
    the parent made and dropped one cyclic object (as a handled exception does: traceback ->
    frame -> locals), then a full collection: nothing of those 200 may be left."""
    said = _run(
        """
        import gc, os, weakref
        from queue_core.worker.forked_check import fork_holding

        class Garbage:
            pass

        refs = []
        for _ in range(200):
            g = Garbage()
            g.me = g                      # a cycle
            refs.append(weakref.ref(g))
            pid = fork_holding([])        # the cycle is still referenced by ``g`` here
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
            del g
        gc.collect()
        print(sum(r() is not None for r in refs))
        """
    )
    assert said == "0", f"{said} of 200 cyclic objects never collected by the forking parent"


def test_the_child_can_still_collect_its_own_cycles():
    said = _run(
        """
        import gc, os, weakref
        from queue_core.worker.forked_check import fork_holding

        class Node:
            pass

        pid = fork_holding([])
        if pid == 0:
            n = Node(); n.me = n
            r = weakref.ref(n)
            del n
            gc.collect()
            os._exit(0 if r() is None else 3)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
        """
    )
    assert said == "0"
