"""A plain handler and a workflow whose one task SIGKILLs its own worker process (loaded by path
from real worker processes).

Each run appends "<name> <pid> run" to the file named by the data's "log", so tests can count
executions from outside; the task named by data["crash"] kills its process on each of its first
data["crashes"] runs (every run without it), counted in files under data["dir"].
"""

from __future__ import annotations

import os

import pqflow


def _ran(data: dict, name: str) -> None:
    with open(data["log"], "a") as fh:
        fh.write(f"{name} {os.getpid()} run\n")
        fh.flush()


def _crash_if_asked(data: dict, name: str) -> None:
    if name != data.get("crash"):
        return
    times = data.get("crashes")
    if times is not None:
        done = len([f for f in os.listdir(data["dir"]) if f.startswith(f"{name}.crash.")])
        if done >= times:
            return
        open(os.path.join(data["dir"], f"{name}.crash.{done}"), "w").close()
    os.kill(os.getpid(), 9)


def crashing(task) -> None:
    """A plain task: record the run, then kill the process if it is the one asked to."""
    _ran(task.data, task.key)
    _crash_if_asked(task.data, task.key)


crash_map = pqflow.Workflow("e2e_crash_map", retry_wait=0)


@crash_map.step()
def items(ctx):
    return [f"i{i}" for i in range(ctx.data["n"])]


@crash_map.step(map=items)
def work(ctx, item):
    _ran(ctx.data, item)
    _crash_if_asked(ctx.data, item)
    return item


class CrashDecider(pqflow.Decider):
    workflows = [crash_map]
