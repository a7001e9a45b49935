"""How a store is composed of parts: an operation of a part, reached on the store by its name."""

from __future__ import annotations

from typing import Any


class PartOp:
    """``run_read = PartOp("runs")`` on a store class: ``store.run_read`` is
    ``store.runs.run_read`` (the part the store holds in its attribute ``runs``)."""

    def __init__(self, part: str):
        self.part = part
        self.name = ""

    @classmethod
    def of(cls, part: str, count: int) -> tuple[PartOp, ...]:
        """``count`` operations of ``part`` (to be bound to their names in the class body)."""
        return tuple(cls(part) for _ in range(count))

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, store: Any, owner: type | None = None) -> Any:
        if store is None:
            return self
        return getattr(getattr(store, self.part), self.name)
