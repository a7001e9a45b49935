"""Scenario 8's workflow: 10 no-op steps, 1 -> 8 -> 1 (fan-out 8, fan-in 1).

Served by ``pqflow run benchmarks.flows:Decider``.
"""

from __future__ import annotations

import pqflow

NAME = "bench_dag"
FAN_OUT = 8
STEPS = 1 + FAN_OUT + 1

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


class Decider(pqflow.Decider):
    workflows = [dag]
