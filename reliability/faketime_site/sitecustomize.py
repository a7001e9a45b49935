"""Loaded by Python in the test processes that run under libfaketime (tests/acceptance/test_clock_skew.py).

libfaketime 0.9 keeps the monotonic clock real (FAKETIME_DONT_FAKE_MONOTONIC=1, as NTP does) but
then fails clock_nanosleep, which ``time.sleep`` uses, with EINVAL; waits on locks, events and
select work. ``time.sleep`` becomes an Event wait of the same length in those processes only.
"""

import os
import threading
import time

if os.environ.get("FAKETIME_DONT_FAKE_MONOTONIC") == "1" and "faketime" in os.environ.get("LD_PRELOAD", ""):

    def _sleep(seconds: float) -> None:
        if seconds < 0:
            raise ValueError("sleep length must be non-negative")
        threading.Event().wait(seconds)

    time.sleep = _sleep
