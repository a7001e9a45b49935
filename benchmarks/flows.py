"""The workflows of scenarios 8 and 10, served by ``pqflow run benchmarks.flows:Decider``.

Scenario 8's DAG: 10 no-op steps, 1 -> 8 -> 1 (fan-out 8, fan-in 1). Scenario 10's map:
``items`` returns ``list(range(n))`` (``n`` from the run's input), ``work`` runs once per item
(a map: one queue task each) and ``join`` receives the list of their results.
"""

from __future__ import annotations

import pqflow

NAME = "bench_dag"
FAN_OUT = 8
STEPS = 1 + FAN_OUT + 1

MAP_NAME = "bench_map"
MAP_STEP = "work"
#: the steps of a map run besides its items: items, work (the map row), join
MAP_STEPS = 3

dag = pqflow.Workflow(NAME)


@dag.step()
def begin(ctx):
    return None


def _fan(i: int):
    def fan(ctx):
        return None

    fan.__name__ = fan.__qualname__ = f"fan{i}"
    return dag.step(after=begin)(fan)


_fans = [_fan(i) for i in range(FAN_OUT)]


@dag.step(after=[f"fan{i}" for i in range(FAN_OUT)])
def join(ctx):
    return None


mapped = pqflow.Workflow(MAP_NAME)


@mapped.step()
def items(ctx):
    return list(range(ctx.data["n"]))


@mapped.step(map=items)
def work(ctx, item):
    return None


@mapped.step(after=work, name="join")
def join_items(ctx, work):
    return None


class Decider(pqflow.Decider):
    workflows = [dag, mapped]
