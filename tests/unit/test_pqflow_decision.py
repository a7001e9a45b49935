"""Unit tests of pqflow.decision: the pure decide()/explain() functions."""

from __future__ import annotations

import random
import time

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pqflow import dag
from pqflow.dag import Workflow
from pqflow.decision import TERMINAL, decide, explain


def make_snapshot(parents: dict[str, list[str]], triggers: dict[str, str] | None = None) -> dict:
    """A format-1 snapshot from {step: [parents]} (definition order = dict order)."""
    triggers = triggers or {}
    g = nx.DiGraph()
    g.add_nodes_from(parents)
    g.add_edges_from((p, s) for s, ps in parents.items() for p in ps)
    index = {name: i for i, name in enumerate(parents)}
    return {
        "format": 1,
        "workflow": "t",
        "retries": 0,
        "retry_wait": 10,
        "retention": 604800,
        "priority": 0,
        "steps": {
            s: {
                "after": list(ps),
                "trigger": triggers.get(s, "all_success"),
                "retries": 0,
                "retry_wait": 10,
                "inputs": [],
            }
            for s, ps in parents.items()
        },
        "order": list(nx.lexicographical_topological_sort(g, key=index.__getitem__)),
    }


CHAIN = {"a": [], "b": ["a"], "c": ["b"]}
DIAMOND = {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]}
ETL = {"extract": [], "transform": ["extract"], "load": ["transform"], "cleanup": ["load"]}
ETL_TRIGGERS = {"cleanup": "all_done"}
HANDLER = {"a": [], "b": ["a"], "on_error": ["a", "b"]}
HANDLER_TRIGGERS = {"on_error": "one_failed"}

