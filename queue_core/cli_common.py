"""Plumbing shared by the three command-line tools: perfectqueue, perfectsched and pqflow.

Common options
--------------
Every command decorated with :func:`common_options` accepts, after the subcommand
(``perfectqueue list -D URL``):

  -D, --database URL      SQLAlchemy URL (env ``PQ_DATABASE_URL``)
  --table NAME            queue table (env ``PQ_TABLE``)
  -c, --config FILE       TOML config file, one table per environment (env ``PQ_CONFIG``)
  -e, --environment ENV   table of the config file to use (env ``PQ_ENV``; default development)
  -v, --verbose           debug logging, and a traceback with errors (also ``PQ_DEBUG=1``)

:func:`settings` merges the configuration lazily, highest precedence first:
CLI option > environment variable > config file section > defaults
(:data:`queue_core.config.DEFAULTS`). Every config key ``k`` can also be set with the
environment variable ``PQ_<K>`` (``PQ_ALIVE_TIME=60``), except ``url`` which is
``PQ_DATABASE_URL``.

Errors and exit codes
---------------------
A :class:`PQGroup` turns every error into ONE line on stderr, ``<prog>: error: <message>``,
with any database password replaced by ``***``, and exits with:

  0    success
  1    error (invalid argument, invalid JSON, task data too large, task already finished, ...)
  2    usage error (unknown option, missing argument; reported by click itself)
  3    already exists (AlreadyExistsError: a duplicate submit can be treated as done)
  4    not found (NotFoundError)
  5    database error or database unreachable (DatabaseError, SchemaError)
  6    configuration error (ConfigError: config file, database URL, table name, TARGET)
  130  interrupted (Ctrl-C)

With ``-v`` or ``PQ_DEBUG=1`` the traceback is logged as well.

Passwords and process titles
----------------------------
A long-running command (``run``) started with ``-D URL`` where URL holds a password re-executes
itself at once, with the URL moved into ``PQ_DATABASE_URL`` and the ``-D`` argument removed,
so the password is not left in ``/proc/<pid>/cmdline`` (readable by every local user through
``ps``) of the worker or its children; ``/proc/<pid>/environ`` is readable only by the same
user and root. The process keeps its pid. Since the option beats the environment variable,
which beats the config file, the precedence is unchanged. See :func:`hide_url_from_argv`.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import logging
import math
import os
import re
import sys
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, quote_plus

import click

from . import config as config_mod
from .errors import (
    AlreadyExistsError,
    ConfigError,
    DatabaseError,
    NotFoundError,
    TaskError,
)

__all__ = [
    "EXIT_OK", "EXIT_ERROR", "EXIT_USAGE", "EXIT_EXISTS", "EXIT_NOT_FOUND", "EXIT_DATABASE",
    "EXIT_CONFIG", "EXIT_INTERRUPTED", "EXIT_CODES_HELP", "CLIError", "CLIState", "PQGroup",
    "Settings", "common_options", "settings", "open_queue", "parse_json_object", "parse_time",
    "format_time", "print_table", "print_json", "json_text", "printable", "scrub", "main_wrapper",
    "exit_code_for", "STRICT_INT",
]

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_EXISTS = 3
EXIT_NOT_FOUND = 4
EXIT_DATABASE = 5
EXIT_CONFIG = 6
EXIT_INTERRUPTED = 130

#: For a group's ``epilog`` (``\b`` keeps click from rewrapping the lines).
EXIT_CODES_HELP = (
    "\b\nExit codes:\n"
    "  0 ok, 1 error, 2 usage error, 3 already exists, 4 not found,\n"
    "  5 database error/unreachable, 6 configuration error, 130 interrupted\n"
    "\b\nEnvironment: PQ_DATABASE_URL, PQ_TABLE, PQ_CONFIG, PQ_ENV, PQ_DEBUG=1, PQ_<CONFIG_KEY>"
)

#: CLI commands are short-lived: fail in seconds when the database is unreachable.
CLI_MAX_RETRY_COUNT = 2

_ENV_NAMES = {"url": "PQ_DATABASE_URL"}


def env_name(key: str) -> str:
    """The environment variable of config key ``key``."""
    return _ENV_NAMES.get(key, "PQ_" + key.upper())


# -- errors -------------------------------------------------------------------------------
class CLIError(click.ClickException):
    """A refused command-line input (exit code 1 unless ``exit_code`` is given).

    Inside a :class:`PQGroup` it is printed as the usual one ``<prog>: error:`` line.
    """

    exit_code = EXIT_ERROR

    def __init__(self, message: str, exit_code: int | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


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


# -- password scrubbing -----------------------------------------------------------------------
_secrets: set[str] = set()
_URL_PASSWORD_RE = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s'\"]*:)[^@/\s'\"]+@")


def remember_url(url: Any) -> None:
    """Note the password of ``url`` so :func:`scrub` removes it from any later message."""
    if not url:
        return
    try:
        from sqlalchemy.engine import make_url

        pw = make_url(str(url)).password
    except Exception:  # noqa: BLE001 - unparseable: the regex in scrub still applies
        pw = None
    if pw:
        pw = str(pw)
        _secrets.update({pw, quote(pw, safe=""), quote_plus(pw)})


def scrub(text: str, urls: Iterable[Any] = ()) -> str:
    """``text`` with database passwords replaced by ``***``.

    Removes the passwords of ``urls`` and of every URL given to :func:`remember_url`, and
    the password part of anything that looks like ``scheme://user:password@``.
    """
    for url in urls:
        remember_url(url)
    for secret in sorted(_secrets, key=len, reverse=True):
        if secret and secret != "***":
            text = text.replace(secret, "***")
    return _URL_PASSWORD_RE.sub(r"\1***@", text)


def _one_line(text: str) -> str:
    lines = [ln.strip() for ln in str(text).strip().splitlines() if ln.strip()]
    return "; ".join(lines)


# -- logging --------------------------------------------------------------------------------
class _StderrHandler(logging.Handler):
    """Writes to the *current* ``sys.stderr`` (which test runners swap) and scrubs passwords."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(scrub(self.format(record)) + "\n")
            sys.stderr.flush()
        except Exception:  # noqa: BLE001
            self.handleError(record)


