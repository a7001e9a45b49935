"""docs/configuration.md lists every configuration key with its real default."""

from __future__ import annotations

import re
from pathlib import Path

from queue_core.config import DEFAULTS

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def _documented() -> dict[str, str]:
    rows = re.findall(r"^\| `([a-z_]+)` \| ([^|]+) \|", DOC.read_text(), re.M)
    return {key: default.strip() for key, default in rows}


def test_every_key_is_documented_with_its_default():
    documented = _documented()
    for key, (default, _kind, _help) in DEFAULTS.items():
        assert key in documented, f"{key} missing from docs/configuration.md"
        expected = "unset" if default is None else f"`{default}`"
        assert documented[key] == expected, f"{key}: doc says {documented[key]}, code says {expected}"
