"""A step's error text is the step author's (or its input's) text: ``pqflow why`` and ``pqflow
status`` print its traceback and error to an operator's terminal. Terminal control sequences
(ESC, CR, BEL) and bidirectional controls in it must be shown escaped, never applied (the
dashboard escapes bidi controls; the CLI prints them raw)."""

from __future__ import annotations

from click.testing import CliRunner
from fault_support import drive

import pqflow
from pqflow.cli import cli as flow_cli

HOSTILE = "\x1b]0;owned\x07\x1b[2J\x1b[1A\rstep ok: nothing failed here \u202egnp.exe"

wf = pqflow.Workflow("hostile_err", retries=0, retry_wait=0)


@wf.step()
def boom(ctx):
    raise RuntimeError(HOSTILE)


class Decider(pqflow.Decider):
    workflows = [wf]
    batch_completions = False


def test_pqflow_why_and_status_escape_control_characters_of_a_step_error(queue):
    wf.start("he", queue=queue)
    drive(queue, Decider)
    assert pqflow.get_run("he", queue=queue).statuses["boom"] == "failed"
    db = ["-D", queue.config["url"], "--table", queue.table]
    applied = {}
    for args in (["why", "he", "boom"], ["status", "he"]):
        shown = CliRunner().invoke(flow_cli, [*args, *db])
        assert shown.exit_code == 0, (shown.stdout, shown.stderr)
        assert "owned" in shown.stdout, shown.stdout  # the error is shown ...
        raw = [c for c in ("\x1b", "\x07", "\r", "\u202e") if c in shown.stdout]
        if raw:
            applied[args[0]] = raw
    assert not applied, applied  # ... escaped, not applied
