"""Tag limits on the command line: a tag past the limit with ``tag`` is
exit 1 and one line, nothing changed; a bad tag for untag/list is exit 2; a hand-edited tracked
value in ``show``/``list`` is one line, no traceback."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from test_perfectqueue_cli import assert_error, pq, ready  # noqa: F401 - pq, ready: the fixtures

pytestmark = pytest.mark.one_server


def test_tag_past_32_on_the_command_line_is_exit_1_and_changes_nothing(ready):  # noqa: F811
    """k has 30 tags; 'tag k a b c' -> exit 1, one line; still 30 tags."""
    pq = ready  # noqa: F811
    pq.ok("submit", "k", "t", *[a for i in range(30) for a in ("--tag", f"t{i:02d}")])
    assert_error(pq("tag", "k", "a", "b", "c"), 1, "at most 32")
    assert len(pq.json("show", "k")["tags"]) == 30
    assert pq.ok("tag", "k", "a", "b").strip().count(",") == 31


@pytest.mark.parametrize("bad", ["\x85x", "x\u00a0", "x" * 101])
def test_a_bad_tag_for_untag_and_list_is_a_usage_error(ready, bad):  # noqa: F811
    """Exit 2 for untag and list --tag and submit --tag with a C1 control / NBSP / 101 chars."""
    pq = ready  # noqa: F811
    pq.ok("submit", "k", "t")
    for args in (("untag", "k", bad), ("list", "--tag", bad), ("submit", "j", "t", "--tag", bad)):
        result = pq(*args)
        assert result.exit_code == 2, (args, result.exit_code, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr


@pytest.mark.every_database
def test_a_hand_edited_tracked_value_is_one_line_on_show_and_list(ready):  # noqa: F811
    """Tracked = 7 by hand: 'show k' and 'list' fail with one line, no traceback."""
    pq = ready  # noqa: F811
    pq.ok("submit", "k", "t")
    with pq.queue() as q:
        t = q.store.t
        q.db.run(lambda c: c.execute(sa.update(t).values(tracked=7)))
    for args in (("show", "k"), ("list",), ("list", "--tracked")):
        result = pq(*args)
        assert "Traceback" not in result.stderr, args
        if args != ("list", "--tracked"):
            assert result.exit_code != 0 and len(result.stderr.strip().splitlines()) == 1, (args, result.stderr)
