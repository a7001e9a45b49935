"""Unit tests of pqflow.dag: declaring, validating and snapshotting workflows."""

from __future__ import annotations

import importlib
import json
import sys
import textwrap

import networkx as nx
import pytest

from pqflow import dag
from pqflow.dag import Workflow, get_workflow, registered_workflows, snapshot_graph
from pqflow.errors import FlowError, UnknownWorkflowError, WorkflowDefinitionError


@pytest.fixture(autouse=True)
def fresh_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dag, "_registry", {})


def make_etl() -> tuple[Workflow, dict]:
    etl = Workflow("etl")

    @etl.step()
    def extract(ctx):
        return [1, 2, 3]

    @etl.step(after=extract, retries=3, retry_wait=10)
    def transform(ctx, extract):
        return [x * 2 for x in extract]

    @etl.step(after=[transform])
    def load(ctx, transform):
        return len(transform)

    @etl.step(after=[load], trigger="all_done")
    def cleanup(ctx):
        return "clean"

    return etl, {"extract": extract, "transform": transform, "load": load, "cleanup": cleanup}


def test_decorated_functions_stay_plain_callables() -> None:
    etl, fns = make_etl()
    assert fns["transform"](None, [1, 2]) == [2, 4]
    assert fns["extract"](None) == [1, 2, 3]
    sd = fns["transform"].__pqflow_step__
    assert sd.name == "transform" and sd.after == ("extract",) and sd.retries == 3
    assert sd.fn is fns["transform"]
    assert list(etl.steps) == ["extract", "transform", "load", "cleanup"]


def test_after_by_function_name_and_list() -> None:
    wf = Workflow("mixed")

    @wf.step()
    def a(ctx):
        pass

    @wf.step()
    def b(ctx):
        pass

    @wf.step(after="a")
    def c(ctx):
        pass

    @wf.step(after=(a, "b", c, a))
    def d(ctx):
        pass

    assert wf.steps["c"].after == ("a",)
    assert wf.steps["d"].after == ("a", "b", "c")  # duplicates dropped, order kept
    assert set(wf.graph().edges) == {("a", "c"), ("a", "d"), ("b", "d"), ("c", "d")}


def test_forward_references_by_name() -> None:
    wf = Workflow("fwd")

    @wf.step(after="later")
    def first(ctx, later):
        return later

    @wf.step()
    def later(ctx):
        return 1

    wf.validate()
    assert wf.snapshot()["order"] == ["later", "first"]
    assert wf.steps["first"].inputs == ("later",)


def test_unknown_forward_reference_is_reported_with_hint() -> None:
    wf = Workflow("etl")

    @wf.step()
    def transform(ctx):
        pass

    @wf.step(after="trnsform")
    def load(ctx):
        pass

    with pytest.raises(WorkflowDefinitionError) as exc:
        wf.snapshot()
    assert str(exc.value) == (
        "workflow 'etl': step 'load' depends on unknown step 'trnsform'; did you mean 'transform'?"
    )


def test_unknown_step_without_close_match_has_no_hint() -> None:
    wf = Workflow("etl")

    @wf.step(after="zzz")
    def load(ctx):
        pass

    with pytest.raises(WorkflowDefinitionError, match=r"unknown step 'zzz'$"):
        wf.validate()


def test_cycle_message_lists_the_steps_on_it() -> None:
    wf = Workflow("etl")

    @wf.step()
    def root(ctx):
        pass

    @wf.step(after=["root", "c"])
    def a(ctx):
        pass

    @wf.step(after="a")
    def b(ctx):
        pass

    @wf.step(after="b")
    def c(ctx):
        pass

    with pytest.raises(WorkflowDefinitionError) as exc:
        wf.graph()
    assert str(exc.value) == "workflow 'etl' has a cycle: a -> b -> c -> a"


def test_self_cycle() -> None:
    wf = Workflow("loop")

    @wf.step(after="a")
    def a(ctx):
        pass

    with pytest.raises(WorkflowDefinitionError, match=r"has a cycle: a -> a$"):
        wf.validate()


