"""Error hierarchy of perfectsched.

Each error is also the matching queue_core error, so ``except queue_core.AlreadyExistsError``
catches a duplicate schedule too (and ``queue_core.IdempotentAlreadyFinishedError`` a second finish
of an occurrence), and the ``IdempotentError`` marker is shared.
"""

from __future__ import annotations

import queue_core.errors as qe
from queue_core.errors import IdempotentError


class ScheduleError(qe.TaskError):
    """Base class of every perfectsched error."""


class AlreadyExistsError(ScheduleError, qe.AlreadyExistsError):
    """A schedule with this key already exists."""


class NotFoundError(ScheduleError, qe.NotFoundError):
    """No schedule with this key exists."""


class AlreadyFinishedError(ScheduleError, qe.AlreadyFinishedError):
    """This occurrence of the schedule was already finished."""


class PreemptedError(ScheduleError, qe.PreemptedError):
    """The lease on this occurrence was taken over by another scheduler."""


class ConfigError(ScheduleError, qe.ConfigError):
    """Invalid configuration."""


class ValidationError(ScheduleError, qe.ValidationError):
    """An argument was refused."""


class InvalidCronError(ValidationError, ValueError):
    """The cron expression is invalid or can never fire."""


class InvalidTimezoneError(ValidationError, ValueError):
    """The timezone is not a known IANA name."""


class IdempotentAlreadyExistsError(AlreadyExistsError, qe.IdempotentAlreadyExistsError):
    """A schedule with this key already exists."""


class IdempotentAlreadyFinishedError(AlreadyFinishedError, qe.IdempotentAlreadyFinishedError):
    """This occurrence of the schedule was already finished."""


class IdempotentNotFoundError(NotFoundError, qe.IdempotentNotFoundError):
    """No schedule with this key exists."""


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
    "PreemptedError",
    "ScheduleError",
    "ValidationError",
]