# (id, graph, triggers, submitted, cancel, expected submit, expected statuses (subset), run status)
CASES = [
    ("chain-start", CHAIN, {}, {}, False, ("a",), {"a": "pending", "b": "pending", "c": "pending"}, "running"),
    ("chain-a-running", CHAIN, {}, {"a": "running"}, False, (), {"a": "running", "b": "pending"}, "running"),
    ("chain-a-waiting", CHAIN, {}, {"a": "waiting"}, False, (), {"a": "waiting"}, "running"),
    ("chain-a-done", CHAIN, {}, {"a": "succeeded"}, False, ("b",), {"b": "pending", "c": "pending"}, "running"),
    (
        "chain-all-done",
        CHAIN,
        {},
        {"a": "succeeded", "b": "succeeded", "c": "succeeded"},
        False,
        (),
        {"c": "succeeded"},
        "succeeded",
    ),
    ("chain-a-failed", CHAIN, {}, {"a": "failed"}, False, (), {"b": "skipped", "c": "skipped"}, "failed"),
    ("chain-a-cancelled", CHAIN, {}, {"a": "cancelled"}, False, (), {"b": "skipped", "c": "skipped"}, "cancelled"),
    ("diamond-start", DIAMOND, {}, {}, False, ("a",), {"d": "pending"}, "running"),
    ("diamond-fanout", DIAMOND, {}, {"a": "succeeded"}, False, ("b", "c"), {"d": "pending"}, "running"),
    (
        "diamond-half",
        DIAMOND,
        {},
        {"a": "succeeded", "b": "succeeded", "c": "running"},
        False,
        (),
        {"d": "pending"},
        "running",
    ),
    (
        "diamond-join",
        DIAMOND,
        {},
        {"a": "succeeded", "b": "succeeded", "c": "succeeded"},
        False,
        ("d",),
        {"d": "pending"},
        "running",
    ),
    (
        "diamond-b-failed-early",
        DIAMOND,
        {},
        {"a": "succeeded", "b": "failed", "c": "running"},
        False,
        (),
        {"d": "skipped"},
        "running",
    ),
    (
        "diamond-b-failed",
        DIAMOND,
        {},
        {"a": "succeeded", "b": "failed", "c": "succeeded"},
        False,
        (),
        {"d": "skipped"},
        "failed",
    ),
    (
        "etl-transform-failed",
        ETL,
        ETL_TRIGGERS,
        {"extract": "succeeded", "transform": "failed"},
        False,
        ("cleanup",),
        {"load": "skipped", "cleanup": "pending"},
        "running",
    ),
    (
        "etl-cleanup-done",
        ETL,
        ETL_TRIGGERS,
        {"extract": "succeeded", "transform": "failed", "cleanup": "succeeded"},
        False,
        (),
        {"load": "skipped"},
        "failed",
    ),
    (
        "handler-fires-on-failure",
        HANDLER,
        HANDLER_TRIGGERS,
        {"a": "failed"},
        False,
        ("on_error",),
        {"b": "skipped"},
        "running",
    ),
    (
        "handler-fires-after-late-failure",
        HANDLER,
        HANDLER_TRIGGERS,
        {"a": "succeeded", "b": "failed"},
        False,
        ("on_error",),
        {},
        "running",
    ),
    (
        "one_failed-fires-before-all-done",
        {"x": [], "y": [], "h": ["x", "y"]},
        {"h": "one_failed"},
        {"x": "failed", "y": "running"},
        False,
        ("h",),
        {"y": "running"},
        "running",
    ),
    (
        "handler-waits",
        HANDLER,
        HANDLER_TRIGGERS,
        {"a": "succeeded", "b": "running"},
        False,
        (),
        {"on_error": "pending"},
        "running",
    ),
    (
        "handler-skipped-on-success",
        HANDLER,
        HANDLER_TRIGGERS,
        {"a": "succeeded", "b": "succeeded"},
        False,
        (),
        {"on_error": "skipped"},
        "succeeded",
    ),
    (
        "handler-ran",
        HANDLER,
        HANDLER_TRIGGERS,
        {"a": "failed", "on_error": "succeeded"},
        False,
        (),
        {"b": "skipped"},
        "failed",
    ),
    (
        "all_failed-fires",
        {"a": [], "b": [], "h": ["a", "b"]},
        {"h": "all_failed"},
        {"a": "failed", "b": "failed"},
        False,
        ("h",),
        {},
        "running",
    ),
    (
        "all_failed-waits",
        {"a": [], "b": [], "h": ["a", "b"]},
        {"h": "all_failed"},
        {"a": "failed", "b": "running"},
        False,
        (),
        {"h": "pending"},
        "running",
    ),
    (
        "all_failed-skips-early",
        {"a": [], "b": [], "h": ["a", "b"]},
        {"h": "all_failed"},
        {"a": "succeeded", "b": "running"},
        False,
        (),
        {"h": "skipped"},
        "running",
    ),
    (
        "none_failed-with-skipped-parent",
        {"a": [], "b": ["a"], "c": [], "n": ["b", "c"]},
        {"b": "one_failed", "n": "none_failed"},
        {"a": "succeeded", "c": "succeeded"},
        False,
        ("n",),
        {"b": "skipped"},
        "running",
    ),
    (
        "none_failed-waits",
        {"a": [], "c": [], "n": ["a", "c"]},
        {"n": "none_failed"},
        {"a": "succeeded", "c": "running"},
        False,
        (),
        {"n": "pending"},
        "running",
    ),
    (
        "none_failed-skips",
        {"a": [], "c": [], "n": ["a", "c"]},
        {"n": "none_failed"},
        {"a": "failed", "c": "running"},
        False,
        (),
        {"n": "skipped"},
        "running",
    ),
    (
        "one_success-fires-early",
        {"a": [], "b": [], "o": ["a", "b"]},
        {"o": "one_success"},
        {"a": "running", "b": "succeeded"},
        False,
        ("o",),
        {},
        "running",
    ),
    (
        "one_success-skips",
        {"a": [], "b": [], "o": ["a", "b"]},
        {"o": "one_success"},
        {"a": "failed", "b": "cancelled"},
        False,
        (),
        {"o": "skipped"},
        "failed",
    ),
    (
        "all_done-after-skip",
        {"a": [], "b": ["a"], "c": ["b"]},
        {"c": "all_done"},
        {"a": "failed"},
        False,
        ("c",),
        {"b": "skipped"},
        "running",
    ),
    ("cancel-before-anything", CHAIN, {}, {}, True, (), {"a": "skipped", "b": "skipped", "c": "skipped"}, "cancelled"),
    (
        "cancel-while-running",
        DIAMOND,
        {},
        {"a": "succeeded", "b": "running"},
        True,
        (),
        {"b": "running", "c": "skipped", "d": "skipped"},
        "running",
    ),
    ("cancel-while-waiting", DIAMOND, {}, {"a": "waiting"}, True, (), {"a": "waiting"}, "running"),
    (
        "cancel-finished",
        DIAMOND,
        {},
        {"a": "succeeded", "b": "cancelled"},
        True,
        (),
        {"b": "cancelled", "c": "skipped", "d": "skipped"},
        "cancelled",
    ),
    (
        "cancel-after-completion-keeps-given",
        CHAIN,
        {},
        {"a": "succeeded", "b": "succeeded", "c": "failed"},
        True,
        (),
        {"c": "failed"},
        "cancelled",
    ),
    (
        "run-retry-back-to-waiting",
        CHAIN,
        {},
        {"a": "succeeded", "b": "waiting"},
        False,
        (),
        {"c": "pending"},
        "running",
    ),
]


