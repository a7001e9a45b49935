"""The HTTP server of ``perfectqueue metrics --listen``: the standard library's WSGI server on an
IPv4 or IPv6 address, without a log line per scrape. A module of its own, imported only by that
command: no other command (a worker least of all) pays for importing ``http.server``."""

from __future__ import annotations

import socket
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the signature wsgiref calls
        pass  # a scrape every 15 s is not worth a log line


class _Server(WSGIServer):
    """A WSGI server on an IPv4 or IPv6 address, as --listen names it."""

    def __init__(self, address, handler, bind_and_activate=True):
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, handler, bind_and_activate)


def http_server(host: str, port: int, app) -> WSGIServer:
    """A server of ``app`` bound to ``host``:``port`` (OSError when it cannot bind)."""
    return make_server(host, port, app, server_class=_Server, handler_class=_QuietHandler)
