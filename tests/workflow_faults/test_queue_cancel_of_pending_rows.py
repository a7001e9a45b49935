"""`perfectqueue cancel KEY` (Task.cancel_request) of a run's *pending* rows.
SqlStore.task_cancel flags every unfinished row that has a ``workflow`` column ("requested: its
decider settles it, through the run, as soon as a worker takes it"; the CLI prints "running":
"a running one is told"), but a pending row is never taken by a worker: the run row is pending
for the whole run, and a map step's row is pending while its items run. The request is
recorded and silently ignored: the run / the map runs to success. (force-finish refuses rows
of a run; cancel of these rows should cancel through the run or refuse likewise.)
"""

from __future__ import annotations

from fault_support import calls, drive, squares_map

import pqflow
from queue_core.errors import TaskError

mp = squares_map("rv_qcancel", result=sum)


class Decider(pqflow.Decider):
    workflows = [mp]


def test_cancel_of_the_run_row(queue):
    mp.start("r", queue=queue)
    try:
        answer = queue["r"].cancel_request()
    except TaskError:
        return  # refused: fine
    drive(queue, Decider)
    run = pqflow.get_run("r", queue=queue)
    assert run.status == "cancelled", (
        f"cancel of the run row answered {answer!r}, then the run went on: {run.status} {run.statuses}"
    )


def test_cancel_of_a_running_map_row(queue):
    mp.start("m", queue=queue)
    drive(queue, Decider, limit=1)  # xs: the map's items wait, its row is pending
    try:
        answer = queue["m#sq"].cancel_request()
    except TaskError:
        return  # refused: fine
    drive(queue, Decider)
    run = pqflow.get_run("m", queue=queue)
    assert run.statuses["sq"] in ("cancelled", "skipped"), (
        f"cancel of the map row answered {answer!r}, then the map ran: {run.statuses} (items run: {calls[('m', 'sq')]})"
    )
