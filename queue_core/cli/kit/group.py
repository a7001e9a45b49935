"""The click group of each tool: every error becomes one scrubbed line and a documented exit code
(:mod:`queue_core.cli.kit.exits`), and ``main`` for its console script."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable, Mapping
from typing import Any

import click

from ...errors import TaskError
from .argv_password import set_process_args
from .exits import EXIT_ERROR, EXIT_INTERRUPTED, exit_code_for
from .options import CLIState
from .output import printable
from .passwords import forget_urls, scrub
from .stderr_logging import debug_env


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

    def main(self, *args: Any, **kwargs: Any) -> Any:
        forget_urls()  # an invocation masks its own URLs' secrets, remembered from here on
        return super().main(*args, **kwargs)

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
        except BrokenPipeError:
            _silence_stdout()
            raise click.exceptions.Exit(EXIT_ERROR) from None
        except Exception as exc:  # noqa: BLE001 - every error becomes one line
            report_error(state, exc, _message_of(exc))
            raise click.exceptions.Exit(exit_code_for(exc)) from None


def _message_of(exc: Exception) -> str:
    if isinstance(exc, click.ClickException):
        return exc.format_message()
    if isinstance(exc, TaskError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def report_error(state: CLIState, exc: BaseException, message: str) -> None:
    """Print ``<prog>: error: <message>`` (and the traceback when verbose), passwords scrubbed."""
    prog = state.prog or "pq"
    if state.verbose or debug_env():
        details = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        click.echo(printable(scrub(details.rstrip("\n"), [state.database])), err=True)
    text = printable(scrub(_one_line(message), [state.database]))
    click.echo(f"{prog}: error: {text}", err=True)


def _one_line(text: str) -> str:
    lines = [ln.strip() for ln in str(text).strip().splitlines() if ln.strip()]
    return "; ".join(lines)


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except Exception:  # noqa: BLE001
        pass


def main_wrapper(group: click.Command, prog_name: str | None = None) -> Callable[..., Any]:
    """A plain ``main(argv=None)`` for a console script."""

    def main(argv: list[str] | None = None) -> Any:
        # Only a command parsed from this process's own argv may re-execute it.
        set_process_args(list(sys.argv[1:]) if argv is None else None)
        try:
            return group.main(args=argv, prog_name=prog_name or group.name)
        except BrokenPipeError:  # e.g. `perfectqueue list | head`
            _silence_stdout()
            sys.exit(EXIT_ERROR)

    main.__doc__ = f"Run the {prog_name or group.name} command line."
    return main