_saved_root_level: int | None = None


def _debug_env() -> bool:
    return os.environ.get("PQ_DEBUG", "").strip().lower() in ("1", "true", "yes", "on")


def setup_logging(verbose: bool, *, own_logging: bool = False) -> None:
    """Debug logging to stderr when verbose; otherwise keep library warnings off stderr
    (a failing command prints exactly one line). ``own_logging``: the command (a worker)
    configures logging itself; only set the level."""
    global _saved_root_level
    root = logging.getLogger()
    if verbose:
        if not own_logging and not any(isinstance(h, _StderrHandler) for h in root.handlers):
            h = _StderrHandler()
            h.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
            root.addHandler(h)
        if _saved_root_level is None:
            _saved_root_level = root.level
        root.setLevel(logging.DEBUG)
        return
    # A previous verbose command in this process (tests, embedding): undo its setup.
    for h in [h for h in root.handlers if isinstance(h, _StderrHandler)]:
        root.removeHandler(h)
    if _saved_root_level is not None:
        root.setLevel(_saved_root_level)
        _saved_root_level = None
    if own_logging:
        return
    for name in ("queue_core", "perfectsched", "pqflow"):
        lg = logging.getLogger(name)
        if not any(isinstance(h, logging.NullHandler) for h in lg.handlers):
            lg.addHandler(logging.NullHandler())


# -- the context object -------------------------------------------------------------------------
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


class Settings(dict):
    """The merged configuration; ``explicit`` holds the keys set by option, env or file."""

    explicit: frozenset = frozenset()
    sources: dict

    def __init__(self, *args: Any, explicit: Iterable[str] = (), sources: Mapping | None = None, **kw: Any):
        super().__init__(*args, **kw)
        self.explicit = frozenset(explicit)
        self.sources = dict(sources or {})


