"""The peers, in the order a run measures them."""

from __future__ import annotations

from .base import Peer
from .celery_chord import CeleryChord
from .celery_sqla import CelerySqla
from .huey_sqlite import HueySqlite
from .procrastinate_pg import Procrastinate
from .rq_redis import RQ

PEERS: tuple[type[Peer], ...] = (HueySqlite, Procrastinate, CelerySqla, RQ, CeleryChord)
NAMES = tuple(p.name for p in PEERS)


def select(names: list[str] | None) -> list[Peer]:
    if names is None:
        return [cls() for cls in PEERS]
    unknown = [n for n in names if n not in NAMES]
    if unknown:
        raise ValueError(f"unknown peer {', '.join(unknown)}; choose from {', '.join(NAMES)}")
    return [cls() for cls in PEERS if cls.name in names]


__all__ = ["NAMES", "PEERS", "Peer", "select"]
