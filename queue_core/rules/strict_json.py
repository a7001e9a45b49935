"""JSON as the standard defines it, read back from a row (pure: no I/O).

Python's ``json.loads`` also takes ``NaN``, ``Infinity`` and ``-Infinity``, and turns a number too
large for a double (``1e999``) into ``inf``; none of these is JSON, and pq never writes one
(``json.dumps(..., allow_nan=False)`` everywhere). :func:`loads` refuses them, so a row edited by
hand to hold one is named corrupt (``store.rowcheck``) instead of handing ``nan`` to a handler.
"""

from __future__ import annotations

import json
import math
from typing import Any


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is beyond a double's range")
    return value


#: one decoder for every call (``json.loads`` with hooks would make one per call)
_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite)


def loads(text: str | bytes) -> Any:
    """The JSON value of ``text``; ValueError (or RecursionError, nested too deep) when it is
    not JSON: not valid, or holding NaN, Infinity or a number past a double's range."""
    if isinstance(text, str):
        return _DECODER.decode(text)
    return json.loads(text, parse_constant=_no_constant, parse_float=_finite)  # bytes, or its TypeError
