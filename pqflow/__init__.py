"""pqflow: workflows from decorated Python functions, stored only as queue rows.

>>> etl = pqflow.Workflow("etl")
>>> @etl.step()
... def extract(ctx): return [1, 2, 3]
>>> @etl.step(after=extract)
... def load(ctx, extract): ...
>>> class Decider(pqflow.Decider):
...     workflows = [etl]
"""

from __future__ import annotations

from typing import Any

from .dag import StepDef, Workflow, get_workflow, registered_workflows
from .decider import Decider, StepContext
from .errors import (
    FlowError,
    InvalidRunIdError,
    StepResultError,
    UnknownRunError,
    UnknownWorkflowError,
    WorkflowDefinitionError,
)
from .listing import RUN_STATUSES, RunsPage, RunSummary, runs_page
from .runs import ItemInfo, MapInfo, Run, StepInfo, cancel_run, get_run, list_runs, retry_run


def graph(target: Any, format: str = "text") -> str | bytes:
    """Draw a workflow definition, or a run (each step marked with its status)."""
    from .render import render

    if isinstance(target, Workflow):
        return render(target.snapshot(), None, format)
    if isinstance(target, Run):
        if target.snapshot is None:
            raise FlowError(f"run {target.run_id!r} has no DAG snapshot yet (not picked up by a decider)")
        notes = {n: str(s.items) for n, s in target.steps.items() if s.items is not None}
        return render(target.snapshot, target.statuses, format, notes)
    raise TypeError(f"graph() takes a pqflow.Workflow or pqflow.Run, not {type(target).__name__}")


__all__ = [
    "Decider",
    "FlowError",
    "InvalidRunIdError",
    "ItemInfo",
    "MapInfo",
    "RUN_STATUSES",
    "Run",
    "RunSummary",
    "RunsPage",
    "StepContext",
    "StepDef",
    "StepInfo",
    "StepResultError",
    "UnknownRunError",
    "UnknownWorkflowError",
    "Workflow",
    "WorkflowDefinitionError",
    "cancel_run",
    "get_run",
    "get_workflow",
    "graph",
    "list_runs",
    "retry_run",
    "runs_page",
    "registered_workflows",
]