def _state_of(ctx_or_obj: Any) -> CLIState:
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
    URL with a password is moved out of the process's argv (:func:`hide_url_from_argv`).
    """

    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args: Any, pq_database, pq_table, pq_config, pq_environment, pq_verbose, **kwargs: Any):
            ctx = click.get_current_context()
            state = _state_of(ctx)
            for param, value, flag in (("pq_database", pq_database, "-D/--database"), ("pq_table", pq_table, "--table"),
                                       ("pq_config", pq_config, "-c/--config")):
                # An empty environment variable counts as unset; an empty option is a mistake
                # that must not silently mean the default database or table.
                if value is not None and not value.strip() and \
                        ctx.get_parameter_source(param) == click.core.ParameterSource.COMMANDLINE:
                    raise ConfigError(f"{flag} must not be empty")
            state.database = pq_database or None
            state.table = pq_table or None
            state.config_file = pq_config or None
            state.environment = pq_environment or "development"
            src = ctx.get_parameter_source("pq_environment")
            state.environment_explicit = src == click.core.ParameterSource.COMMANDLINE
            state.verbose = bool(pq_verbose) or _debug_env()
            remember_url(state.database)
            if long_running:
                hide_url_from_argv(ctx, state)
            setup_logging(state.verbose, own_logging=own_logging)
            return fn(*args, **kwargs)

        options = [
            click.option("-D", "--database", "pq_database", metavar="URL", envvar="PQ_DATABASE_URL",
                         show_envvar=True,
                         help="SQLAlchemy database URL, e.g. postgresql+psycopg://user:pw@host/db "
                              "(default: sqlite:///pq.db)."),
            click.option("--table", "pq_table", metavar="NAME", envvar="PQ_TABLE", show_envvar=True,
                         help="Queue table name (default: pq_tasks)."),
            click.option("-c", "--config", "pq_config", metavar="FILE", envvar="PQ_CONFIG", show_envvar=True,
                         help="TOML config file with one table per environment."),
            click.option("-e", "--environment", "pq_environment", metavar="ENV", envvar="PQ_ENV",
                         default="development", show_default=True, show_envvar=True,
                         help="Table of the config file to use."),
            click.option("-v", "--verbose", "pq_verbose", is_flag=True, default=False,
                         help="Debug logging; show tracebacks of errors (also PQ_DEBUG=1)."),
        ]
        for opt in reversed(options):
            wrapper = opt(wrapper)
        return wrapper

    if f is not None:
        return decorate(f)
    return decorate


# -- settings -----------------------------------------------------------------------------------
def settings(ctx_or_obj: Any = None, extra_keys: Mapping[str, tuple] | None = None, *,
             overrides: Mapping[str, Any] | None = None) -> Settings:
    """The configuration of this command: defaults < config file < env vars < CLI options.

    ``extra_keys``: more key specs ``{key: (default, kind, help)}`` (perfectsched, pqflow);
    ``overrides``: values of command-specific CLI options (``None`` values are ignored).
    The config file is re-read on every call (so this serves as a reload function too).
    """
    state = _state_of(ctx_or_obj)
    extra = dict(extra_keys or {})
    known = {**config_mod.DEFAULTS, **extra}

    file_values: dict = {}
    if state.config_file:
        file_values = config_mod.load_file(state.config_file, state.environment)
        remember_url(file_values.get("url"))
        unknown = [k for k in file_values if k not in known]
        if unknown:
            raise ConfigError(
                f"unknown config key {unknown[0]!r} in [{state.environment}] of {state.config_file}"
                + (f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else "")
            )
    elif state.environment_explicit and state.environment != "development":
        raise ConfigError(f"-e/--environment {state.environment} needs a config file (-c FILE or PQ_CONFIG)")

    env_values: dict = {}
    for key in known:
        if key in ("url", "table"):
            continue  # read by click (-D / --table envvar) so that the option beats them
        raw = os.environ.get(env_name(key))
        if raw is not None and raw.strip() != "":
            env_values[key] = raw.strip()

    cli_values: dict = {}
    if state.database:
        cli_values["url"] = state.database
    if state.table:
        cli_values["table"] = state.table
    for key, value in (overrides or {}).items():
        if key not in known:
            raise ConfigError(f"unknown config key {key!r}")
        if value is not None:
            cli_values[key] = value

    merged: dict = {}
    sources: dict = {}
    for name, layer in (("file", file_values), ("env", env_values), ("cli", cli_values)):
        for k, v in layer.items():
            merged[k] = v
            sources[k] = name

    core = config_mod.build({k: v for k, v in merged.items() if k in config_mod.DEFAULTS})
    out = Settings(core, explicit=merged.keys(), sources=sources)
    for key, spec in extra.items():
        if key in config_mod.DEFAULTS:
            continue
        out[key] = config_mod.check_value(key, merged[key], spec) if key in merged else spec[0]
    remember_url(out.get("url"))
    return out


def open_queue(cfg: Mapping[str, Any]):
    """Open the queue of ``cfg`` (extra keys ignored) for a short-lived command.

    ``max_retry_count`` is lowered to 2 unless it was set explicitly, so an unreachable
    database fails in seconds instead of retrying for long.
    """
    import queue_core

    kwargs = {k: v for k, v in cfg.items() if k in config_mod.DEFAULTS}
    explicit = getattr(cfg, "explicit", None)
    default_retries = config_mod.DEFAULTS["max_retry_count"][0]
    if explicit is not None:
        lower = "max_retry_count" not in explicit
    else:
        lower = kwargs.get("max_retry_count", default_retries) == default_retries
    if lower:
        kwargs["max_retry_count"] = min(CLI_MAX_RETRY_COUNT, kwargs.get("max_retry_count", default_retries))
    return queue_core.open(**kwargs)


# -- the group ---------------------------------------------------------------------------------
class PQGroup(click.Group):
    """A click group that reports errors as one line and exits with the documented codes.

    ``aliases`` maps hidden alternative command names to real ones
    (``{"cancel_request": "cancel"}``).
    """

    aliases: dict[str, str]

    def __init__(self, *args: Any, aliases: Mapping[str, str] | None = None, **kwargs: Any):
        kwargs.setdefault("context_settings", {"help_option_names": ["-h", "--help"]})
        super().__init__(*args, **kwargs)
        self.aliases = dict(aliases or {})

    def get_command(self, ctx: click.Context, cmd_name: str):
        cmd = super().get_command(ctx, cmd_name)
        if cmd is None and cmd_name in self.aliases:
            cmd = super().get_command(ctx, self.aliases[cmd_name])
        return cmd

    def invoke(self, ctx: click.Context) -> Any:
        state = ctx.ensure_object(CLIState)
        if state.prog is None:
            state.prog = self.name or ctx.info_name or "pq"
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort):
            raise
        except click.UsageError:
            raise  # click prints usage and exits 2
        except KeyboardInterrupt:
            raise click.exceptions.Exit(EXIT_INTERRUPTED) from None
        except click.ClickException as exc:
            report_error(state, exc, exc.format_message())
            raise click.exceptions.Exit(exc.exit_code) from None
        except BrokenPipeError:
            _silence_stdout()
            raise click.exceptions.Exit(EXIT_ERROR) from None
        except Exception as exc:  # noqa: BLE001 - every error becomes one line
            if isinstance(exc, TaskError):
                message = str(exc)
            else:
                message = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            report_error(state, exc, message)
            raise click.exceptions.Exit(exit_code_for(exc)) from None


def report_error(state: CLIState, exc: BaseException, message: str) -> None:
    prog = state.prog or "pq"
    if state.verbose or _debug_env():
        import traceback

        details = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        click.echo(printable(scrub(details.rstrip("\n"), [state.database])), err=True)
    text = printable(scrub(_one_line(message), [state.database]))
    click.echo(f"{prog}: error: {text}", err=True)


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except Exception:  # noqa: BLE001
        pass


def main_wrapper(group: click.Command, prog_name: str | None = None) -> Callable[..., Any]:
    """A plain ``main(argv=None)`` for a console script."""

    def main(argv: list[str] | None = None) -> Any:
        global _process_args
        # Only a command parsed from this process's own argv may re-execute it.
        _process_args = list(sys.argv[1:]) if argv is None else None
        try:
            return group.main(args=argv, prog_name=prog_name or group.name)
        except BrokenPipeError:  # e.g. `perfectqueue list | head`
            _silence_stdout()
            sys.exit(EXIT_ERROR)

    main.__doc__ = f"Run the {prog_name or group.name} command line."
    return main


class StrictInt(click.ParamType):
    """An integer written plainly: optional sign and ASCII digits.

    click's INT takes whatever ``int()`` takes: " 7", "1_000", "٣" (an Arabic-Indic three).
    Options that go into the database say exactly what they mean instead.
    """

    name = "integer"
    _PLAIN = re.compile(r"[+-]?[0-9]+", re.ASCII)

    def convert(self, value: Any, param: Any, ctx: Any) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and self._PLAIN.fullmatch(value):
            return int(value)
        self.fail(f"{value!r} is not a plain integer (digits, optionally signed)", param, ctx)


STRICT_INT = StrictInt()


# -- keeping the password out of process titles ---------------------------------------------
#: this process's arguments when a console script parses them (set by ``main_wrapper``);
#: None in-process (tests, embedding): nothing is ever re-executed then
_process_args: list[str] | None = None


def url_password(url: Any) -> str | None:
    """The password of database URL ``url`` (None without one, or when it does not parse)."""
    if not url:
        return None
    try:
        from sqlalchemy.engine import make_url

        pw = make_url(str(url)).password
    except Exception:  # noqa: BLE001 - not a URL: the command will report it
        return None
    return str(pw) if pw else None


def _option_table(command: click.Command) -> dict[str, tuple[str, bool]]:
    """``{"-D": ("pq_database", True), "--burst": ("burst", False), ...}``: name, takes a value."""
    table: dict[str, tuple[str, bool]] = {}
    for p in command.params:
        if isinstance(p, click.Option):
            takes_value = not (p.is_flag or p.count)
            for opt in (*p.opts, *p.secondary_opts):
                table[opt] = (p.name or "", takes_value)
    return table


def without_option(args: list[str], group: click.Command, command: click.Command, name: str) -> tuple[list[str], int]:
    """``args`` (``[<group options>] SUBCOMMAND [...]``) without every occurrence of the option
    whose parameter is ``name`` and its value, tokenised as click does (``-D URL``, ``-DURL``,
    ``-vD URL``, ``--database URL``, ``--database=URL``; nothing after ``--``).
    Returns the new list and how many occurrences were removed."""
    out: list[str] = []
    removed = 0
    table = _option_table(group)
    in_command = False
    i = 0
    while i < len(args):
        tok = args[i]
        i += 1
        if tok == "--":
            out.append(tok)
            out.extend(args[i:])
            break
        if not tok.startswith("-") or tok == "-":
            out.append(tok)
            if not in_command:  # the subcommand's name
                in_command, table = True, _option_table(command)
            continue
        head, eq, _value = tok.partition("=")
        if head in table and (head.startswith("--") or len(head) > 2):  # a long option
            pname, takes_value = table[head]
            consumes_next = takes_value and not eq and i < len(args)
            if pname == name:
                removed += 1
            else:
                out.append(tok)
                if consumes_next:
                    out.append(args[i])
            if consumes_next:
                i += 1
            continue
        if tok.startswith("--"):  # unknown long option: click refused it already; keep as is
            out.append(tok)
            continue
        # short options, possibly clustered: -v, -vD URL, -DURL
        kept = "-"
        for j, ch in enumerate(tok[1:], start=2):
            spec = table.get("-" + ch)
            if spec is None:  # not ours to understand: keep the rest untouched
                kept += tok[j - 1:]
                break
            pname, takes_value = spec
            if not takes_value:
                kept += ch
                continue
            rest = tok[j:]
            if pname == name:
                removed += 1
                if not rest and i < len(args):
                    i += 1  # the value is the next argument
            else:
                kept += ch + rest
                if not rest and i < len(args):
                    out.append(kept)
                    kept = ""
                    out.append(args[i])
                    i += 1
            break
        if kept not in ("", "-"):
            out.append(kept)
    return out, removed


def hide_url_from_argv(ctx: click.Context, state: CLIState) -> None:
    """Re-execute this command without a password in its argv.

    When ``-D URL`` was given on the command line, URL has a password and this process was
    started as a console script (``perfectqueue``, ``python -m queue_core.cli``, ...), replace
    the process (``execve``: same pid) by the same command with ``-D`` removed and the URL in
    ``PQ_DATABASE_URL``. The option beats the variable and the variable beats the config file,
    so the same URL is used. Does nothing otherwise, or when anything looks unusual.
    """
    if os.name != "posix" or _process_args is None or sys.argv[1:] != _process_args or not sys.executable:
        return
    if ctx.get_parameter_source("pq_database") != click.core.ParameterSource.COMMANDLINE:
        return
    if not url_password(state.database):
        return
    root = ctx.find_root().command
    args, removed = without_option(_process_args, root, ctx.command, "pq_database")
    orig = list(getattr(sys, "orig_argv", []) or [])
    n = len(_process_args)
    if not removed or len(orig) <= n or (n and orig[-n:] != _process_args):
        return
    interpreter_args = orig[1:len(orig) - n]  # interpreter options and the script (or -m MODULE)
    env = dict(os.environ)
    env["PQ_DATABASE_URL"] = str(state.database)
    logging.getLogger("queue_core.cli").debug("re-executing without the database URL in argv")
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, *interpreter_args, *args], env)
    except OSError as exc:  # keep running as we are: a visible password beats no worker
        logging.getLogger("queue_core.cli").warning("could not re-execute without the URL in argv: %s", exc)


# -- parsing helpers ------------------------------------------------------------------------------
_JSON_TYPE_NAMES = {list: "a list", str: "a string", int: "a number", float: "a number",
                    bool: "a boolean", type(None): "null"}


def _reject_constant(name: str) -> Any:
    raise ValueError(name)


def parse_json_object(text: str, what: str = "DATA") -> dict:
    """Parse a JSON object given on the command line (``@FILE`` reads a file, ``-`` stdin)."""
    if text is None:
        return {}
    if text == "-":
        text = sys.stdin.read()
    elif text.startswith("@"):
        path = text[1:]
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except OSError as exc:
            raise CLIError(f"cannot read {what} file {path}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise CLIError(f"{what} file {path} is not UTF-8 text") from None
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise CLIError(f"{what} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except ValueError as exc:
        raise CLIError(f"{what} is not valid JSON: {exc} is not allowed") from None
    except RecursionError:
        raise CLIError(f"{what} is nested too deeply") from None
    if not isinstance(value, dict):
        kind = _JSON_TYPE_NAMES.get(type(value), type(value).__name__)
        raise CLIError(f"{what} must be a JSON object like '{{\"a\": 1}}', got {kind}")
    return value


_NUMBER_RE = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


def parse_time(text: str, what: str = "TIME") -> float:
    """Epoch seconds (``1795255200``, ``1795255200.5``) or ISO 8601 with an offset
    (``2026-11-21T10:00:00Z``, ``2026-11-21T10:00:00+09:00``)."""
    s = str(text).strip()
    if _NUMBER_RE.match(s):
        v = float(s)
        if not math.isfinite(v) or v < 0:
            raise CLIError(f"{what} {text!r} is not a valid epoch time")
        return v
    iso = s[:-1] + "+00:00" if s[-1:] in ("Z", "z") else s
    try:
        dt = _dt.datetime.fromisoformat(iso)
    except ValueError:
        raise CLIError(
            f"{what} {text!r} is neither epoch seconds nor an ISO 8601 time like 2026-11-21T10:00:00Z"
        ) from None
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise CLIError(
            f"{what} {text!r} has no UTC offset; add one, like {s}Z or {s}+09:00"
        )
    return dt.timestamp()


def _tzinfo(tz: Any) -> _dt.tzinfo:
    if tz is None:
        return _dt.UTC
    if isinstance(tz, _dt.tzinfo):
        return tz
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(str(tz))
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"unknown time zone {tz!r}") from None


def format_time(ts: float | None, tz: Any = None) -> str:
    """``ts`` (epoch seconds) as ISO 8601 with offset, in zone ``tz`` (name or tzinfo) or UTC."""
    if ts is None:
        return "-"
    try:
        dt = _dt.datetime.fromtimestamp(float(ts), _tzinfo(tz))
    except (OverflowError, OSError, ValueError):
        return str(ts)
    spec = "seconds" if dt.microsecond == 0 else "milliseconds"
    return dt.isoformat(timespec=spec)


# -- output helpers --------------------------------------------------------------------------------
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def printable(text: str) -> str:
    """``text`` that any UTF-8 stream accepts: a lone surrogate (which Python strings, and so
    task data or error texts, may hold) becomes a ``\\udcff`` escape instead of making the
    output fail half-way with UnicodeEncodeError."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def json_text(obj: Any, **kwargs: Any) -> str:
    """JSON text as compact as asked, not ASCII-escaped unless it has to be: data holding a
    lone surrogate is written with ``\\uXXXX`` escapes, so it parses back to the same value."""
    text = json.dumps(obj, ensure_ascii=False, default=_json_default, **kwargs)
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return json.dumps(obj, ensure_ascii=True, default=_json_default, **kwargs)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    text = value if isinstance(value, str) else str(value)
    if text == "":
        return '""'
    return printable(_CONTROL_RE.sub(lambda m: repr(m.group())[1:-1], text))


