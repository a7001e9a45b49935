"""The traceback of a handler's or a step's error as pq stores and logs it (queue layer): kept
with the attempt it ended (the event of a retry or a failure) and capped like every error text."""

from __future__ import annotations

import traceback
from typing import Any

from .validate import _error_text, cap_text


def traceback_text(error: Any) -> str | None:
    """The traceback of the exception ``error`` as storable text (capped by ``cap_text``, chained
    exceptions included); None when it is no exception or was never raised. Never raises."""
    if not isinstance(error, BaseException) or error.__traceback__ is None:
        return None
    try:
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    except Exception:  # noqa: BLE001 - a broken __str__ of it or of an exception it chains
        text = "".join(traceback.format_tb(error.__traceback__)) + _error_text(error)
    return cap_text(text.rstrip("\n"))
