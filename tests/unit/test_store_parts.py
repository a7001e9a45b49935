"""The operations a store names for the parts it is composed of (``store/parts.py`` ``PartOp``)
exist on those parts with the signatures the Store protocol lists. mypy cannot see through the
descriptor (it answers ``Any``), so this is the check that a part and the protocol agree."""

from __future__ import annotations

import inspect

import queue_core
from queue_core.store import protocol
from queue_core.store.parts import PartOp
from queue_core.store.tasks import SqlStore


def part_operations() -> dict[str, PartOp]:
    return {n: v for n, v in vars(SqlStore).items() if isinstance(v, PartOp)}


def shape(fn) -> list[tuple]:
    """What a caller relies on: each parameter's name, kind, annotation and whether it has a default."""
    params = list(inspect.signature(fn).parameters.values())[1:]  # self
    return [(p.name, p.kind, str(p.annotation), p.default is not p.empty) for p in params]


def mismatches(store, protocol_class: type) -> list[str]:
    out = []
    for name, op in part_operations().items():
        part = getattr(store, op.part)
        method = getattr(type(part), name, None)
        if method is None:
            out.append(f"{name}: the part {op.part} has no such method")
        elif shape(method) != shape(getattr(protocol_class, name)):
            out.append(f"{name}: {shape(method)} != {shape(getattr(protocol_class, name))}")
    return out


def test_every_part_operation_is_a_method_of_its_part_as_the_protocol_lists_it():
    store = queue_core.open("sqlite://", "t").store  # in memory: nothing is read
    assert len(part_operations()) >= 40
    assert mismatches(store, protocol.Store) == []
    assert store.run_read.__self__ is store.runs and store.tag_change.__self__ is store.tags


def test_the_check_sees_a_part_method_whose_signature_differs():
    store = queue_core.open("sqlite://", "t").store

    class Listed(protocol.Store):  # the protocol with one operation listed differently
        def worker_sweep(self, silent_since: int, also: bool = ...) -> int: ...

    found = mismatches(store, Listed)
    assert len(found) == 1 and found[0].startswith("worker_sweep:")