@pytest.mark.parametrize(
    "graph, triggers, submitted, cancel, submit, statuses, run_status",
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_decide_table(graph, triggers, submitted, cancel, submit, statuses, run_status) -> None:
    d = decide(make_snapshot(graph, triggers), submitted, cancel_requested=cancel)
    assert d.submit == submit
    assert d.run_status == run_status
    assert set(d.statuses) == set(graph)
    for step, status in statuses.items():
        assert d.statuses[step] == status, step
    for step, status in submitted.items():
        assert d.statuses[step] == status
    assert d.skipped == {s for s, status in d.statuses.items() if status == "skipped" and s not in submitted}
    assert not set(d.submit) & set(submitted)
    if cancel:
        assert d.submit == ()


def test_run_retry_makes_finished_run_running_again() -> None:
    snap = make_snapshot(CHAIN)
    assert decide(snap, {"a": "succeeded", "b": "failed"}).run_status == "failed"
    d = decide(snap, {"a": "succeeded", "b": "waiting"})
    assert d.run_status == "running"
    assert d.statuses["c"] == "pending" and "c" not in d.skipped


def test_fan_out_fan_in() -> None:
    mids = [f"m{i}" for i in range(50)]
    graph = {"start": [], **{m: ["start"] for m in mids}, "end": mids}
    snap = make_snapshot(graph)
    assert decide(snap, {}).submit == ("start",)
    d = decide(snap, {"start": "succeeded"})
    assert d.submit == tuple(mids)
    done = {"start": "succeeded", **{m: "succeeded" for m in mids[:-1]}, mids[-1]: "running"}
    assert decide(snap, done).submit == ()
    done[mids[-1]] = "succeeded"
    assert decide(snap, done).submit == ("end",)
    done[mids[7]] = "failed"
    d = decide(snap, done)
    assert d.submit == () and d.skipped == {"end"} and d.run_status == "failed"


def test_submit_follows_snapshot_order() -> None:
    snap = make_snapshot({"z": [], "y": [], "x": []})
    assert decide(snap, {}).submit == ("z", "y", "x")


def test_works_with_workflow_snapshot(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dag, "_registry", {})
    wf = Workflow("etl")

    @wf.step()
    def extract(ctx):
        pass

    @wf.step(after=extract)
    def transform(ctx):
        pass

    @wf.step(after=[transform], trigger="all_done")
    def cleanup(ctx):
        pass

    snap = wf.snapshot()
    assert decide(snap, {}).submit == ("extract",)
    d = decide(snap, {"extract": "failed"})
    assert d.skipped == {"transform"} and d.submit == ("cleanup",)


def test_unknown_step_or_status_rejected() -> None:
    snap = make_snapshot(CHAIN)
    with pytest.raises(ValueError, match=r"unknown step 'x' \(steps: a, b, c\)"):
        decide(snap, {"x": "running"})
    with pytest.raises(ValueError, match="status 'pending'"):
        decide(snap, {"a": "pending"})


def test_decision_is_not_fooled_by_a_mutated_mapping_copy() -> None:
    snap = make_snapshot(CHAIN)
    submitted = {"a": "succeeded"}
    first = decide(snap, submitted)
    submitted["b"] = "succeeded"
    assert first.submit == ("b",)
    assert decide(snap, submitted).submit == ("c",)


def random_dag(n: int, rng: random.Random, max_parents: int = 4) -> dict[str, list[str]]:
    names = [f"s{i}" for i in range(n)]
    graph: dict[str, list[str]] = {}
    for i, name in enumerate(names):
        k = rng.randint(0, min(i, max_parents))
        graph[name] = rng.sample(names[:i], k)
    shuffled = list(graph.items())
    rng.shuffle(shuffled)  # definition order != dependency order
    return dict(shuffled)


def simulate(snap: dict, rng: random.Random, fail_rate: float = 0.0) -> tuple[dict, list[str], int]:
    """Run to completion; return (final submitted statuses, submission log, decide calls)."""
    submitted: dict[str, str] = {}
    log: list[str] = []
    calls = 0
    while True:
        d = decide(snap, submitted)
        calls += 1
        for step in d.submit:
            submitted[step] = "waiting"
            log.append(step)
        if d.run_status != "running":
            return submitted, log, calls
        active = [s for s, status in submitted.items() if status in ("waiting", "running")]
        assert active, "run is running but nothing is in flight or submitted"
        rng.shuffle(active)
        for step in active[: rng.randint(1, len(active))]:
            if submitted[step] == "waiting" and rng.random() < 0.3:
                submitted[step] = "running"
            else:
                submitted[step] = "failed" if rng.random() < fail_rate else "succeeded"


def test_thousand_step_dag_runs_to_completion() -> None:
    rng = random.Random(1234)
    snap = make_snapshot(random_dag(1000, rng))
    submitted, log, calls = simulate(snap, rng)
    assert len(log) == len(set(log)) == 1000
    assert set(submitted.values()) == {"succeeded"}
    assert calls > 10
    final = decide(snap, submitted)
    assert final.run_status == "succeeded" and not final.skipped


def test_thousand_step_dag_with_failures_skips_exactly_downstream() -> None:
    rng = random.Random(99)
    graph = random_dag(1000, rng)
    snap = make_snapshot(graph)
    submitted, log, _ = simulate(snap, rng, fail_rate=0.03)
    assert len(log) == len(set(log))
    final = decide(snap, submitted)
    assert set(final.statuses.values()) <= TERMINAL
    failed = {s for s, status in submitted.items() if status == "failed"}
    assert failed, "seed should produce failures"
    g = nx.DiGraph([(p, s) for s, ps in graph.items() for p in ps])
    g.add_nodes_from(graph)
    downstream = set().union(*(nx.descendants(g, f) for f in failed))
    assert final.skipped == downstream
    assert set(log) == set(graph) - downstream
    assert final.run_status == "failed"


TRIGGER_NAMES = ["all_success", "all_done", "all_failed", "one_failed", "one_success", "none_failed"]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 40), fail_rate=st.sampled_from([0.0, 0.2, 0.6]))
def test_random_triggers_always_terminate_consistently(seed: int, n: int, fail_rate: float) -> None:
    rng = random.Random(seed)
    graph = random_dag(n, rng, max_parents=3)
    triggers = {s: rng.choice(TRIGGER_NAMES) for s, ps in graph.items() if ps}
    snap = make_snapshot(graph, triggers)
    submitted, log, _ = simulate(snap, rng, fail_rate)
    assert len(log) == len(set(log))
    final = decide(snap, submitted)
    assert set(final.statuses.values()) <= TERMINAL
    assert final.skipped == set(graph) - set(log)
    assert final.run_status == ("failed" if "failed" in submitted.values() else "succeeded")
    # Every skipped step's trigger really is impossible given its parents' final statuses.
    for step in final.skipped:
        ps = [final.statuses[p] for p in graph[step]]
        trig = triggers.get(step, "all_success")
        assert trig != "all_done"
        ok = {
            "all_success": all(p == "succeeded" for p in ps),
            "all_failed": all(p == "failed" for p in ps),
            "one_failed": "failed" in ps,
            "one_success": "succeeded" in ps,
            "none_failed": "failed" not in ps,
        }[trig]
        assert not ok, (step, trig, ps)


