"""Workflows used by the end-to-end workflow tests (loaded by path in real worker processes).

Every step appends "<run> <step> <pid>" to the file named by the run input's "log", so tests
can count executions from outside.
"""

from __future__ import annotations

import os
import time

import pqflow


def record(ctx, what="run"):
    path = (ctx.data or {}).get("log")
    if path:
        step = ctx.step if getattr(ctx, "index", None) is None else f"{ctx.step}[{ctx.index}]"
        with open(path, "a") as fh:
            fh.write(f"{ctx.run_id} {step} {os.getpid()} {what}\n")


def marker_exists(ctx, name):
    path = (ctx.data or {}).get(name)
    return path is not None and os.path.exists(path)


# diamond: a -> (b, c) -> d -> cleanup(all_done)
diamond = pqflow.Workflow("e2e_diamond", retries=0, retry_wait=0)


@diamond.step()
def a(ctx):
    record(ctx)
    time.sleep((ctx.data or {}).get("sleep", 0))
    return 1


@diamond.step(after=a)
def b(ctx, a):
    record(ctx)
    if (ctx.data or {}).get("fail_b") and not marker_exists(ctx, "fix"):
        raise RuntimeError("b failed on purpose")
    return a + 1


@diamond.step(after=a)
def c(ctx, a):
    record(ctx)
    return a + 2


@diamond.step(after=[b, c])
def d(ctx, b, c):
    record(ctx)
    return b * c


@diamond.step(after=d, trigger="all_done")
def cleanup(ctx):
    record(ctx)
    return "clean"


# wide fan-out / fan-in: root -> w0..w29 -> join
wide = pqflow.Workflow("e2e_wide", retry_wait=0)


@wide.step()
def root(ctx):
    record(ctx)
    return 10


def _make_worker(i):
    def work(ctx, root):
        record(ctx)
        return root + i

    work.__name__ = f"w{i}"
    return work


WIDE_N = 30
_workers = [wide.step(after=root, name=f"w{i}")(_make_worker(i)) for i in range(WIDE_N)]


@wide.step(after=[f"w{i}" for i in range(WIDE_N)])
def join(ctx):
    record(ctx)
    return sum(ctx.results[f"w{i}"] for i in range(WIDE_N))


# retries: flaky fails on its first two attempts
retrying = pqflow.Workflow("e2e_retry", retries=3, retry_wait=0)


@retrying.step()
def flaky(ctx):
    record(ctx)
    if ctx.attempt < 3:
        raise RuntimeError(f"attempt {ctx.attempt} fails")
    return ctx.attempt


@retrying.step(after=flaky)
def after_flaky(ctx, flaky):
    record(ctx)
    return flaky


# cancellable: a long step that watches ctx.cancelled
slow = pqflow.Workflow("e2e_slow", retry_wait=0)


@slow.step()
def long(ctx):
    record(ctx)
    deadline = time.time() + (0.2 if marker_exists(ctx, "fast") else 60)
    while time.time() < deadline and not ctx.cancelled:
        time.sleep(0.05)
    if ctx.cancelled:
        record(ctx, "cancelled")
    return "long done"


@slow.step(after=long)
def after_long(ctx, long):
    record(ctx)
    return long


# join race: two parents, one child
race = pqflow.Workflow("e2e_race", retry_wait=0)


@race.step()
def left(ctx):
    return "l"


@race.step()
def right(ctx):
    return "r"


@race.step(after=[left, right])
def both(ctx, left, right):
    record(ctx)
    return left + right


# a big layered DAG: LAYERS x WIDTH steps, each depending on two steps of the previous layer
big = pqflow.Workflow("e2e_big", retry_wait=0)
LAYERS, WIDTH = 10, 100


def _noop(ctx):
    return 1


for layer in range(LAYERS):
    for i in range(WIDTH):
        after = [] if layer == 0 else [f"s{layer - 1}_{i}", f"s{layer - 1}_{(i + 1) % WIDTH}"]

        def fn(ctx):
            return 1

        fn.__name__ = f"s{layer}_{i}"
        big.step(after=after, name=f"s{layer}_{i}")(fn)


# kill points: k2 SIGKILLs its worker in the middle of its first run; KillingDecider SIGKILLs the
# worker right after k1's completion (and k3's submission) committed
killing = pqflow.Workflow("e2e_kill", retry_wait=0)


def _first_time(ctx, name):
    path = f"{(ctx.data or {}).get('dir')}/{ctx.run_id}.{name}"
    if os.path.exists(path):
        return False
    open(path, "w").close()
    return True


@killing.step()
def k1(ctx):
    record(ctx)
    return 1


@killing.step(after=k1)
def k2(ctx, k1):
    record(ctx)
    if _first_time(ctx, "k2"):
        os.kill(os.getpid(), 9)
    return k1 + 1


