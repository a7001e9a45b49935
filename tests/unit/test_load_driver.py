"""``store.database.load_driver``: a worker's supervisor imports its database's driver before it
forks (its processors inherit the modules), without connecting, and quietly for a URL it cannot
use (opening the database reports that)."""

from __future__ import annotations

import subprocess
import sys

import pytest

CHECK = """
import socket, sys
connects = []
socket.socket.connect = lambda self, address: connects.append(address)
socket.create_connection = lambda address, *a, **k: connects.append(address)
from queue_core.store.database import load_driver
assert {module!r} not in sys.modules
load_driver({url!r})
assert {module!r} in sys.modules, sorted(sys.modules)
assert connects == [], connects
if {module!r} == "pymysql":  # and PyMySQL's TLS context, which each connection would build again
    from queue_core.store import pymysql_tls
    assert len(pymysql_tls._preferred) == 1, pymysql_tls._preferred
"""


@pytest.mark.parametrize(
    ("url", "module"),
    [
        ("mysql+pymysql://u:secret@192.0.2.1:3306/x", "pymysql"),  # TEST-NET-1: nothing answers there
        ("postgresql+psycopg://u:secret@192.0.2.1:5432/x", "psycopg"),
        ("sqlite:////nonexistent/dir/pq.db", "sqlite3"),
    ],
)
def test_the_driver_is_imported_without_connecting(url, module):
    if module == "sqlite3":
        module = "queue_core.store.sqlite"  # sqlite3 itself comes with SQLAlchemy; our dialect does not
    out = subprocess.run([sys.executable, "-c", CHECK.format(url=url, module=module)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "" and "secret" not in out.stderr


@pytest.mark.parametrize("url", ["nonsense://", "mysql+nodriver://x/y", "not a url at all", "oracle://u:p@h/x", None])
def test_a_url_it_cannot_use_is_left_to_the_open(url):
    from queue_core.store.database import load_driver

    assert load_driver(url) is None
