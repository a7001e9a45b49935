"""The options every command takes, and the state they leave for it.

Every command decorated with :func:`common_options` accepts, after the subcommand
(``perfectqueue list -D URL``):

  -D, --database URL      SQLAlchemy URL (env ``PQ_DATABASE_URL``)
  --table NAME            queue table (env ``PQ_TABLE``)
  -c, --config FILE       TOML config file, one table per environment (env ``PQ_CONFIG``)
  -e, --environment ENV   table of the config file to use (env ``PQ_ENV``; default development)
  -v, --verbose           debug logging, and a traceback with errors (also ``PQ_DEBUG=1``)

They are merged with the rest of the configuration by :func:`queue_core.cli.kit.settings.settings`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import click

from ...errors import ConfigError
from .argv_password import hide_url_from_argv
from .passwords import remember_url
from .stderr_logging import debug_env, setup_logging

_COMMAND_LINE = click.core.ParameterSource.COMMANDLINE


@dataclass
class CLIState:
    """The common options of the running command (``ctx.obj``)."""

    database: str | None = None
    table: str | None = None
    config_file: str | None = None
    environment: str = "development"
    environment_explicit: bool = False
    verbose: bool = False
    #: set by PQGroup: the program name used in error lines
    prog: str | None = None
    extra: dict = field(default_factory=dict)


def state_of(ctx_or_obj: Any) -> CLIState:
    """The :class:`CLIState` of a context (or of the current one), or ``ctx_or_obj`` itself."""
    if isinstance(ctx_or_obj, CLIState):
        return ctx_or_obj
    ctx = ctx_or_obj if isinstance(ctx_or_obj, click.Context) else click.get_current_context(silent=True)
    if ctx is None:
        return CLIState()
    state = ctx.find_object(CLIState)
    return state if state is not None else ctx.ensure_object(CLIState)


def common_options(f: Callable | None = None, *, own_logging: bool = False, long_running: bool = False):
    """Add -D/--table/-c/-e/-v to a click command and stash them in a :class:`CLIState`.

    Use as ``@common_options`` or ``@common_options(own_logging=True)`` (long-running
    commands that configure logging themselves, like workers). ``long_running``: a ``-D``
    URL with a password is moved out of the process's argv
    (:func:`~queue_core.cli.kit.argv_password.hide_url_from_argv`).
    """

    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args: Any, pq_database, pq_table, pq_config, pq_environment, pq_verbose, **kwargs: Any):
            ctx = click.get_current_context()
            state = state_of(ctx)
            _refuse_empty(ctx, pq_database=pq_database, pq_table=pq_table, pq_config=pq_config)
            _fill(state, ctx, pq_database, pq_table, pq_config, pq_environment, pq_verbose)
            remember_url(state.database)
            if long_running:
                hide_url_from_argv(ctx, state.database)
            setup_logging(state.verbose, own_logging=own_logging)
            return fn(*args, **kwargs)

        for opt in reversed(_option_decorators()):
            wrapper = opt(wrapper)
        return wrapper

    if f is not None:
        return decorate(f)
    return decorate


_FLAGS = {"pq_database": "-D/--database", "pq_table": "--table", "pq_config": "-c/--config"}


def _refuse_empty(ctx: click.Context, **values: str | None) -> None:
    """An empty environment variable counts as unset; an empty option is a mistake that must
    not silently mean the default database or table."""
    for param, value in values.items():
        if value is not None and not value.strip() and ctx.get_parameter_source(param) == _COMMAND_LINE:
            raise ConfigError(f"{_FLAGS[param]} must not be empty")


def _fill(state: CLIState, ctx: click.Context, database, table, config, environment, verbose) -> None:
    state.database = database or None
    state.table = table or None
    state.config_file = config or None
    state.environment = environment or "development"
    state.environment_explicit = ctx.get_parameter_source("pq_environment") == _COMMAND_LINE
    state.verbose = bool(verbose) or debug_env()


def _option_decorators() -> list[Callable]:
    return [
        click.option(
            "-D",
            "--database",
            "pq_database",
            metavar="URL",
            envvar="PQ_DATABASE_URL",
            show_envvar=True,
            help="SQLAlchemy database URL, e.g. postgresql+psycopg://user:pw@host/db (default: sqlite:///pq.db).",
        ),
        click.option(
            "--table",
            "pq_table",
            metavar="NAME",
            envvar="PQ_TABLE",
            show_envvar=True,
            help="Queue table name (default: pq_tasks).",
        ),
        click.option(
            "-c",
            "--config",
            "pq_config",
            metavar="FILE",
            envvar="PQ_CONFIG",
            show_envvar=True,
            help="TOML config file with one table per environment.",
        ),
        click.option(
            "-e",
            "--environment",
            "pq_environment",
            metavar="ENV",
            envvar="PQ_ENV",
            default="development",
            show_default=True,
            show_envvar=True,
            help="Table of the config file to use.",
        ),
        click.option(
            "-v",
            "--verbose",
            "pq_verbose",
            is_flag=True,
            default=False,
            help="Debug logging; show tracebacks of errors (also PQ_DEBUG=1).",
        ),
    ]
