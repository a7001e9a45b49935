"""Configuration values are refused when no service could use them."""

from __future__ import annotations

import pytest

from queue_core import config
from queue_core.errors import ConfigError


def test_a_time_longer_than_a_wait_can_take_is_refused():
    """A config time above MAX_SECONDS (1e9 s) is refused: Python's waits (threading, select)
    raise OverflowError past ~9.2e9 s, so an accepted ``wake_interval = 1e10`` would crash the
    wake-up listener at its first wait."""
    for key in ("wake_interval", "poll_interval", "cleanup_interval", "task_heartbeat_interval"):
        assert config.build({key: config.MAX_SECONDS})[key] == config.MAX_SECONDS
        with pytest.raises(ConfigError, match=key):
            config.build({key: 1e10})
