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


@dataclass(frozen=True)
class Bar:
    """One step on a timeline: ``x`` and ``width`` in the chart's units (SVG attributes, not styles)."""

    name: str
    status: str
    y: int
    x: float
    width: float
    seconds: float | None


@dataclass(frozen=True)
class Timeline:
    width: int
    height: int
    row: int
    bars: tuple[Bar, ...]
    #: seconds from the first start to the last end (or now)
    span: float


def timeline(
    steps: Sequence[tuple[str, str, float | None, float | None]], now: float, *, width: int = 600, row: int = 20
) -> Timeline:
    """A Gantt chart of ``(name, status, started, finished)``: a bar per step from its start to its
    end (to ``now`` while it runs), on one scale; a step that never started has no width."""
    starts = [s for _, _, s, _ in steps if s is not None]
    t0 = min(starts, default=now)
    ends = [f if f is not None else now for _, _, s, f in steps if s is not None]
    span = max(max(ends, default=t0) - t0, 1e-9)
    bars = tuple(_bar(i, step, t0, span, now, width, row) for i, step in enumerate(steps))
    return Timeline(width, row * max(1, len(steps)), row, bars, span if starts else 0.0)


def _bar(i: int, step: tuple, t0: float, span: float, now: float, width: int, row: int) -> Bar:
    name, status, start, end = step
    if start is None:
        return Bar(name, status, i * row, 0.0, 0.0, None)
    stop = end if end is not None else now
    x = (start - t0) / span * width
    return Bar(name, status, i * row, round(x, 1), round(max(1.0, (stop - start) / span * width), 1), stop - start)
