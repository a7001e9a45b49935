"""Error hierarchy of pqflow.

Every class derives from :class:`queue_core.errors.TaskError`, so its docstring is
the default message: ``raise UnknownRunError()`` says "No workflow run with this id
exists.". This module imports nothing else from pqflow.
"""

from __future__ import annotations

from queue_core.errors import PermanentError, TaskError, ValidationError

__all__ = [
    "FlowError",
    "WorkflowDefinitionError",
    "UnknownWorkflowError",
    "UnknownRunError",
    "InvalidRunIdError",
    "UnknownStepError",
    "StepResultError",
    "RenderError",
]


class FlowError(TaskError):
    """Base class of every pqflow error."""


class WorkflowDefinitionError(FlowError, ValueError):
    """The workflow definition is invalid."""


class UnknownWorkflowError(FlowError, LookupError):
    """No workflow with this name is defined."""


class UnknownRunError(FlowError, LookupError):
    """No workflow run with this id exists."""


class InvalidRunIdError(FlowError, ValidationError, PermanentError):
    """The run id cannot name a run: a run task submitted with it fails at once, never retried."""


class StepResultError(FlowError, ValueError):
    """A step's result is not JSON-serialisable or is too large."""


class RenderError(FlowError, RuntimeError):
    """Rendering this format needs a tool that is not available."""


class UnknownStepError(FlowError, LookupError, ValueError):
    """The run's workflow has no step with this name."""
