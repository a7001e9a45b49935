"""Small statistics: summaries of runs, percentiles, a stopwatch, a rate meter."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence


def summary(samples: Sequence[float | None]) -> dict | None:
    """``{"median", "min", "max", "n", "samples"}`` of the runs that produced a value.

    ``samples`` keeps one slot per run (``None`` for a run that failed) so ratios can be
    formed run by run.
    """
    values = [float(v) for v in samples if v is not None]
    if not values:
        return None
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "n": len(values),
        "samples": [None if v is None else float(v) for v in samples],
    }


def percentile(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0-100) by linear interpolation between closest ranks."""
    if not values:
        raise ValueError("percentile of no values")
    data = sorted(values)
    if len(data) == 1:
        return data[0]
    k = (len(data) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (k - lo)


def ratio_samples(num: Sequence[float | None], den: Sequence[float | None]) -> list[float | None]:
    """Run-by-run ratios ``num[i] / den[i]`` (None where either run failed)."""
    out: list[float | None] = []
    for a, b in zip(num, den, strict=False):
        out.append(a / b if a is not None and b not in (None, 0) else None)
    return out


class Stopwatch:
    """``with Stopwatch() as sw: ...`` then ``sw.seconds``."""

    def __enter__(self) -> Stopwatch:
        self.start = time.perf_counter()
        self.seconds = 0.0
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = time.perf_counter() - self.start


def timed_calls(fn: Callable[[], object], count: int) -> list[float]:
    """Call ``fn`` ``count`` times; the duration of each call in seconds."""
    out = []
    for _ in range(count):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def rate_for(seconds: float, op: Callable[[int], object]) -> float:
    """Operations per second of ``op(i)`` repeated for about ``seconds`` seconds."""
    n = 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    while True:
        op(n)
        n += 1
        now = time.perf_counter()
        if now >= deadline:
            return n / (now - t0)
