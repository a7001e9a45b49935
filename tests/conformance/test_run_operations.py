"""The Store protocol's reads of workflow-run rows, and a run's cancel, on SQLite, MariaDB and
PostgreSQL alike (the named transitions of those rows: test_store_transitions.py). A run's rows
are made as pqflow makes them: one transaction submitting the rows of a group."""

from __future__ import annotations

from store_support import T0

WORKFLOW = '{"w": 1}'


def run_rows(queue, group: str, *rows: tuple[str, dict]) -> None:
    """Rows ``(key, options)`` of the group ``group``, each with workflow bookkeeping."""
    entries = [{"key": k, "type": "t", "group": group, "workflow": WORKFLOW, **o} for k, o in rows]
    queue.transaction(lambda tx: tx.submit_rows(entries), now=T0)


def in_run_tx(queue, fn, now: float = T0 + 1):
    """``fn(store, conn)`` in a transaction of the queue (a decider's)."""
    return queue.transaction(lambda tx: fn(tx.store, tx.conn), now=now)


def test_the_rows_of_a_run_are_read_by_key_and_by_group_with_what_was_asked_for(queue):
    run_rows(queue, "g", ("g#a", {"data": {"x": 1}}), ("g#b", {"pending": True}))
    rows = in_run_tx(queue, lambda s, c: s.run_read(c, ["g#a", "g#b", "absent"], data=True, lock=True))
    assert sorted(rows) == ["g#a", "g#b"]
    assert (rows["g#a"]["data"], rows["g#a"]["workflow"], rows["g#b"]["state"]) == ('{"x":1}', WORKFLOW, 2)
    assert "data" not in in_run_tx(queue, lambda s, c: s.run_read(c, ["g#a"]))["g#a"]
    group = in_run_tx(queue, lambda s, c: s.run_group_read(c, "g"))
    assert [r["key"] for r in group] == ["g#a", "g#b"]
    plain = in_run_tx(queue, lambda s, c: s.task_group_rows(c, "g", True))
    assert [(r["key"], r["data"]) for r in plain] == [("g#a", '{"x":1}'), ("g#b", "{}")]


def test_a_run_s_rows_are_counted_by_status_and_their_results_listed(queue):
    run_rows(queue, "g", ("g#a", {}), ("g#b", {}), ("g#c", {"pending": True}))
    held = queue.poll(alive_time=30, now=T0 + 1)

    def count(now):
        return in_run_tx(queue, lambda s, c: s.run_group_count(c, "g", now))

    assert count(T0 + 2) == {"running": 1, "waiting": 1, "pending": 1}
    token = held.lease_token
    in_run_tx(queue, lambda s, c: s.run_finish_held(c, held.row_id, token, "success", T0 + 2, error=None, result="1"))
    assert count(T0 + 3) == {"success": 1, "waiting": 1, "pending": 1}
    results = {r[0]: r[1:] for r in in_run_tx(queue, lambda s, c: s.run_group_results(c, "g"))}
    assert results[held.key] == (1, "success", WORKFLOW, "1")
    assert sorted(results) == ["g#a", "g#b", "g#c"]


def test_the_waiting_row_due_first_and_the_open_rows_of_runs_are_found(queue):
    run_rows(queue, "g", ("g#late", {"run_at": T0 + 60}), ("g#soon", {"run_at": T0 + 5}), ("g#p", {"pending": True}))
    run_rows(queue, "h", ("h#x", {}))
    first = in_run_tx(queue, lambda s, c: s.run_next_waiting(c, "g", T0))
    assert (first["run_at"], first["workflow"]) == (T0 + 5, WORKFLOW)
    assert in_run_tx(queue, lambda s, c: s.run_next_waiting(c, "nobody", T0)) is None
    open_rows = in_run_tx(queue, lambda s, c: s.run_open_rows(c, ["g", "h"], None))
    assert sorted(r["key"] for r in open_rows) == ["g#late", "g#p", "g#soon", "h#x"]
    assert {r["key"]: r["grp"] for r in open_rows}["h#x"] == "h"
    assert len(in_run_tx(queue, lambda s, c: s.run_open_rows(c, ["g", "h"], 1))) == 1


def test_cancelling_a_run_cancels_its_waiting_rows_and_flags_its_running_ones(queue):
    run_rows(queue, "g", ("g#a", {}), ("g#b", {}), ("g#p", {"pending": True}))
    held = queue.poll(alive_time=30, now=T0 + 1)
    cancelled = in_run_tx(queue, lambda s, c: s.run_cancel_waiting(c, "g", T0 + 2))
    other = ({"g#a", "g#b"} - {held.key}).pop()
    assert [r["key"] for r in cancelled] == [other]
    rows = in_run_tx(queue, lambda s, c: s.run_read(c, [held.key, other, "g#p"]))
    assert (rows[other]["state"], rows[other]["outcome"]) == (1, "cancelled")
    assert (rows[held.key]["leased"], rows[held.key]["cancel_requested"]) == (1, 1)
    assert rows["g#p"]["state"] == 2  # pending rows are the decider's to close


def test_workflow_names_are_registered_once_and_listed(queue):
    in_run_tx(queue, lambda s, c: [s.run_name_register(c, "workflow", n) for n in ("etl", "billing", "etl")])
    assert in_run_tx(queue, lambda s, c: s.run_names_registered(c, "workflow")) == ["billing", "etl"]
    assert in_run_tx(queue, lambda s, c: s.run_names_registered(c, "other")) == []


def test_the_newest_runs_of_a_workflow_are_paged_newest_first(queue):
    run_rows(queue, "#runs", ("r1", {"type": "etl"}), ("r2", {"type": "etl"}), ("r3", {"type": "billing"}))
    run_rows(queue, "r1", ("r1#step", {"type": "etl"}))  # a step: not a run
    queue.submit("r4", "etl", now=T0 + 1)  # submitted as a plain task, no decider has taken it up yet
    page = in_run_tx(queue, lambda s, c: s.run_newest(c, "#runs", ["etl"], None, 10, "#"))
    assert [r["key"] for r in page] == ["r4", "r2", "r1"]
    older = in_run_tx(queue, lambda s, c: s.run_newest(c, "#runs", ["etl"], page[1]["id"], 1, "#"))
    assert [r["key"] for r in older] == ["r1"]
