"""``pqflow start`` of a workflow no live decider serves (a misspelling) says so on stderr, exits
0 and stores the run; ``status`` and ``why`` then name what it waits for instead of "not picked
up yet". Real ``pqflow`` processes (a decider serving another workflow, the commands) on
SQLite and one server database (marker one_server)."""

from __future__ import annotations

import signal
import subprocess

import pytest
from procs import finish, wait_for
from test_pqflow_cli import FLOWS, PQFLOW, flow, script, script_env, unserved_warning  # noqa: F401 - flow: fixture

pytestmark = [pytest.mark.slow, pytest.mark.one_server]


def test_start_of_a_workflow_no_live_decider_serves_says_so(flow):  # noqa: F811
    decider = subprocess.Popen(
        [str(PQFLOW), "run", f"{FLOWS}:Decider", *flow.db(), "--poll-interval", "0.1"],
        env=script_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        with flow.queue() as q:
            wait_for(lambda: q.workers(), timeout=60, what="the decider to register")
        served = script("start", "cli_etl", "ok1", *flow.db())
        assert (served.returncode, served.stdout, served.stderr) == (0, "ok1\n", "")
        typo = script("start", "cli_elt", "typo1", *flow.db())
        assert (typo.returncode, typo.stdout) == (0, "typo1\n"), typo.stderr
        assert typo.stderr == unserved_warning("cli_elt", "typo1")
        status = script("status", "typo1", *flow.db())
        assert status.returncode == 0, status.stderr
        assert "waiting:   no live worker serves workflow cli_elt" in status.stdout.splitlines()
        why = script("why", "typo1", "extract", *flow.db())
        assert why.stdout == (
            "run 'typo1' has not been picked up by a decider yet: no live worker serves workflow cli_elt\n"
        )
    finally:
        decider.send_signal(signal.SIGTERM)
        finish(decider, timeout=60)
