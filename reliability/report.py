"""Where the figures go: ``reliability/results/<date>-<host>[-quick].json`` and the table
between the marker comments of ``docs/reliability.md``.

A run merges into the day's file: its (scenario, database) entries replace older ones, the
others are kept, so a full set can be measured in several sittings.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import platform
import socket
import subprocess
from pathlib import Path

from .procs import ROOT
from .result import Result

RESULTS = ROOT / "reliability" / "results"
RESULTS_MARKERS = ("<!-- reliability:results:begin -->", "<!-- reliability:results:end -->")
PARAMS_MARKERS = ("<!-- reliability:params:begin -->", "<!-- reliability:params:end -->")
ORDER = ["worker_crashes", "db_restarts", "graceful_restart", "contention", "scheduler_storm",
         "workflow_chaos", "long_tasks", "soak"]
#: scenario-specific figures shown in the table's last column
NOTES = {
    "worker_crashes": ["reexecutions", "leases_cut"],
    "db_restarts": ["downtime_s", "reexecutions", "burst_acked", "submit_errors", "worker_errors"],
    "graceful_restart": ["usr1", "hup", "reexecutions", "leases_cut"],
    "contention": ["submitted", "claimed", "claims_per_s", "retries_absorbed", "max_running_seen"],
    "scheduler_storm": ["minute_s", "killed_mid_minute"],
    "workflow_chaos": ["runs", "reexecutions", "leases_cut"],
    "long_tasks": ["late"],
    "soak": ["rss_mb_first_last", "fds_first_last", "db_sessions_first_last", "runs"],
}


def _git() -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "queue_core", "perfectsched", "pqflow"],
                               cwd=ROOT, capture_output=True, text=True).stdout
        return rev.strip() + ("+local changes" if dirty.strip() else "")
    except OSError:
        return "unknown"


def save(results: list[Result], mode: str) -> Path:
    """Merge ``results`` into today's JSON file; return its path."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    host = socket.gethostname()
    path = RESULTS / f"{dt.date.today().isoformat()}-{host}{'-quick' if mode == 'quick' else ''}.json"
    doc = json.loads(path.read_text()) if path.exists() else {"results": []}
    fresh = {(r.scenario, r.backend) for r in results}
    kept = [r for r in doc["results"] if (r["scenario"], r["backend"]) not in fresh]
    doc.update(date=dt.datetime.now().isoformat(timespec="seconds"), host=host, mode=mode, commit=_git(),
               python=platform.python_version(), cpus=os.cpu_count(),
               results=sorted(kept + [r.to_dict() for r in results],
                              key=lambda r: (ORDER.index(r["scenario"]), r["backend"])))
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def table(doc: dict) -> str:
    """The markdown table of a results file."""
    head = (f"Measured {doc['date']} on `{doc['host']}` ({doc['cpus']} CPUs, Python {doc['python']}, "
            f"commit {doc['commit']}), **{doc['mode']}** parameters.\n\n"
            "| # | scenario | database | result | tasks | kills | restarts | duplicates | losses | "
            "time to recover | duration | other figures |\n"
            "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
    rows = []
    for r in doc["results"]:
        rec = "–" if r["recover_s"] is None else f"{r['recover_s']:.1f} s"
        notes = "; ".join(f"{k} {_fmt(r['figures'][k])}" for k in NOTES.get(r["scenario"], []) if k in r["figures"])
        rows.append(f"| {ORDER.index(r['scenario']) + 1} | {r['scenario']} | {r['backend']} | "
                    f"{'pass' if r['ok'] else '**FAIL**'} | {r['tasks']} | {r['kills']} | {r['restarts']} | "
                    f"{r['duplicates']} | {r['losses']} | {rec} | {r['duration_s']:.0f} s | {notes} |")
    failures = [f"- {r['scenario']} on {r['backend']}: {f}" for r in doc["results"] for f in r["failures"]]
    tail = ("\n\nFailures:\n\n" + "\n".join(failures)) if failures else ""
    return head + "\n".join(rows) + tail


def _fmt(value) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


def params_table(modules) -> str:
    """Every scenario's parameters, full and quick (the CI sizes), from the code."""
    rows = ["| # | scenario | databases | parameter | full | quick (CI) |", "|---|---|---|---|---|---|"]
    for i, mod in enumerate(modules, 1):
        first = True
        for f in dataclasses.fields(mod.FULL):
            full, quick = getattr(mod.FULL, f.name), getattr(mod.QUICK, f.name)
            head = f"| {i} | {mod.NAME} | {', '.join(mod.BACKENDS)} |" if first else "| | | |"
            rows.append(f"{head} `{f.name}` | {_fmt(full)} | {_fmt(quick) if quick != full else 'same'} |")
            first = False
    return "\n".join(rows)


def _replace(text: str, markers: tuple[str, str], body: str, where: Path) -> str:
    begin, end = markers
    if begin not in text or end not in text:
        raise ValueError(f"{where} has no {begin} ... {end} markers")
    before, rest = text.split(begin, 1)
    _, after = rest.split(end, 1)
    return f"{before}{begin}\n{body}\n{end}{after}"


def write_markdown(json_path: Path, md_path: Path, modules) -> None:
    """Replace the text between the markers of ``md_path``: the figures of ``json_path`` and
    the parameters of ``modules``."""
    text = md_path.read_text()
    text = _replace(text, RESULTS_MARKERS, table(json.loads(json_path.read_text())), md_path)
    text = _replace(text, PARAMS_MARKERS, params_table(modules), md_path)
    md_path.write_text(text)