def test_function_from_other_workflow_or_plain_function_refused() -> None:
    one = Workflow("one")
    two = Workflow("two")

    @one.step()
    def foreign(ctx):
        pass

    def plain(ctx):
        pass

    with pytest.raises(WorkflowDefinitionError, match=r"step 'foreign' of workflow 'one', not of this workflow"):
        two.step(after=foreign)
    with pytest.raises(WorkflowDefinitionError, match=r"'.*plain', which is not a step"):
        two.step(after=[plain])
    assert two.steps == {}


def test_bare_decorator_without_parentheses_is_explained() -> None:
    wf = Workflow("bare")
    with pytest.raises(WorkflowDefinitionError, match=r"with parentheses"):

        @wf.step  # type: ignore[arg-type]
        def a(ctx):
            pass


def test_non_callable_refused() -> None:
    wf = Workflow("nc")
    with pytest.raises(WorkflowDefinitionError, match="must be callable"):
        wf.step(name="x")(42)  # type: ignore[arg-type]


def test_step_without_context_parameter_refused() -> None:
    wf = Workflow("noctx")
    with pytest.raises(WorkflowDefinitionError, match="run context as its first positional parameter"):

        @wf.step()
        def a():
            pass


def test_duplicate_step_name_refused() -> None:
    wf = Workflow("dup")

    @wf.step()
    def a(ctx):
        pass

    with pytest.raises(WorkflowDefinitionError, match=r"step 'a' is already defined at .*test_pqflow_dag.py:\d+"):

        @wf.step(name="a")
        def other(ctx):
            pass

    assert wf.steps["a"].fn is a


def test_same_function_cannot_be_two_steps() -> None:
    wf = Workflow("twice")

    def f(ctx):
        pass

    wf.step(name="a")(f)
    with pytest.raises(WorkflowDefinitionError, match="already step 'a' of workflow 'twice'"):
        wf.step(name="b")(f)


def test_same_call_site_replaces_step() -> None:
    wf = Workflow("loopsteps")
    fns = []
    for i in range(2):

        def f(ctx, i=i):
            return i

        fns.append(wf.step(name="a")(f))
    assert list(wf.steps) == ["a"]
    assert wf.steps["a"].fn is fns[1]


def test_duplicate_workflow_name_from_different_call_sites_refused() -> None:
    first = Workflow("etl")
    line = sys._getframe().f_lineno - 1
    with pytest.raises(WorkflowDefinitionError) as exc:
        Workflow("etl")
    assert str(exc.value) == f"workflow name 'etl' is already defined at {__file__}:{line}"
    assert get_workflow("etl") is first


def test_same_call_site_reexecuted_replaces_workflow() -> None:
    code = compile(
        textwrap.dedent(
            """
            wf = Workflow("reexec")

            @wf.step()
            def a(ctx):
                return 1
            """
        ),
        "/virtual/flows.py",
        "exec",
    )
    ns1: dict = {"Workflow": Workflow}
    ns2: dict = {"Workflow": Workflow}
    exec(code, ns1)
    exec(code, ns2)
    assert ns1["wf"] is not ns2["wf"]
    assert get_workflow("reexec") is ns2["wf"]
    assert registered_workflows() == {"reexec": ns2["wf"]}


