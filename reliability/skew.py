"""Processes whose clocks are wrong: libfaketime preloaded into them (Debian's ``faketime``).

:func:`shifted` moves a process's wall clock by a constant; :func:`stepping` lets the test step
it while the process runs (by writing an offset file). The monotonic clock stays real, as NTP
leaves it (FAKETIME_DONT_FAKE_MONOTONIC); libfaketime then breaks ``time.sleep``
(clock_nanosleep fails with EINVAL), which ``faketime_site/sitecustomize.py`` replaces in those
processes only. The preload goes into the process itself: the ``faketime`` wrapper command would
not pass signals on to it.
"""

from __future__ import annotations

import os
from pathlib import Path

LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
ROOT = Path(__file__).resolve().parents[1]
SITE = Path(__file__).with_name("faketime_site")


def available() -> bool:
    return os.path.exists(LIBFAKETIME)


def _base() -> dict:
    return {"LD_PRELOAD": LIBFAKETIME, "FAKETIME_DONT_FAKE_MONOTONIC": "1", "PYTHONPATH": f"{ROOT}{os.pathsep}{SITE}"}


def shifted(seconds: float) -> dict:
    """Environment variables that shift a process's wall clock by ``seconds``."""
    return {**_base(), "FAKETIME": f"{seconds:+.0f}s"}


def stepping(offset_file: Path, start: str = "+0") -> dict:
    """Environment variables under which a process's wall-clock offset is read from
    ``offset_file`` (e.g. ``-600``) at every reading: writing the file steps its clock."""
    Path(offset_file).write_text(start)
    return {**_base(), "FAKETIME_TIMESTAMP_FILE": str(offset_file), "FAKETIME_NO_CACHE": "1"}
