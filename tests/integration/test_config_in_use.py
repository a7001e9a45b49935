"""Config times (capped at 1e9 s): bad values give ConfigError (library) or one line
on stderr and a non-zero exit (CLI); a value the config accepts must work."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

import queue_core
from queue_core import config as config_mod
from queue_core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
TIME_KEYS = [k for k, (_, kind, _h) in config_mod.DEFAULTS.items() if kind in ("float+", "float0", "opt-float+")]
BAD = [-1, -0.001, math.nan, math.inf, -math.inf, "nan", "inf", "1e999", "abc", "", True, 1e10, 10**400, [1], "0x10"]


@pytest.mark.parametrize("key", TIME_KEYS)
@pytest.mark.parametrize("value", BAD, ids=repr)
def test_bad_times_are_config_errors(key, value):
    with pytest.raises(ConfigError):
        config_mod.build({key: value})


@pytest.mark.parametrize("key", TIME_KEYS)
def test_the_largest_accepted_time_is_accepted_everywhere(key):
    assert config_mod.build({key: 1e9})[key] == 1e9


def _cli(tmp_path, toml: str, command: str, env=None) -> subprocess.CompletedProcess:
    cfg = tmp_path / "pq.toml"
    cfg.write_text(toml)
    return subprocess.run(
        [sys.executable, "-m", "queue_core.cli", command, "-c", str(cfg), "-e", "development"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )


@pytest.mark.parametrize("value", ["nan", "inf", "-1.0", "1e10", '"abc"', "true"])
def test_cli_bad_wake_interval_is_one_line(tmp_path, value):
    url = f"sqlite:///{tmp_path}/pq.db"
    proc = _cli(tmp_path, f'[development]\nurl = "{url}"\nwake_interval = {value}\n', "stats")
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "wake_interval" in lines[0], proc.stderr


@pytest.mark.parametrize("backend", ["mysql"], indirect=True)
def test_a_connect_timeout_the_config_accepts_works(db_url, table_name):
    """connect_timeout = 1e9 passes the config's cap (1e9), but PyMySQL refuses more than
    31536000 s with a bare ValueError at the first connection: not a ConfigError, not a DatabaseError."""
    q = queue_core.open(db_url, table_name, connect_timeout=1e9)  # accepted
    try:
        try:
            q.init()
        except (ConfigError, queue_core.DatabaseError):
            return  # a typed error would do
        from conftest import drop_tables

        drop_tables(db_url, table_name)
    finally:
        q.close()


@pytest.mark.parametrize("backend", ["mysql"], indirect=True)
def test_cli_accepts_the_largest_connect_timeout(tmp_path, db_url):
    """A connect_timeout the config accepts (up to 1e9 s) must not crash PyMySQL (exit 1): it
    reaches the database (here: the table is missing, exit 5)."""
    proc = _cli(tmp_path, f'[development]\nurl = "{db_url}"\nconnect_timeout = 1e9\n', "stats")
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert proc.returncode == 5 and "run 'init' first" in lines[0], (proc.returncode, lines[0])
