"""What a worker target serves (``queue_core.api.app.served_types``): the task types it leases."""

from __future__ import annotations

import re

import pytest

import pqflow
import queue_core
from queue_core.api.app import describe_types, served_types


def handler(task): ...


class Email(queue_core.Application):
    def perform(self): ...


def test_a_dispatch_whose_routes_are_all_exact_serves_exactly_those():
    class Worker(queue_core.Dispatch):
        routes = [("email", Email), ("ping", handler)]

    class More(Worker):
        pass

    More.route("invoice", handler)
    assert served_types(Worker) == {"email", "ping"}
    assert served_types(More) == {"email", "ping", "invoice"}


def test_one_regex_route_makes_a_dispatch_or_router_a_catch_all():
    class Worker(queue_core.Dispatch):
        routes = [("email", Email), (re.compile(r"^report\."), handler)]

    router = queue_core.Router()
    router.add("email", handler)
    assert served_types(router) == {"email"}
    router.add(re.compile("x"), handler)
    assert served_types(Worker) is None and served_types(router) is None


def test_a_declared_served_types_wins_and_may_narrow_a_regex_router():
    class Reports(queue_core.Dispatch):
        routes = [(re.compile(r"^report\."), handler)]
        served_types = ["report.daily", "report.weekly"]

    class Computed(queue_core.Dispatch):
        routes = [("a", handler), ("b", handler)]

        @classmethod
        def served_types(cls):
            return [p for p, _ in cls.routes if p != "b"]

    class Everything(queue_core.Dispatch):
        routes = [("a", handler)]
        served_types = None

    assert served_types(Reports) == {"report.daily", "report.weekly"}
    assert served_types(Computed) == {"a"}
    assert served_types(Everything) is None


def test_functions_and_applications_are_catch_alls_unless_they_declare():
    class Declared(Email):
        served_types = ("email", "email")

    def declared(task): ...

    declared.served_types = ["ping"]
    assert served_types(handler) is None and served_types(Email) is None
    assert served_types(Declared) == {"email"} and served_types(declared) == {"ping"}


@pytest.mark.parametrize(
    "declared, message",
    [
        ("email", "served_types must be a collection of task types, not 'email'"),
        ([], "served_types must name at least one task type"),
        (["email", 3], "task type must be a string, not int"),
        ([""], "task type must not be empty"),
    ],
)
def test_a_bad_declaration_is_a_config_error_naming_the_target(declared, message):
    bad = type("Bad", (queue_core.Application,), {"served_types": declared})
    with pytest.raises(queue_core.ConfigError, match=re.escape(f"Bad: {message}")):
        served_types(bad)


def test_an_instance_method_or_a_router_without_routes_is_refused():
    class Method(queue_core.Application):
        def served_types(self):
            return ["email"]

    class Empty(queue_core.Dispatch):
        pass

    with pytest.raises(queue_core.ConfigError, match=r"Method\.served_types: .* classmethod"):
        served_types(Method)
    with pytest.raises(queue_core.ConfigError, match="Empty: served_types must name at least one task type"):
        served_types(Empty)


def test_a_decider_serves_its_workflows_and_their_steps(monkeypatch):
    monkeypatch.setattr(pqflow.dag, "_registry", {})
    etl = pqflow.Workflow("st_etl")
    ping = pqflow.Workflow("st_ping")

    @etl.step()
    def extract(ctx): ...

    @etl.step(after=extract)
    def load(ctx, extract): ...

    @ping.step()
    def pong(ctx): ...

    class Both(pqflow.Decider):
        workflows = [etl, ping]

    class EtlOnly(pqflow.Decider):
        workflows = [etl]

    assert served_types(Both) == {"st_etl", "st_etl.extract", "st_etl.load", "st_ping", "st_ping.pong"}
    assert served_types(EtlOnly) == {"st_etl", "st_etl.extract", "st_etl.load"}
    # without workflows listed, a decider runs (and so serves) every registered workflow
    assert served_types(pqflow.Decider) == served_types(Both)


def test_describe_types_is_one_short_line():
    assert describe_types(None) == "every task type (catch-all target)"
    assert describe_types(frozenset({"b", "a"})) == "2 task types: a, b"
    long = describe_types(frozenset(f"type-{i:03}" for i in range(500)), limit=100)
    assert long.startswith("500 task types: type-000, type-001") and long.endswith(", ...")
    assert len(long) < 130 and "\n" not in long