def test_decide_is_fast_on_a_thousand_steps() -> None:
    rng = random.Random(7)
    snap = make_snapshot(random_dag(1000, rng))
    submitted = {s: "succeeded" for s in snap["order"][:500]}
    decide(snap, submitted)  # warm the per-snapshot cache
    timings = []
    for _ in range(5):
        start = time.perf_counter()
        decide(snap, submitted)
        timings.append(time.perf_counter() - start)
    assert sorted(timings)[2] < 0.05
    fresh = dict(snap)  # a new snapshot object is compiled from scratch
    start = time.perf_counter()
    decide(fresh, submitted)
    assert time.perf_counter() - start < 0.05


EXPLAIN_GRAPH = {
    "extract": [],
    "transform": ["extract"],
    "load": ["transform"],
    "cleanup": ["load"],
    "report": ["extract", "transform"],
}
EXPLAIN_TRIGGERS = {"cleanup": "all_done", "report": "one_failed"}


@pytest.mark.parametrize(
    "submitted, step, cancel, expected",
    [
        (
            {"extract": "succeeded", "transform": "running"},
            "load",
            False,
            "step 'load' is pending: waiting for transform (running)"
            "; trigger all_success; parents: transform (running)",
        ),
        (
            {"extract": "succeeded", "transform": "failed"},
            "load",
            False,
            "step 'load' is skipped: parent transform failed and trigger all_success needs every parent to succeed; "
            "parents: transform (failed)",
        ),
        (
            {"extract": "succeeded", "transform": "succeeded"},
            "report",
            False,
            "step 'report' is skipped: no parent failed and trigger one_failed needs at least one parent to fail; "
            "parents: extract (succeeded), transform (succeeded)",
        ),
        (
            {"extract": "succeeded", "transform": "running"},
            "report",
            False,
            "step 'report' is pending: waiting for transform (running); trigger one_failed; "
            "parents: extract (succeeded), transform (running)",
        ),
        (
            {"extract": "succeeded"},
            "load",
            False,
            "step 'load' is pending: waiting for transform (pending)"
            "; trigger all_success; parents: transform (pending)",
        ),
        (
            {"extract": "succeeded", "transform": "running"},
            "load",
            True,
            "step 'load' will not start: the run was cancelled",
        ),
        ({"extract": "succeeded", "transform": "running"}, "transform", False, "step 'transform' is running"),
        (
            {"extract": "succeeded", "transform": "waiting"},
            "transform",
            False,
            "step 'transform' is waiting in the queue for a worker",
        ),
        ({"extract": "succeeded"}, "extract", False, "step 'extract' succeeded"),
        ({"extract": "failed"}, "extract", False, "step 'extract' failed"),
        ({"extract": "cancelled"}, "extract", True, "step 'extract' was cancelled"),
        ({}, "extract", False, "step 'extract' is ready to be submitted: it has no parents"),
        (
            {"extract": "succeeded", "transform": "failed"},
            "cleanup",
            False,
            "step 'cleanup' is ready to be submitted; trigger all_done; parents: load (skipped)",
        ),
    ],
)
def test_explain(submitted, step, cancel, expected) -> None:
    snap = make_snapshot(EXPLAIN_GRAPH, EXPLAIN_TRIGGERS)
    assert explain(snap, submitted, step, cancel_requested=cancel) == expected


def test_explain_lists_every_culprit() -> None:
    snap = make_snapshot({"a": [], "b": [], "c": [], "d": ["a", "b", "c"]}, {"d": "none_failed"})
    text = explain(snap, {"a": "failed", "b": "succeeded", "c": "failed"}, "d")
    assert text == (
        "step 'd' is skipped: parents a failed, c failed and trigger none_failed needs every parent to finish "
        "with none failed; parents: a (failed), b (succeeded), c (failed)"
    )


def test_explain_unknown_step() -> None:
    snap = make_snapshot(CHAIN)
    with pytest.raises(ValueError, match=r"^unknown step 'x' \(steps: a, b, c\)$"):
        explain(snap, {}, "x")
