"""The task page of a workflow row (a run's own row, a step's row) offers only actions that the
handler then carries out: ``pqweb/actions.py`` says "a button never leads to a refusal page",
yet a failed step row and a failed run row offer *Retry*, whose POST is a 400 page ("belongs to
a workflow run: retry it with pqflow retry")."""

from __future__ import annotations

import re

import pytest
from test_web_runs import drive, flow
from web_support import client, login

import pqflow


@pytest.mark.parametrize("key", ["wr1#fetch", "wr1"])
def test_a_failed_workflow_row_offers_no_retry_that_is_then_refused(queue, key):
    flow.start("wr1", {"fail": True}, queue=queue)
    drive(queue)
    assert pqflow.get_run("wr1", queue=queue).status == "failed"
    c = client(queue)
    csrf = login(c)
    offered = re.findall(r'id="action-([a-z-]+)"', c.get("/task", params={"key": key}).text)
    for action in offered:
        r = c.post(f"/task/{action}", data={"key": key, "csrf": csrf, "confirmed": "yes"})
        assert r.status_code == 303, (key, offered, action, r.status_code, re.findall(r"<p>([^<]*)</p>", r.text))
