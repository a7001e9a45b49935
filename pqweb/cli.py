"""``pqweb``: serve the dashboard. Takes the options of the other tools (-D/--database,
--table, -c/--config, -e/--environment, -v) and their environment variables.

The token that enables actions comes from ``PQWEB_TOKEN`` or the config file's ``web_token``,
never from the command line (a ``--token`` option is refused: argv is visible to every user
of the host). Actions stay off unless ``--allow-actions`` (or ``web_allow_actions``) asks.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import sys
from typing import Any

import click

from perfectsched.runner import open_scheduler
from queue_core import extras
from queue_core.cli.kit.exits import EXIT_CODES_HELP, exit_code_for
from queue_core.cli.kit.group import main_wrapper, report_error
from queue_core.cli.kit.options import CLIState, common_options, state_of
from queue_core.cli.kit.settings import open_queue, settings, short_lived_retries
from queue_core.errors import ConfigError

from .settings import EXTRA_KEYS, TOKEN_ENV, WebSettings

PROG = "pqweb"
log = logging.getLogger("pqweb")


class WebCommand(click.Command):
    """A command whose errors are one scrubbed stderr line and a documented exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        state = ctx.ensure_object(CLIState)
        state.prog = PROG
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort, click.UsageError):
            raise
        except KeyboardInterrupt:
            raise click.exceptions.Exit(0) from None
        except Exception as exc:  # noqa: BLE001 - every error becomes one line
            report_error(state, exc, str(exc) if str(exc) else type(exc).__name__)
            raise click.exceptions.Exit(exit_code_for(exc)) from None


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8080`` for IPv6) as (host, port); ConfigError when it is not."""
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--listen takes HOST:PORT (e.g. 127.0.0.1:8080), not {text!r}")
    return host, int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def refuse_token(value: Any) -> None:
    """ConfigError for a token given on the command line (every user of the host sees argv)."""
    if value is not None:
        raise ConfigError(
            f"the token is never taken from the command line: set {TOKEN_ENV} or web_token in the config file"
        )


@click.command(
    name=PROG, cls=WebCommand, epilog=EXIT_CODES_HELP, context_settings={"help_option_names": ["-h", "--help"]}
)
@click.option("--listen", default="127.0.0.1:8080", show_default=True, metavar="HOST:PORT", help="Where to serve.")
@click.option(
    "--allow-actions", is_flag=True, default=None, help=f"Let users logged in with the token ({TOKEN_ENV}) act."
)
@click.option(
    "--secure-cookie",
    is_flag=True,
    default=None,
    help="Mark the session cookie Secure: browsers send it over HTTPS only (config web_secure_cookie).",
)
@click.option(
    "--schedule-table",
    metavar="NAME",
    help="The schedule table shown (config schedule_table, env PQ_SCHEDULE_TABLE; default: pq_schedules).",
)
@click.option("--token", hidden=True)
@click.version_option(package_name="pq", prog_name=PROG, message="%(prog)s %(version)s")
@common_options(own_logging=True, long_running=True)
def cli(
    listen: str, allow_actions: bool | None, secure_cookie: bool | None, schedule_table: str | None, token: str | None
) -> None:
    """Serve the pq dashboard (read-only unless --allow-actions)."""
    refuse_token(token)
    host, port = parse_listen(listen)
    overrides = {
        "web_allow_actions": allow_actions,
        "web_secure_cookie": secure_cookie,
        "schedule_table": schedule_table or None,
    }
    cfg = settings(extra_keys=EXTRA_KEYS, overrides=overrides)
    web = web_settings(cfg)
    serve(cfg, web, host, port, verbose=state_of(None).verbose)


def web_settings(cfg: Any) -> WebSettings:
    """The dashboard's settings from ``cfg`` (options, environment, config file merged)."""
    return WebSettings(
        allow_actions=bool(cfg["web_allow_actions"]),
        token=os.environ.get(TOKEN_ENV) or cfg["web_token"],
        refresh=float(cfg["web_refresh"]),
        secure_cookie=bool(cfg["web_secure_cookie"]),
    )


def serve(cfg: Any, web: WebSettings, host: str, port: int, *, verbose: bool = False) -> None:
    """Run the dashboard of ``cfg``'s queue on ``host:port`` until interrupted."""
    for module in ("starlette", "jinja2", "uvicorn", "multipart", "itsdangerous"):
        extras.require(module, "pqweb")
    import uvicorn

    from .app import create_app

    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, stream=sys.stderr)
    if not is_loopback(host):
        log.warning("pqweb listens on %s, beyond this host: put it behind HTTPS and a firewall", host)
    with open_queue(cfg) as queue, open_scheduler(dict(cfg), **short_lived_retries(cfg)) as sched:
        click.echo(f"{PROG}: serving {queue.url} table {queue.table} on http://{host}:{port}/", err=True)
        uvicorn.run(
            create_app(queue, web, scheduler=sched),
            host=host,
            port=port,
            log_level="info" if verbose else "warning",
            access_log=verbose,
            server_header=False,
            proxy_headers=False,  # a client's address is its socket's: X-Forwarded-For is anyone's to write
        )


#: the console script: a ``-D`` URL holding a password leaves this process's argv at start
#: (``queue_core.cli.kit.argv_password``), as it does for the workers
main = main_wrapper(cli, PROG)