def test_module_reload_replaces_workflow(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pqflow_reload_mod.py").write_text(
        "from pqflow.dag import Workflow\n"
        "wf = Workflow('reloaded')\n"
        "@wf.step()\n"
        "def a(ctx):\n"
        "    return 1\n"
        "@wf.step(after=a)\n"
        "def b(ctx, a):\n"
        "    return a + 1\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "pqflow_reload_mod", raising=False)
    mod = importlib.import_module("pqflow_reload_mod")
    old = mod.wf
    mod = importlib.reload(mod)
    assert mod.wf is not old
    assert get_workflow("reloaded") is mod.wf
    assert mod.wf.snapshot()["order"] == ["a", "b"]
    del sys.modules["pqflow_reload_mod"]


def test_get_workflow_unknown() -> None:
    Workflow("transform")
    with pytest.raises(UnknownWorkflowError, match=r"unknown workflow 'transfrom'; did you mean 'transform'\?"):
        get_workflow("transfrom")
    assert isinstance(UnknownWorkflowError(), LookupError)
    assert isinstance(UnknownWorkflowError(), FlowError)


@pytest.mark.parametrize("name", ["", "1abc", "a.b", "a b", "x" * 65, "é", None])
def test_bad_workflow_names(name) -> None:
    with pytest.raises(WorkflowDefinitionError, match="invalid workflow name"):
        Workflow(name)


def test_workflow_name_rule_mentions_dots() -> None:
    with pytest.raises(WorkflowDefinitionError, match="no dots"):
        Workflow("my.flow")


def test_good_names() -> None:
    wf = Workflow("_a-B_9" + "x" * 58)  # 64 characters
    wf.step(name="s-1_" + "y" * 60)(lambda ctx: None)
    assert len(wf.name) == 64 and list(wf.steps) == ["s-1_" + "y" * 60]


@pytest.mark.parametrize("name", ["a.b", "9", "", "with space"])
def test_bad_step_names(name) -> None:
    wf = Workflow("steps")
    with pytest.raises(WorkflowDefinitionError, match="invalid step name"):
        wf.step(name=name)
    with pytest.raises(WorkflowDefinitionError, match="invalid step name"):
        wf.step(after=name)


def test_lambda_needs_a_name() -> None:
    wf = Workflow("lam")
    with pytest.raises(WorkflowDefinitionError, match=r"invalid step name '<lambda>'"):
        wf.step()(lambda ctx: None)


def test_bad_trigger_lists_valid_ones() -> None:
    wf = Workflow("trig")
    with pytest.raises(WorkflowDefinitionError) as exc:
        wf.step(trigger="always")
    msg = str(exc.value)
    assert "unknown trigger 'always'" in msg
    for trigger in ("all_success", "all_done", "all_failed", "one_failed", "one_success", "none_failed"):
        assert trigger in msg


def test_failure_trigger_on_root_step_refused() -> None:
    wf = Workflow("rootfail")

    @wf.step(trigger="one_failed")
    def handler(ctx):
        pass

    with pytest.raises(WorkflowDefinitionError, match="trigger one_failed but no parents"):
        wf.validate()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"retries": -1},
        {"retries": 1.5},
        {"retries": True},
        {"retry_wait": -1},
        {"retry_wait": float("nan")},
        {"retention": 0},
        {"priority": "high"},
    ],
)
def test_bad_workflow_parameters(kwargs) -> None:
    with pytest.raises(WorkflowDefinitionError):
        Workflow("params", **kwargs)


def test_bad_step_parameters() -> None:
    wf = Workflow("sparams")
    with pytest.raises(WorkflowDefinitionError, match="retries must be an integer"):
        wf.step(retries=-2)
    with pytest.raises(WorkflowDefinitionError, match="retry_wait must be"):
        wf.step(retry_wait="soon")


def test_parameter_not_an_ancestor_without_default_refused() -> None:
    wf = Workflow("p1")

    @wf.step()
    def a(ctx):
        pass

    @wf.step(after=a)
    def b(ctx, a, config):
        pass

    with pytest.raises(WorkflowDefinitionError) as exc:
        wf.validate()
    assert "parameter 'config' of step 'b'" in str(exc.value)
    assert "neither an upstream step nor has a default" in str(exc.value)


def test_parameter_naming_a_non_upstream_step_refused() -> None:
    wf = Workflow("p2")

    @wf.step()
    def a(ctx):
        pass

    @wf.step()
    def b(ctx, a):
        pass

    with pytest.raises(
        WorkflowDefinitionError, match=r"parameter 'a' of step 'b' names step 'a', which is not upstream"
    ):
        wf.snapshot()


def test_ancestor_defaulted_and_variadic_parameters_accepted() -> None:
    wf = Workflow("p3")

    @wf.step()
    def a(ctx):
        return 1

    @wf.step(after=a)
    def b(ctx, a):
        return a + 1

    @wf.step(after=b)
    def c(context, b, a, limit=10, *args, verbose=False, **kwargs):  # a is a grandparent
        return a + b

    wf.validate()
    assert wf.steps["c"].inputs == ("b", "a")
    assert wf.steps["b"].inputs == ("a",)
    assert wf.snapshot()["steps"]["c"]["inputs"] == ["b", "a"]
    assert c(None, 2, 1) == 3


