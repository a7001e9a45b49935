"""Every operation of the Store interface (queue_core/store/protocol.py) is called by a test of this
folder, which runs on the three databases: an operation added to the protocol without one fails here."""

from __future__ import annotations

import ast
from pathlib import Path

from queue_core.store import protocol

HERE = Path(__file__).resolve().parent


def operations(proto: type) -> set[str]:
    """The operations a protocol lists (its public methods, those of its bases included)."""
    return {n for n in dir(proto) if not n.startswith("_") and callable(getattr(proto, n))}


def called_methods(sources: list[str]) -> set[str]:
    """The names of the methods ``sources`` call (``x.name(...)``)."""
    found: set[str] = set()
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                found.add(node.func.attr)
    return found


def test_every_store_operation_has_a_conformance_test():
    called = called_methods([p.read_text() for p in HERE.glob("test_*.py")])
    for proto in (protocol.Store, protocol.ScheduleStore):
        assert sorted(operations(proto) - called) == [], f"{proto.__name__} operations no conformance test calls"


def test_the_check_sees_an_operation_no_test_calls():
    sources = ["def test(s):\n    s.task_get('k')\n    x = s.task_list\n"]
    assert called_methods(sources) == {"task_get"}
    assert {"task_get", "task_claim"} <= operations(protocol.Store)
    assert "tables_init" in operations(protocol.ScheduleStore)  # from the Tables base
