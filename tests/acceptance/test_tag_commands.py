"""``perfectqueue submit --tag``, ``list --tag/--tracked``, ``tag``, ``untag``, ``track``,
``untrack`` and ``show``: what an operator types, on SQLite and one server database; a bad
tag is one line and exit 2 before anything connects, an unknown task exit 4."""

from __future__ import annotations

import pytest
from test_perfectqueue_cli import assert_error, pq, ready  # noqa: F401 - pq, ready: the fixtures

pytestmark = pytest.mark.one_server


def usage_error(result, fragment: str) -> None:
    """Exit 2 (click's usage error: its usage lines and one ``Error:`` line naming the problem)."""
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    assert result.stdout == "" and "Traceback" not in result.stderr
    [line] = [x for x in result.stderr.splitlines() if x.startswith("Error:")]
    assert fragment in line, line


def listed(pq, *args: str) -> list[str]:  # noqa: F811
    return [t["key"] for t in pq.json("list", *args)]


def test_tags_from_submit_to_list_and_show(ready):  # noqa: F811
    pq = ready  # noqa: F811
    pq.ok("submit", "inv-1", "invoice", "--tag", "customer:acme", "--tag", "invoice")
    pq.ok("submit", "inv-2", "invoice", "--tag", "customer:zeta")
    pq.ok("submit", "plain", "invoice")
    assert listed(pq, "--tag", "customer:acme") == ["inv-1"]
    assert pq.json("list", "--tag", "invoice")[0]["tags"] == ["customer:acme", "invoice"]
    table = pq.ok("list")
    assert "customer:acme,invoice" in table and "tags" in table.splitlines()[0]
    assert "tags:" in pq.ok("show", "inv-1") and "customer:acme, invoice" in pq.ok("show", "inv-1")
    assert pq.ok("tag", "inv-2", "vip", "invoice").strip() == "customer:zeta, invoice, vip"
    assert listed(pq, "--tag", "invoice") == ["inv-1", "inv-2"]
    assert pq.ok("untag", "inv-2", "customer:zeta", "vip", "invoice").strip() == "(no tags)"
    assert listed(pq, "--tag", "customer:zeta") == []


def test_tracking_from_the_command_line(ready):  # noqa: F811
    pq = ready  # noqa: F811
    for key in ("a", "b", "c"):
        pq.ok("submit", key, "t")
    assert pq.ok("track", "b").strip() == "tracked"
    assert listed(pq, "--tracked") == ["b"]
    assert pq.json("show", "b")["tracked"] is True
    assert pq.ok("untrack", "b").strip() == "untracked"
    assert listed(pq, "--tracked") == []


@pytest.mark.parametrize("bad", ["", " lead", "x" * 101, "bell\x07", "line\nbreak"])
def test_a_bad_tag_is_a_usage_error_and_nothing_is_written(ready, bad):  # noqa: F811
    pq = ready  # noqa: F811
    usage_error(pq("submit", "k", "t", "--tag", bad), "tag")
    assert listed(pq) == []
    pq.ok("submit", "k", "t")
    usage_error(pq("tag", "k", "fine", bad), "tag")
    usage_error(pq("list", "--tag", bad), "tag")
    assert pq.json("show", "k")["tags"] == []


def test_too_many_tags_and_unknown_tasks(ready):  # noqa: F811
    pq = ready  # noqa: F811
    many = [arg for i in range(33) for arg in ("--tag", f"t{i}")]
    assert_error(pq("submit", "k", "t", *many), 1, "at most 32")  # an invalid argument (not a usage error)
    assert listed(pq) == []
    pq.ok("submit", "k", "t")
    assert_error(pq("tag", "nope", "x"), 4, "not found")
    assert_error(pq("untag", "nope", "x"), 4, "not found")
    assert_error(pq("track", "nope"), 4, "not found")
    assert_error(pq("untrack", "nope"), 4, "not found")
    usage_error(pq("tag", "k"), "Missing argument")
