"""Helpers shared by the CLI acceptance tests of perfectqueue, perfectsched and pqflow."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    """No PQ_* variables from outside; run in a temp dir (the default URL is ./pq.db)."""
    for name in list(os.environ):
        if name.startswith("PQ_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def assert_one_line_error(prog: str, result, code: int, *fragments: str) -> str:
    """Exit ``code``, nothing on stdout, exactly one ``<prog>: error:`` line on stderr."""
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    err = result.stderr
    assert err.startswith(f"{prog}: error: "), err
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err and "Traceback" not in result.stdout
    assert result.stdout == ""
    for fragment in fragments:
        assert fragment in err, (fragment, err)
    return err
