"""docs/state-machines.md shows the transition tables of queue_core/store/transitions.py as they
are: each table there is the one rendered here from the code."""

from __future__ import annotations

from pathlib import Path

from queue_core.rules.task_states import STORED
from queue_core.store.transitions import SCHEDULE_TRANSITIONS, TASK_TRANSITIONS, Transition

DOC = Path(__file__).resolve().parents[2] / "docs" / "state-machines.md"


def render(transitions: dict[str, Transition]) -> str:
    """The markdown table of ``transitions``, one row each, in the table's order."""
    lines = ["| transition | from | to | fenced by | written by | what |", "|---|---|---|---|---|---|"]
    for t in transitions.values():
        to = "unchanged" if t.targets == t.sources else ", ".join(t.targets)
        fences = ", ".join(f.value for f in t.fences) or "state only"
        lines.append(f"| `{t.name}` | {', '.join(t.sources)} | {to} | {fences} | {t.methods} | {t.what} |")
    return "\n".join(lines)


def _between(text: str, begin: str) -> str:
    start = text.index(f"<!-- {begin} -->") + len(f"<!-- {begin} -->")
    return text[start : text.index("<!-- end -->", start)].strip()


def test_the_task_table_in_the_docs_is_the_code_table():
    assert _between(DOC.read_text(), "task transitions") == render(TASK_TRANSITIONS)


def test_the_schedule_table_in_the_docs_is_the_code_table():
    assert _between(DOC.read_text(), "schedule transitions") == render(SCHEDULE_TRANSITIONS)


def test_every_task_state_has_its_column_meanings():
    header = _between(DOC.read_text(), "task columns").splitlines()[0]
    assert [c.strip() for c in header.strip("|").split("|")][1:] == [s.value for s in STORED if s != "absent"]


def test_a_changed_table_no_longer_matches():
    changed = dict(TASK_TRANSITIONS)
    changed.pop("purge")
    assert _between(DOC.read_text(), "task transitions") != render(changed)


def test_every_method_a_transition_names_exists():
    """The table's "written by" names real methods (it once named a SqlScheduleStore.give_back that
    was never written)."""
    import perfectsched
    import queue_core

    # instances (of an in-memory database, nothing read): an operation of a part the store is
    # composed of exists only if that part has the method
    classes = {
        "SqlStore": queue_core.open("sqlite://", "t").store,
        "SqlScheduleStore": perfectsched.open("sqlite://", "s", "t").store,
    }
    for table in (TASK_TRANSITIONS, SCHEDULE_TRANSITIONS):
        for t in table.values():
            for written_by in t.methods.split(", "):
                cls, _, method = written_by.partition(".")
                names = (
                    [method] if "(" not in method else [method.replace("(", "").replace(")", ""), method.split("(")[0]]
                )
                assert cls in classes, f"{t.name}: unknown class {cls}"
                missing = [n for n in names if not callable(getattr(classes[cls], n, None))]
                assert not missing, f"{t.name}: {cls} has no {', '.join(missing)}"
