"""Small charts as inline SVG (pure): the points of a sparkline from a list of numbers.

Nothing here returns markup: the template draws the ``<svg>`` from these values (autoescaped),
with presentation attributes only (the Content-Security-Policy forbids inline styles)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Sparkline:
    """A line through ``values`` scaled into ``width`` x ``height``: ``points`` for a polyline."""

    width: int
    height: int
    points: str
    peak: float
    total: float


def sparkline(values: Sequence[float], *, width: int = 120, height: int = 24) -> Sparkline:
    """The polyline of ``values`` (oldest first), the highest at the top; a flat line at the
    bottom when every value is 0 (or there is none)."""
    vals = [max(0.0, float(v)) for v in values] or [0.0]
    peak = max(vals)
    step = width / (len(vals) - 1) if len(vals) > 1 else 0.0
    usable = height - 2  # a 1px margin keeps the line inside the box
    pts = []
    for i, v in enumerate(vals):
        y = height - 1 - (usable * v / peak if peak else 0.0)
        pts.append(f"{i * step:.1f},{y:.1f}")
    return Sparkline(width, height, " ".join(pts), peak, sum(vals))


def per_minute(pairs: Sequence[tuple[float, float]], *, since: float, minutes: int = 60) -> list[float]:
    """``(minute start, count)`` pairs as one value per minute from ``since`` (missing: 0)."""
    out = [0.0] * minutes
    for start, count in pairs:
        i = int((start - since) // 60)
        if 0 <= i < minutes:
            out[i] += count
    return out
