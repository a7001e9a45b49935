"""Which error exits with which code (:mod:`queue_core.exit_codes`), and the error that refuses an input.

A :class:`~queue_core.cli.kit.group.PQGroup` turns every error into ONE line on stderr,
``<prog>: error: <message>``, with any database password replaced by ``***``, and exits with the
code of its kind. With ``-v`` or ``PQ_DEBUG=1`` the traceback is logged as well.
"""

from __future__ import annotations

import click

from ...errors import AlreadyExistsError, ConfigError, DatabaseError, NotFoundError
from ...exit_codes import (
    EXIT_CONFIG,
    EXIT_DATABASE,
    EXIT_ERROR,
    EXIT_EXISTS,
    EXIT_INTERRUPTED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
)

__all__ = [
    "EXIT_CODES_HELP",
    "EXIT_CONFIG",
    "EXIT_DATABASE",
    "EXIT_ERROR",
    "EXIT_EXISTS",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_USAGE",
    "CLIError",
    "exit_code_for",
]

#: For a group's ``epilog`` (``\b`` keeps click from rewrapping the lines).
EXIT_CODES_HELP = (
    "\b\nExit codes:\n"
    "  0 ok, 1 error, 2 usage error, 3 already exists, 4 not found,\n"
    "  5 database error/unreachable, 6 configuration error, 130 interrupted\n"
    "\b\nEnvironment: PQ_DATABASE_URL, PQ_TABLE, PQ_CONFIG, PQ_ENV, PQ_DEBUG=1, PQ_<CONFIG_KEY>"
)


class CLIError(click.ClickException):
    """A refused command-line input (exit code 1 unless ``exit_code`` is given).

    Inside a :class:`~queue_core.cli.kit.group.PQGroup` it is printed as the usual one
    ``<prog>: error:`` line.
    """

    exit_code = EXIT_ERROR

    def __init__(self, message: str, exit_code: int | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code  # type: ignore[misc]  # click types it a ClassVar, yet reads it per instance


def exit_code_for(exc: BaseException) -> int:
    """The exit code documented in this module for ``exc``."""
    if isinstance(exc, click.ClickException):
        return exc.exit_code
    if isinstance(exc, AlreadyExistsError):
        return EXIT_EXISTS
    if isinstance(exc, NotFoundError):
        return EXIT_NOT_FOUND
    if isinstance(exc, DatabaseError):  # SchemaError included
        return EXIT_DATABASE
    if isinstance(exc, ConfigError):
        return EXIT_CONFIG
    return EXIT_ERROR
