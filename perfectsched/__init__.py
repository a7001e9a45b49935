"""perfectsched: a distributed cron stored in the same database as queue_core.

Each occurrence of a schedule becomes one queue task keyed ``"<schedule key>.<scheduled time>"``,
submitted in the same transaction that advances the schedule: any number of schedulers can run
at once, without a leader, and an occurrence is submitted exactly once.
"""

from __future__ import annotations

from .cron import Occurrence, cron_time, next_time, occurrences, upcoming, validate_cron, validate_timezone
from .errors import (
    AlreadyExistsError,
    AlreadyFinishedError,
    ConfigError,
    IdempotentAlreadyExistsError,
    IdempotentAlreadyFinishedError,
    IdempotentError,
    IdempotentNotFoundError,
    InvalidCronError,
    InvalidTimezoneError,
    NotFoundError,
    PreemptedError,
    ScheduleError,
    ValidationError,
)
from .scheduler import Schedule, ScheduledTask, ScheduleMetadata, Scheduler, open

__all__ = [
    "AlreadyExistsError",
    "AlreadyFinishedError",
    "ConfigError",
    "IdempotentAlreadyExistsError",
    "IdempotentAlreadyFinishedError",
    "IdempotentError",
    "IdempotentNotFoundError",
    "InvalidCronError",
    "InvalidTimezoneError",
    "NotFoundError",
    "Occurrence",
    "PreemptedError",
    "Schedule",
    "ScheduleError",
    "ScheduleMetadata",
    "ScheduledTask",
    "Scheduler",
    "ValidationError",
    "cron_time",
    "next_time",
    "occurrences",
    "open",
    "upcoming",
    "validate_cron",
    "validate_timezone",
]
