"""Differential fuzz: random workflows (joins, every trigger, maps, maps over maps, failing
steps and items) run once one task at a time with a commit per completion, once in random
worker batches (poll_multi of random size, deferred completions written in random groups,
some with the next claim). Every step must see the same inputs, run once, and every run end
the same way. One seed and 20 workflows per database in the suite; more with PQ_FUZZ_SEEDS=0,1,2,... and
PQ_FUZZ_FLOWS=40."""

from __future__ import annotations

import os
import random
import zlib

import pytest
from fault_support import random_workflow

import pqflow

#: triggers that fire once every parent ended (one_success / one_failed fire early: a step may
#: then legitimately see a parent result or not, depending on timing)
TRIGGERS = ["all_success", "all_done", "none_failed", "all_failed"]
SEEN: dict = {}
RUNS: dict = {}


def _h(*parts) -> int:
    return zlib.crc32(repr(parts).encode())


def _fn(name):
    def fn(ctx, **kw):
        item = kw.pop("item", None)
        key = (ctx.run_id.split("-", 1)[1], name, ctx.index)
        SEEN[(ctx.run_id.split("-", 1)[0],) + key] = (dict(sorted(ctx.results.items())), item)
        RUNS[(ctx.run_id.split("-", 1)[0],) + key] = RUNS.get((ctx.run_id.split("-", 1)[0],) + key, 0) + 1
        if _h(key) % 5 == 0:
            raise RuntimeError("fails")
        if _h(key, "list") % 2 == 0:
            return [(_h(key, i) % 7) for i in range(_h(key, "n") % 4)]
        return _h(key, repr(sorted(ctx.results.items())), item) % 1000

    fn.__name__ = name
    return fn


FLOWS = [random_workflow(f"atk_fz{s}", s, TRIGGERS, _fn) for s in range(int(os.environ.get("PQ_FUZZ_FLOWS", "20")))]


class Decider(pqflow.Decider):
    workflows = FLOWS


class Sequential(Decider):
    batch_completions = False


def _sequential(q, prefix):
    for _ in range(100_000):
        t = q.poll(alive_time=300)
        if t is None:
            return
        Sequential(t).run()
        assert t.deferred is None


def _batched(q, rnd):
    carry = []
    for _ in range(100_000):
        batch = q.poll_multi(rnd.randint(1, 12), alive_time=300, finish=carry)
        for t in carry:
            assert not t.lost, t.key
        carry = []
        if not batch:
            return
        if rnd.random() < 0.8:
            Decider.prefetch(q, batch)
        rnd.shuffle(batch)
        deferred = []
        for t in batch:
            Decider(t).run()
            if t.deferred is not None:
                deferred.append(t)
        rnd.shuffle(deferred)
        while deferred:
            k = rnd.randint(1, len(deferred))
            group, deferred = deferred[:k], deferred[k:]
            if rnd.random() < 0.5:
                carry += group
            else:
                assert q.finish_many(group) == []


def _outcome(q, run_id):
    run = pqflow.get_run(run_id, queue=q)
    return run.status, {n: (s.status, s.result) for n, s in run.steps.items()}


SEEDS = [int(s) for s in os.environ.get("PQ_FUZZ_SEEDS", "0").split(",") if s.strip()]


@pytest.mark.parametrize("seed", SEEDS)
def test_batched_equals_sequential(queue, seed):
    SEEN.clear()
    RUNS.clear()
    for wf in FLOWS:
        for r in range(2):
            wf.start(f"seq-{wf.name}{r}", queue=queue)
    _sequential(queue, "seq")
    for wf in FLOWS:
        for r in range(2):
            wf.start(f"bat-{wf.name}{r}", queue=queue)
    _batched(queue, random.Random(seed))
    bad = []
    for wf in FLOWS:
        for r in range(2):
            a, b = _outcome(queue, f"seq-{wf.name}{r}"), _outcome(queue, f"bat-{wf.name}{r}")
            if a != b:
                bad.append((wf.name, r, a, b))
    assert not bad, bad[:3]
    seq = {k[1:]: v for k, v in SEEN.items() if k[0] == "seq"}
    bat = {k[1:]: v for k, v in SEEN.items() if k[0] == "bat"}
    assert seq == bat
    assert all(n == 1 for n in RUNS.values()), [k for k, n in RUNS.items() if n != 1][:5]