def test_positional_only_parameter_without_default_refused() -> None:
    wf = Workflow("p4")

    @wf.step()
    def a(ctx):
        pass

    @wf.step(after=a)
    def b(ctx, a, /):
        pass

    with pytest.raises(WorkflowDefinitionError, match="positional-only"):
        wf.validate()


def test_validate_is_idempotent_and_rechecks_after_new_steps() -> None:
    wf = Workflow("idem")

    @wf.step()
    def a(ctx):
        pass

    wf.validate()
    wf.validate()

    @wf.step(after="missing")
    def b(ctx):
        pass

    with pytest.raises(WorkflowDefinitionError, match="unknown step 'missing'"):
        wf.validate()


def test_empty_workflow_invalid() -> None:
    with pytest.raises(WorkflowDefinitionError, match="has no steps"):
        Workflow("empty").snapshot()


def test_snapshot_format_round_trip_and_retry_defaults() -> None:
    etl, _ = make_etl()
    snap = etl.snapshot()
    assert json.loads(json.dumps(snap)) == snap
    assert list(snap) == [
        "format",
        "workflow",
        "retries",
        "retry_wait",
        "retention",
        "priority",
        "queue",
        "steps",
        "order",
    ]
    assert snap["queue"] == "default"
    assert snap["format"] == 1 and snap["workflow"] == "etl"
    assert (snap["retries"], snap["retry_wait"], snap["retention"], snap["priority"]) == (0, 10, 604800, 0)
    assert snap["steps"]["extract"] == {
        "after": [],
        "trigger": "all_success",
        "retries": 0,
        "retry_wait": 10,
        "inputs": [],
        "queue": "default",
    }
    assert snap["steps"]["transform"] == {
        "after": ["extract"],
        "trigger": "all_success",
        "retries": 3,
        "retry_wait": 10,
        "inputs": ["extract"],
        "queue": "default",
    }
    assert snap["steps"]["cleanup"]["trigger"] == "all_done"
    assert snap["order"] == ["extract", "transform", "load", "cleanup"]


def test_step_retries_default_from_workflow() -> None:
    wf = Workflow("defaults", retries=2, retry_wait=30, retention=60, priority=5)

    @wf.step()
    def a(ctx):
        pass

    @wf.step(after=a, retries=0, retry_wait=1.5)
    def b(ctx):
        pass

    snap = wf.snapshot()
    assert (snap["steps"]["a"]["retries"], snap["steps"]["a"]["retry_wait"]) == (2, 30)
    assert (snap["steps"]["b"]["retries"], snap["steps"]["b"]["retry_wait"]) == (0, 1.5)
    assert (snap["retention"], snap["priority"]) == (60, 5)
    assert wf.graph().nodes["a"] == {"trigger": "all_success", "retries": 2, "retry_wait": 30}


def test_topological_order_follows_definition_order() -> None:
    wf = Workflow("topo")
    # Defined out of dependency order, with forward references.
    wf.step(name="z", after=["y", "x"])(lambda ctx: None)
    wf.step(name="y", after="w")(lambda ctx: None)
    wf.step(name="x")(lambda ctx: None)
    wf.step(name="w")(lambda ctx: None)
    wf.step(name="v")(lambda ctx: None)
    order = wf.snapshot()["order"]
    assert order == ["x", "w", "y", "z", "v"]
    g = wf.graph()
    assert all(order.index(u) < order.index(v) for u, v in g.edges)


def test_graph_and_snapshot_graph_agree() -> None:
    etl, _ = make_etl()
    g = etl.graph()
    assert isinstance(g, nx.DiGraph)
    assert list(g.nodes) == ["extract", "transform", "load", "cleanup"]
    assert set(g.edges) == {("extract", "transform"), ("transform", "load"), ("load", "cleanup")}
    assert g.nodes["cleanup"]["trigger"] == "all_done"
    assert g.nodes["transform"]["retries"] == 3
    rebuilt = snapshot_graph(json.loads(json.dumps(etl.snapshot())))
    assert nx.utils.graphs_equal(g, rebuilt)


def test_snapshot_graph_rejects_unknown_format() -> None:
    with pytest.raises(ValueError, match="format"):
        snapshot_graph({"format": 99, "steps": {}})