@killing.step(after=k2)
def k3(ctx, k2):
    record(ctx)
    return k2 + 1


# maps: customers -> bill (one task per customer, at most 3 at once) -> report
billing = pqflow.Workflow("e2e_billing", retry_wait=0)


@billing.step()
def customers(ctx):
    record(ctx)
    return ctx.data["customers"] if "customers" in ctx.data else [f"c{i}" for i in range(ctx.data.get("n", 5))]


@billing.step(map=customers, retries=1, max_parallel=3)
def bill(ctx, item):
    record(ctx)
    record(ctx, f"start@{time.time():.6f}")
    if item in ctx.data.get("flaky", []) and ctx.attempt == 1:
        raise RuntimeError(f"{item} failed once")
    if item in ctx.data.get("bad", []) and not marker_exists(ctx, "fix"):
        raise RuntimeError(f"{item} cannot be billed")
    time.sleep(ctx.data.get("item_sleep", 0))
    record(ctx, f"end@{time.time():.6f}")
    return {"customer": item, "amount": len(str(item))}


@billing.step(after=bill)
def report(ctx, bill):
    record(ctx)
    return {"customers": [b["customer"] for b in bill], "total": sum(b["amount"] for b in bill)}


# a map whose failed items are tolerated, and a map over a map
tolerant = pqflow.Workflow("e2e_tolerant", retry_wait=0)


@tolerant.step()
def numbers(ctx):
    return list(range(6))


@tolerant.step(map=numbers, allow_failed_items=True)
def invert(ctx, item):
    return 60 // item  # item 0 fails


@tolerant.step(map=invert)
def double(ctx, item):
    record(ctx)
    return None if item is None else item * 2


@tolerant.step(after=[invert, double])
def summary(ctx, invert, double):
    return {"invert": invert, "double": double, "failed": ctx.failed_items}


def _wait_for_files(ctx, names, seconds=60.0):
    """Wait until the files ``<dir>/<run>.<name>`` exist for every name (at most ``seconds``)."""
    paths = [os.path.join(ctx.data["dir"], f"{ctx.run_id}.{n}") for n in names]
    deadline = time.monotonic() + seconds
    while not all(os.path.exists(p) for p in paths) and time.monotonic() < deadline:
        time.sleep(0.002)


def _meet(ctx, name):
    """Arrive at the meeting point ``name`` and wait for both parents of the map to arrive."""
    open(os.path.join(ctx.data["dir"], f"{ctx.run_id}.{name}"), "w").close()
    _wait_for_files(ctx, ["rows", "side"])


# a map over rows that fires on its first parent's success (one_success); both parents end together
late_parent = pqflow.Workflow("e2e_late_parent", retries=0, retry_wait=0)


@late_parent.step()
def rows(ctx):
    record(ctx)
    _meet(ctx, "rows")
    return [1, 2, 3, 4]


@late_parent.step()
def side(ctx):
    record(ctx)
    _meet(ctx, "side")
    if ctx.data.get("side_after_map"):  # end only once an item of the map runs: the map started
        _wait_for_files(ctx, ["item_started"])
    return "side"


@late_parent.step(map=rows, after=[side], trigger="one_success")
def each_row(ctx, item):
    record(ctx)
    open(os.path.join(ctx.data["dir"], f"{ctx.run_id}.item_started"), "w").close()
    _wait_for_files(ctx, ["release"])  # the test looks at the run while the items are open
    return item * 10


@late_parent.step(after=each_row)
def rows_total(ctx, each_row):
    record(ctx)
    return sum(each_row)


class Decider(pqflow.Decider):
    workflows = [diamond, wide, retrying, slow, race, big, killing, billing, tolerant, late_parent]

    def on_step_failed(self, run_id, step, error):
        path = self._log(run_id)
        if path:
            with open(path, "a") as fh:
                fh.write(f"{run_id} {step} {os.getpid()} hook_failed\n")

    def on_run_finished(self, run_id, status):
        path = self._log(run_id)
        if path:
            with open(path, "a") as fh:
                fh.write(f"{run_id} {status} {os.getpid()} hook_finished\n")

    def _log(self, run_id):
        try:
            return (pqflow.get_run(run_id, queue=self.queue).input or {}).get("log")
        except Exception:  # noqa: BLE001
            return None


class KillingDecider(Decider):
    def on_step_finished(self, run_id, step, status):
        if step == "k1":
            run = pqflow.get_run(run_id, queue=self.queue)
            path = f"{(run.input or {}).get('dir')}/{run_id}.after_k1"
            if not os.path.exists(path):
                open(path, "w").close()
                os.kill(os.getpid(), 9)


class KillingOneByOneDecider(KillingDecider):
    batch_completions = False  # each completion in a commit of its own
