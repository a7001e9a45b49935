"""Error hierarchy of queue_core (leaf module: imports nothing from the package).

Every error a caller can cause is one of these. Driver errors (SQLAlchemy, PyMySQL,
psycopg, sqlite3) are caught and wrapped only in the store layer.
"""

from __future__ import annotations


class TaskError(Exception):
    """Base class of every queue_core error."""

    def __init__(self, message: str | None = None):
        super().__init__(message or (self.__doc__ or "").strip())


class IdempotentError:
    """Marker: the call found the state it wanted to create already in place.

    Applications may treat these as success (for example a duplicate submission).
    """


class AlreadyExistsError(TaskError):
    """A task with this key already exists."""


class AlreadyFinishedError(TaskError):
    """The task is already finished."""


class NotFoundError(TaskError):
    """No task with this key exists."""


class TaskRunningError(TaskError):
    """The task is running, and the operation needs it waiting (``move``)."""


class PreemptedError(TaskError):
    """The lease was taken over by another worker or the task was force-finished."""


class CancelRequestedError(TaskError):
    """Cancellation of this task was requested."""


class ConfigError(TaskError):
    """Invalid configuration."""


class PermanentError(TaskError):
    """The task can never succeed as it was submitted (its key or data is invalid): a worker
    fails it at once, with this error, and never retries it (``policy.is_permanent``)."""


class ValidationError(TaskError, ValueError):
    """An argument was refused (bad key, data, time or option)."""


class DatabaseError(TaskError):
    """The database failed or could not be reached (after bounded retries)."""


class DatabaseUnreachableError(DatabaseError):
    """No connection to the database could be opened (a closed port, an unknown host, a SQLite
    file that cannot be opened): nothing was read or written."""


class OutcomeUnknownError(DatabaseError):
    """The database failed after a write was sent and may have applied it (the connection was
    lost during an autocommit statement or a COMMIT): nothing tells whether it did. Do it again:
    a submit of the same key then raises IdempotentAlreadyExistsError if the first one was
    stored."""


class SchemaError(DatabaseError):
    """The table is missing or has an unsupported schema version."""


class ForeignTableError(SchemaError):
    """The table named is not one of this kind of pq table (another program's, or a pq table of
    another kind): pq neither reads, writes nor alters it."""


class CorruptRowError(DatabaseError):
    """A row holds a value pq never writes (edited by hand or by another program)."""


class AccessDeniedError(DatabaseError):
    """The database refused the statement to this account: a privilege it lacks, or a
    read-only replica, transaction or file."""


class UndefinedDecisionError(TaskError):
    """A handler decided something its decider does not define."""


class IdempotentAlreadyExistsError(AlreadyExistsError, IdempotentError):
    """A task with this key already exists."""


class IdempotentAlreadyFinishedError(AlreadyFinishedError, IdempotentError):
    """The task is already finished."""


class IdempotentNotFoundError(NotFoundError, IdempotentError):
    """No task with this key exists."""


class ProcessStopError(Exception):
    """Reason handed to a handler's ``kill()`` when its worker stops."""


class GracefulProcessStopError(ProcessStopError):
    """The worker is stopping gracefully."""


class ImmediateProcessStopError(ProcessStopError):
    """The worker is stopping immediately."""
