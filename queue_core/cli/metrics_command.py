"""``perfectqueue metrics``: the Prometheus metrics of the queue, served over HTTP (``--listen``)
or printed once (``--once``). Registered on the ``perfectqueue`` group by :mod:`queue_core.cli.main`."""

from __future__ import annotations

import re
import signal

import click

from ..worker.service import Intent, Signals
from .kit.exits import CLIError
from .kit.options import common_options
from .kit.settings import open_queue, settings

_LISTEN = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]{1,253}):([0-9]{1,5})$")


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9187`` for IPv6) as (host, port); CLIError (usage) otherwise."""
    m = _LISTEN.match(text)
    if m is None or not 0 < int(m[2]) < 65536:
        raise CLIError(f"--listen {text[:80]!r} is not HOST:PORT (e.g. 127.0.0.1:9187)", 2)
    return m[1].strip("[]"), int(m[2])


@click.command(short_help="Serve (or print) the Prometheus metrics.")
@click.option("--listen", default="127.0.0.1:9187", show_default=True, help="HOST:PORT to serve /metrics on.")
@click.option("--once", is_flag=True, help="Print the metrics once on stdout and exit.")
@click.option("--schedule-table", default=None, help="The schedule table whose lag to report (default pq_schedules).")
@common_options
def metrics(listen: str, once: bool, schedule_table: str | None) -> None:
    """Serve the metrics of the queue (tasks by status, oldest waiting age, started/finished/
    retried counters, wait and run histograms, workers, paused queues, schedule lag, workflow runs)
    in Prometheus's text format until SIGTERM or Ctrl-C."""
    from ..ops import metrics as metrics_mod
    from ..ops.metrics_http import http_server

    metrics_mod.check_installed()

    host, port = parse_listen(listen)
    options = {"schedule_table": schedule_table}
    with open_queue(settings()) as q:
        if once:
            click.echo(metrics_mod.exposition(q, options).decode(), nl=False)
            return
        app = metrics_mod.wsgi_app(q, options)
        try:
            server = http_server(host, port, app)
        except OSError as exc:
            raise CLIError(f"cannot listen on {listen}: {exc.strerror or exc}", 1) from None

        stop = {Intent.STOP: server.shutdown, Intent.STOP_NOW: server.shutdown}
        signals = Signals({signal.SIGTERM: Intent.STOP, signal.SIGINT: Intent.STOP}, stop).act_in_thread()
        click.echo(f"serving metrics on http://{listen}/metrics", err=True)
        try:
            server.serve_forever(poll_interval=0.5)
        finally:
            signals.close()
            server.server_close()


COMMANDS = (metrics,)
