"""queue_core: a leased, fenced, fair task queue stored in one SQL table.

>>> import queue_core
>>> q = queue_core.open("sqlite:///pq.db")
>>> q.init()
>>> q.submit("k1", "email", {"to": "a@example.com"})
"""

from __future__ import annotations

from typing import Any

from .api.app import Application, Decisions, Dispatch, Router, Runner
from .api.queue import AcquiredTask, Queue, Task, TaskMetadata, Transaction, open
from .clock import Clock, FakeClock, ServerClock, SystemClock
from .errors import (
    AccessDeniedError,
    AlreadyExistsError,
    AlreadyFinishedError,
    CancelRequestedError,
    ConfigError,
    CorruptRowError,
    DatabaseError,
    DatabaseUnreachableError,
    ForeignTableError,
    GracefulProcessStopError,
    IdempotentAlreadyExistsError,
    IdempotentAlreadyFinishedError,
    IdempotentError,
    IdempotentNotFoundError,
    ImmediateProcessStopError,
    NotFoundError,
    OutcomeUnknownError,
    PermanentError,
    PreemptedError,
    ProcessStopError,
    SchemaError,
    TaskError,
    TaskRunningError,
    UndefinedDecisionError,
    ValidationError,
)

__all__ = [
    "Application",
    "Decisions",
    "Dispatch",
    "Router",
    "Runner",
    "AccessDeniedError",
    "DatabaseUnreachableError",
    "OutcomeUnknownError",
    "TaskRunningError",
    "AcquiredTask",
    "AlreadyExistsError",
    "AlreadyFinishedError",
    "CancelRequestedError",
    "Clock",
    "ConfigError",
    "CorruptRowError",
    "DatabaseError",
    "FakeClock",
    "ForeignTableError",
    "GracefulProcessStopError",
    "IdempotentAlreadyExistsError",
    "IdempotentAlreadyFinishedError",
    "IdempotentError",
    "IdempotentNotFoundError",
    "ImmediateProcessStopError",
    "NotFoundError",
    "PermanentError",
    "PreemptedError",
    "ProcessStopError",
    "Queue",
    "SchemaError",
    "ServerClock",
    "SystemClock",
    "Task",
    "TaskError",
    "TaskMetadata",
    "Transaction",
    "UndefinedDecisionError",
    "ValidationError",
    "open",
]


def __getattr__(name: str) -> Any:
    """``queue_core.metrics`` (``from queue_core import metrics``): the Prometheus metrics of a
    queue, ``queue_core.ops.metrics``, loaded when first asked for (it needs the ``metrics``
    extra, which an application that never serves metrics does not install). A deprecated name
    warns and gives what replaced it."""
    if name == "metrics":
        from .ops import metrics

        return metrics
    if name in ("Decider", "DefaultDecider"):  # deprecated names of Decisions (they warn)
        from .api import app

        return getattr(app, name)
    raise AttributeError(f"module 'queue_core' has no attribute {name!r}")
