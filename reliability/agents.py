"""Entry points of the processes the scenarios start: ``python -m reliability.agents KIND SPEC``.

SPEC is a JSON object. Kinds:

``worker``     a real ``perfectqueue run`` worker (supervisor and children) serving
               :class:`reliability.handlers.Worker`; SPEC = worker settings (config keys).
``scheduler``  a real ``perfectsched run`` loop in real time; SPEC = scheduler settings, and
               ``target`` (``module:name``) to run that handler on leased occurrences instead
               of the built-in submitter.
``simtick``    a scheduler on an injected clock: ticks at the simulated time read from
               ``clock_file`` (written by the scenario) every ``interval`` s.
``submit``     ``threads`` submitters, each writing ``ack`` to ``ledger`` after ``submit``
               returned and ``error:<Type>`` when it raised, until ``stop_file`` exists or
               ``count`` tasks per thread were acknowledged (from when ``start_file`` exists,
               if given). Task data: ``data``, or the
               items of ``mix`` in turn; ``users``/``caps``/``priorities`` are drawn at random.
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
from pathlib import Path

from . import ledger

TARGET = "reliability.handlers:Worker"


def worker(spec: dict) -> int:
    from queue_core import config
    from queue_core.worker import main as worker

    return worker.run_worker(worker.load_target(TARGET), config.build(spec))


def scheduler(spec: dict) -> int:
    from perfectsched.runner import run_scheduler
    from queue_core.worker import main as worker

    target = spec.pop("target", None)
    return run_scheduler(spec, target=worker.load_target(target) if target else None)


def simtick(spec: dict) -> int:
    import perfectsched

    sc = perfectsched.open(
        spec["url"], spec["schedule_table"], spec["queue_table"], tick_batch=spec.get("tick_batch", 200)
    )
    clock = Path(spec["clock_file"])
    while True:
        sc.tick(now=float(clock.read_text()))
        time.sleep(spec.get("interval", 0.05))


def submit(spec: dict) -> int:
    import queue_core

    q = queue_core.open(spec["url"], spec["table"], pool_size=spec["threads"])
    stop = Path(spec["stop_file"])
    while spec.get("start_file") and not Path(spec["start_file"]).exists():
        time.sleep(0.02)
    threads = [threading.Thread(target=_submitter, args=(q, spec, stop, i)) for i in range(spec["threads"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 0


def _submitter(q, spec: dict, stop: Path, index: int) -> None:
    """Submit distinct keys; with ``retry`` a failed key is submitted again until it is known to
    be in the table (returned, or already exists), so every key it moves past is acknowledged."""
    import queue_core

    rng = random.Random(f"{spec['prefix']}-{index}")
    users = spec.get("users") or [None]
    priorities = spec.get("priorities") or [0]
    caps = spec.get("caps") or {}
    n = 0
    while not stop.exists() and n < spec.get("count", 1 << 60):
        key = f"{spec['prefix']}-{index}-{n}"
        user = rng.choice(users)
        opts = {"user": user, "max_running": caps.get(user) if user else None, "priority": rng.choice(priorities)}
        try:
            data = spec["mix"][n % len(spec["mix"])] if spec.get("mix") else spec.get("data") or {}
            q.submit(key, spec.get("type", "rel_task"), data, **opts)
        except queue_core.IdempotentAlreadyExistsError:
            ledger.append(spec["ledger"], key, 0, "ack")  # an earlier try of this key committed
        except Exception as exc:  # noqa: BLE001 - every error is evidence
            ledger.append(spec["ledger"], key, 0, f"error:{type(exc).__name__}")
            if spec.get("retry"):
                time.sleep(0.05)
                continue
        else:
            ledger.append(spec["ledger"], key, 0, "ack")
        n += 1
        if spec.get("interval"):
            time.sleep(spec["interval"])


KINDS = {"worker": worker, "scheduler": scheduler, "simtick": simtick, "submit": submit}


def main(argv: list[str]) -> int:
    kind, spec = argv[0], json.loads(argv[1])
    return KINDS[kind](spec)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
