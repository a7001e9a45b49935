"""A handler whose error text holds a NUL (tests/acceptance/test_nul_error_on_workers.py)."""

from __future__ import annotations

import os


def nul_error(task) -> None:
    with open(task.data["log"], "a") as fh:
        fh.write(f"{task.key} {os.getpid()} run\n")
    raise ValueError("unexpected byte in record: a\x00b")
