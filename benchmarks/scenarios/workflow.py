"""Scenario 8: workflows (pqflow).

``flow_runs`` runs of :mod:`benchmarks.flows` (10 no-op steps: 1 -> 8 -> 1) are started, then
``pqflow run benchmarks.flows:Decider --burst --processors 2`` serves them; steps/s from the
worker's start to its exit. The overhead per step against a plain task is (time per step) /
(time per task of scenario 3 with 2 processes in the same run) = drain tasks/s / steps/s.
Checked: every run succeeded, every step row exists once and ran once.
"""

from __future__ import annotations

from ..flows import NAME, STEPS, dag
from ..procs import pq_worker
from ..tables import task_counts
from .base import Context, Sample, Scenario

PROCESSES = 2


class Workflow(Scenario):
    name = "workflow"
    title = "8. Workflows: 10-step DAG (fan-out 8, fan-in 1)"

    def run(self, ctx: Context, out: Sample) -> None:
        runs = ctx.sizes.flow_runs
        url, table = ctx.url("workflow"), ctx.table("workflow")
        with ctx.queue("workflow", table) as q:
            for i in range(runs):
                dag.start(f"r{i}", {"i": i}, queue=q)
        ctx.log(f"workflow: {runs} runs x {STEPS} steps, {PROCESSES} processes")
        elapsed = pq_worker(
            "benchmarks.flows:Decider",
            program="pqflow",
            url=url,
            table=table,
            burst=True,
            processors=PROCESSES,
            log=ctx.file("workflow.log"),
        ).wait(ctx.sizes.timeout)
        counts = task_counts(url, table)
        step_rows = task_counts(url, table, key_like="%#%")  # run rows are re-armed (sweeps): not counted
        steps = runs * STEPS
        rate = steps / elapsed
        ctx.shared["flow_steps_rate"] = rate
        out.metric("workflow", "steps_per_s", rate, f"steps/s, {PROCESSES} worker processes", "steps/s")
        out.metric("workflow", "runs_per_s", runs / elapsed, "runs/s", "runs/s")
        drain = ctx.shared.get("drain_rate", {}).get(PROCESSES)
        if drain:
            out.metric(
                "workflow",
                "overhead_per_step",
                drain / rate,
                f"time per step / time per plain task (drain, {PROCESSES} processes)",
                "x",
            )
        out.check("workflow", "not_succeeded", runs + steps - counts["success"])
        out.check("workflow", "duplicates", step_rows["reexecuted"] + step_rows["total"] - step_rows["distinct_keys"])
        out.detail("workflow", "workflow", NAME)
