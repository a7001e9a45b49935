"""The worker's decisions agree with the pure one: random workflows (every trigger, joins, maps,
maps over maps, failing steps and items) run through real Deciders on a real table, and each
ended run is replayed through :func:`pqflow.decision.decide`, the function ``explain()`` uses.

The replay starts from nothing and submits what ``decide`` says to submit, giving each submitted
step the status the worker's run gave it, until ``decide`` submits nothing more. The worker must
have run exactly the steps the replay submits (a map may end skipped when its list is not one),
skipped the others, and ended the run as ``decide`` ends it."""

from __future__ import annotations

import zlib

from fault_support import drive, random_workflow

import pqflow
from pqflow.dag import TRIGGERS
from pqflow.decision import decide


def _h(*parts) -> int:
    return zlib.crc32(repr(parts).encode())


def _fn(name: str):
    def fn(ctx, **inputs):
        key = (ctx.run_id, name, ctx.index)
        if _h(key) % 4 == 0:
            raise RuntimeError("fails")
        return [_h(key, i) % 7 for i in range(_h(key, "n") % 4)] if _h(key, "list") % 2 else _h(key) % 100

    fn.__name__ = name
    return fn


FLOWS = [random_workflow(f"agree{seed}", seed, sorted(TRIGGERS), _fn, steps=(3, 9)) for seed in range(25)]


class Decider(pqflow.Decider):
    workflows = FLOWS


def _replay(snapshot: dict, worker: dict[str, str]) -> tuple[dict[str, str], str, list[str]]:
    """Statuses and run status ``decide`` reaches when each step it submits ends as the worker's
    did; and what went wrong on the way (a step submitted that the worker never ran)."""
    submitted: dict[str, str] = {}
    wrong: list[str] = []
    while True:
        d = decide(snapshot, submitted)
        if not d.submit:
            return d.statuses, d.run_status, wrong
        for step in d.submit:
            ran = worker[step] != "skipped" or "map" in snapshot["steps"][step]
            wrong += [] if ran else [f"{step}: decide submits it, the worker skipped it"]
            submitted[step] = worker[step]


def test_every_run_ends_as_decide_replays_it(queue):
    copies = 2  # two runs of each workflow: their rows share a table, never a decision
    for wf in FLOWS:
        for n in range(copies):
            wf.start(f"{wf.name}-{n}", queue=queue)
    drive(queue, Decider)
    disagreements = []
    for wf in FLOWS:
        for n in range(copies):
            run = pqflow.get_run(f"{wf.name}-{n}", queue=queue)
            worker = {name: step.status for name, step in run.steps.items()}
            statuses, status, wrong = _replay(wf.snapshot(), worker)
            if wrong or statuses != worker or status != run.status:
                disagreements.append((run.run_id, wrong, worker, statuses, run.status, status))
    assert not disagreements, disagreements[:2]


def test_the_replay_catches_a_worker_that_ran_a_step_decide_skips():
    """The oracle can fail: a worker that ran a step whose parent failed under all_success."""
    wf = pqflow.Workflow("agree_check")
    wf.step(name="a")(_fn("a"))
    wf.step(after="a", name="b")(_fn("b"))  # all_success
    statuses, status, wrong = _replay(wf.snapshot(), {"a": "failed", "b": "succeeded"})
    assert statuses == {"a": "failed", "b": "skipped"} and status == "failed" and wrong == []
    assert statuses != {"a": "failed", "b": "succeeded"}
    _, _, wrong = _replay(wf.snapshot(), {"a": "succeeded", "b": "skipped"})
    assert wrong == ["b: decide submits it, the worker skipped it"]
