"""Input hygiene of the new inputs (rates, weighted queue lists, intervals): a value whose
digits exceed Python's int-conversion limit (4300 digits) must be refused like any other bad
value (ValidationError / InvalidCronError; one line and the usage/config exit code on the CLI)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from click.testing import CliRunner  # noqa: E402

from perfectsched import cron  # noqa: E402
from perfectsched.cli import cli as sched_cli  # noqa: E402
from perfectsched.errors import InvalidCronError  # noqa: E402
from queue_core.errors import ValidationError  # noqa: E402
from queue_core.rules.validate import check_rate, check_served_queues  # noqa: E402

HUGE = "9" * 5000
T0 = 1_700_000_000.0


def test_a_huge_rate_count_is_a_validation_error():
    with pytest.raises(ValidationError):
        check_rate(f"{HUGE}/s")


def test_a_huge_queue_weight_is_a_validation_error():
    with pytest.raises(ValidationError):
        check_served_queues(f"a={HUGE},b=1")


def test_a_huge_interval_is_an_invalid_cron_error():
    with pytest.raises(InvalidCronError):
        cron.validate_cron(f"@every:{HUGE}s")


def test_cli_limit_with_a_huge_rate_is_a_usage_error(db_url, table_name, backend):
    from test_perfectqueue_cli import PQ

    pq = PQ(db_url, table_name)
    pq.ok("init")
    try:
        result = pq("limit", "api", "--rate", f"{HUGE}/s")
        assert result.exit_code == 2, (result.exit_code, result.stderr[-300:], repr(result.exception))
        assert "Traceback" not in result.stderr
    finally:
        if backend != "sqlite":
            from conftest import drop_tables

            drop_tables(db_url, table_name)


def test_cli_run_with_a_huge_queue_weight_is_a_config_error(db_url, table_name, backend):
    from test_perfectqueue_cli import PQ, assert_error, invoke

    pq = PQ(db_url, table_name)
    pq.ok("init")
    try:
        result = invoke("run", "x:y", "-D", db_url, "--table", table_name, "--queues", f"a={HUGE}")
        assert_error(result, 6)
    finally:
        if backend != "sqlite":
            from conftest import drop_tables

            drop_tables(db_url, table_name)


def test_perfectsched_next_with_a_huge_interval_is_one_line():
    from test_perfectsched_cli import assert_error

    result = CliRunner().invoke(sched_cli, ["next", f"@every:{HUGE}s"])
    assert_error(result, 1, "invalid interval")


def test_the_rate_key_is_kept_when_only_the_rate_changes(db_url, table_name, backend):
    """'options not given keep their current value' (perfectqueue limit --help)."""
    from test_perfectqueue_cli import PQ

    pq = PQ(db_url, table_name)
    pq.ok("init")
    try:
        pq.ok("limit", "api", "--rate", "10/s", "--rate-key", "user")
        out = pq.ok("limit", "api", "--rate", "20/s")
        found = {q["name"]: q for q in pq.json("queues")}
        assert found["api"]["rate_key"] == "user", (out, found["api"])
    finally:
        if backend != "sqlite":
            from conftest import drop_tables

            drop_tables(db_url, table_name)