def _width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in ("W", "F") else
               0 if unicodedata.combining(ch) else 1 for ch in text)


def print_table(rows: list[dict], columns: list[str], *, file: Any = None) -> None:
    """Plain text table: a header line, then one aligned line per row (None shown as -)."""
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [_width(c) for c in columns]
    for line in cells:
        widths = [max(w, _width(v)) for w, v in zip(widths, line)]

    def fmt(values: list[str]) -> str:
        parts = [v + " " * (w - _width(v)) for v, w in zip(values, widths)]
        return "  ".join(parts).rstrip()

    click.echo(fmt(list(columns)), file=file)
    for line in cells:
        click.echo(fmt(line), file=file)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    if isinstance(obj, (bytes, bytearray)):
        return obj.decode("utf-8", "replace")
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    return str(obj)


def print_json(obj: Any, *, file: Any = None) -> None:
    """Pretty JSON on stdout (UTF-8, not ASCII-escaped)."""
    click.echo(json_text(obj, indent=2), file=file)


# -- worker commands (perfectqueue run, pqflow run) -----------------------------------------------
def worker_options(fn: Callable) -> Callable:
    """The options of a worker command: -I, -r, --processors, ..., --log."""
    options = [
        click.option("-I", "--include", "include", multiple=True, metavar="PATH", help="Add PATH to the import path."),
        click.option("-r", "--require", "require", multiple=True, metavar="MODULE",
                     help="Import MODULE (or FILE.py) first."),
        click.option("--processors", type=click.IntRange(min=1), metavar="N", help="Processors per worker."),
        click.option("--processor-type", type=click.Choice(["process", "thread"]), help="Child processes or threads."),
        click.option("--poll-interval", type=click.FloatRange(min=0, min_open=True), metavar="S",
                     help="Idle wait between polls (seconds)."),
        click.option("--burst", is_flag=True, help="Exit when the queue has no runnable task."),
        click.option("--max-request-per-child", type=click.IntRange(min=1), metavar="N",
                     help="Recycle a child process after N tasks."),
        click.option("--log", "log_file", metavar="FILE", help="Log to FILE (reopened on SIGUSR2)."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def run_worker_command(target: str, *, include, require, processors, processor_type, poll_interval, burst,
                       max_request_per_child, log_file, load: Callable | None = None,
                       check: Callable[[Any], None] | None = None) -> None:
    """Body of a worker command: settings first, then the target, then the worker (exits)."""
    state = click.get_current_context().obj
    overrides = {
        "processors": processors, "processor_type": processor_type, "poll_interval": poll_interval,
        "max_request_per_child": max_request_per_child, "log": log_file,
        "log_level": "DEBUG" if getattr(state, "verbose", False) else None,
    }
    cfg = settings(state, overrides=overrides)  # config errors first, before importing anything
    try:
        from .worker import load_target, run_worker
    except ImportError as exc:
        raise ConfigError(f"the worker is not available in this installation ({exc})") from None
    handler = (load or load_target)(target, include=list(include), require=list(require))
    if check is not None:
        check(handler)
    code = run_worker(handler, dict(cfg), burst=burst,
                      config_loader=lambda: dict(settings(state, overrides=overrides)))
    sys.exit(code or 0)
