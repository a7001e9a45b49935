"""Handler layer: Router, Dispatch, Application decisions (pure; worker tests cover the rest)."""

from __future__ import annotations

import re

import pytest

import queue_core
from queue_core.api.app import UnknownTypeError, make_runner


class FakeTask:
    """The few AcquiredTask members handlers touch."""

    def __init__(self, type_="t"):
        self.type, self.queue, self.done, self.calls = type_, None, False, []

    def retry_or_fail(self, error):
        self.calls.append(("retry_or_fail", str(error)))
        self.done = True


def test_router_exact_strings_regexes_first_match_wins():
    def exact(t): ...
    def prefix(t): ...
    def anywhere(t): ...

    r = queue_core.Router()
    r.add("email", exact)
    r.add(re.compile(r"^email"), prefix)
    r.add(re.compile(r"report\."), anywhere)
    assert r.find("email") is exact
    assert r.find("emailx") is prefix
    assert r.find("x.report.daily") is anywhere
    assert r.find("emai") is None
    with pytest.raises(TypeError):
        r.add(42, exact)
    with pytest.raises(TypeError):
        r.add("x", "not callable")


def test_router_runner_for_unknown_type_raises_lookup():
    r = queue_core.Router()
    with pytest.raises(UnknownTypeError):
        r.runner(FakeTask("nope"))


def test_dispatch_routes_are_copy_on_write_per_subclass():
    class A(queue_core.Dispatch):
        routes = [("a", lambda t: None)]

    class B(A):
        pass

    B.route("b", lambda t: None)
    assert [p for p, _ in A.routes] == ["a"]
    assert [p for p, _ in B.routes] == ["a", "b"]
    assert A.router().find("b") is None and B.router().find("b") is not None


def test_application_error_becomes_decision_and_default_retries():
    class Boom(queue_core.Application):
        def perform(self):
            raise ValueError("bad input")

    task = FakeTask()
    Boom(task).run()
    assert task.calls == [("retry_or_fail", "bad input")]


def test_application_custom_decisions_and_undefined_decision():
    seen = []

    class MyDecisions(queue_core.Decisions):
        def imported(self, rows):
            seen.append(rows)

    class Job(queue_core.Application):
        decisions = MyDecisions

        def perform(self):
            self.decide("imported", rows=7)

    Job(FakeTask()).run()
    assert seen == [7]
    with pytest.raises(queue_core.UndefinedDecisionError, match="nonsense"):
        Job(FakeTask()).decide("nonsense")
    with pytest.raises(queue_core.UndefinedDecisionError):
        Job(FakeTask()).decide("_private")


def test_before_perform_false_skips_perform_and_after_perform_always_runs():
    order = []

    class Skip(queue_core.Application):
        def before_perform(self):
            return False

        def perform(self):
            order.append("perform")

    class Normal(queue_core.Application):
        def perform(self):
            order.append("perform")
            raise RuntimeError("x")

        def after_perform(self):
            order.append("after")

    Skip(FakeTask()).run()
    assert order == []
    task = FakeTask()
    Normal(task).run()
    assert order == ["perform", "after"] and task.done


def test_make_runner_accepts_classes_routers_and_functions():
    calls = []
    assert isinstance(make_runner(lambda t: calls.append(t), FakeTask()), queue_core.Runner)
    r = queue_core.Router()
    r.route("t")(lambda t: calls.append("routed"))
    make_runner(r, FakeTask()).run()
    assert calls == ["routed"]
    with pytest.raises(TypeError):
        make_runner(object(), FakeTask())


def test_a_perfectqueue_handler_s_decider_is_honoured_and_the_old_names_warn():
    with pytest.warns(DeprecationWarning, match="queue_core.Decider is deprecated: use queue_core.Decisions"):
        base = queue_core.Decider
    with pytest.warns(DeprecationWarning, match="DefaultDecider"):
        assert queue_core.DefaultDecider is base is queue_core.Decisions
    seen = []

    class Ported(queue_core.Decisions):
        def imported(self, rows):
            seen.append(rows)

    class Job(queue_core.Application):
        decider = Ported  # PerfectQueue's spelling

        def perform(self):
            self.decide("imported", rows=3)

    Job(FakeTask()).run()
    assert seen == [3]


def test_the_decisions_set_last_in_the_hierarchy_win_whichever_name_sets_them():
    class First(queue_core.Decisions):
        def which(self):
            return "first"

    class Second(queue_core.Decisions):
        def which(self):
            return "second"

    class Ported(queue_core.Application):
        decider = First

    class Newer(Ported):
        decisions = Second

    class Older(Newer):
        decider = First

    assert Ported(FakeTask()).decide("which") == "first"
    assert Newer(FakeTask()).decide("which") == "second"
    assert Older(FakeTask()).decide("which") == "first"
    assert issubclass(queue_core.Application.decider, queue_core.Decisions)  # PerfectQueue: subclass it
    with pytest.warns(DeprecationWarning):
        from queue_core.api.app import Decider
    assert Decider is queue_core.Decisions
