"""RQ's job function for the benchmarks (imported by ``rq worker`` by its dotted name)."""

from __future__ import annotations

from .done import mark


def noop():
    mark()
