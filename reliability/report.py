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
from .scenarios import ALL

RESULTS = ROOT / "reliability" / "results"
RESULTS_MARKERS = ("<!-- reliability:results:begin -->", "<!-- reliability:results:end -->")
PARAMS_MARKERS = ("<!-- reliability:params:begin -->", "<!-- reliability:params:end -->")
ORDER = [m.NAME for m in ALL]
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
    "clock_skew": ["skews", "step", "submitted", "run_now_max_wait_s", "reexecutions"],
    "paused_holders": ["pauses", "reruns", "told_lost", "max_per_user"],
    "lost_acks": ["faults", "occurrences", "attempts_spent", "run_now_max_wait_s", "schedule_lease_max_s"],
}


def _git() -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "queue_core", "perfectsched", "pqflow"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout
        return rev.strip() + ("+local changes" if dirty.strip() else "")
    except OSError:
        return "unknown"


def now() -> str:
    return dt.datetime.now().isoformat(timespec="seconds")


def save(results: list[Result], mode: str) -> Path:
    """Merge ``results`` into today's JSON file; return its path."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    host = socket.gethostname()
    path = RESULTS / f"{dt.date.today().isoformat()}-{host}{'-quick' if mode == 'quick' else ''}.json"
    doc = json.loads(path.read_text()) if path.exists() else {"results": []}
    fresh = {(r.scenario, r.backend) for r in results}
    kept = [r for r in doc["results"] if (r["scenario"], r["backend"]) not in fresh]
    saved, commit = now(), _git()
    rows = [{**r.to_dict(), "measured": r.measured or saved, "commit": commit} for r in results]
    doc.update(
        date=saved,
        host=host,
        mode=mode,
        commit=commit,
        python=platform.python_version(),
        cpus=os.cpu_count(),
        results=sorted(kept + rows, key=lambda r: (ORDER.index(r["scenario"]), r["backend"])),
    )
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def table(doc: dict) -> str:
    """The markdown table of a results file.

    Rows merged from several sittings keep their own commit and time (rows saved before these
    were recorded per row take the file's); when the commits differ, a column shows each row's.
    """
    commits = [r.get("commit", doc["commit"]) for r in doc["results"]]
    times = sorted(r.get("measured") or doc["date"] for r in doc["results"]) or [doc["date"]]
    when = times[0] if times[0] == times[-1] else f"{times[0]} to {times[-1]}"
    mixed = len(set(commits)) > 1
    code = "the commit of each row" if mixed else f"commit {commits[0] if commits else doc['commit']}"
    head = (
        f"Measured {when} on `{doc['host']}` ({doc['cpus']} CPUs, Python {doc['python']}, "
        f"{code}), **{doc['mode']}** parameters.\n\n"
        "| # | scenario | database | result | tasks | kills | restarts | duplicates | losses | "
        f"time to recover | duration | other figures |{' commit |' if mixed else ''}\n"
        f"|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|{'---|' if mixed else ''}\n"
    )
    rows = []
    for r, commit in zip(doc["results"], commits, strict=False):
        rec = "–" if r["recover_s"] is None else f"{r['recover_s']:.1f} s"
        notes = "; ".join(f"{k} {_fmt(r['figures'][k])}" for k in NOTES.get(r["scenario"], []) if k in r["figures"])
        rows.append(
            f"| {ORDER.index(r['scenario']) + 1} | {r['scenario']} | {r['backend']} | "
            f"{'pass' if r['ok'] else '**FAIL**'} | {r['tasks']} | {r['kills']} | {r['restarts']} | "
            f"{r['duplicates']} | {r['losses']} | {rec} | {r['duration_s']:.0f} s | {notes} |"
            + (f" {commit} |" if mixed else "")
        )
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


def write_markdown(json_path: Path, md_path: Path, modules) -> str | None:
    """Replace the text between the markers of ``md_path``: the figures of ``json_path`` and
    the parameters of ``modules``; draw the soak's samples next to it (``<name>-soak.png``).
    Returns None, or why there is no chart."""
    doc = json.loads(json_path.read_text())
    text = md_path.read_text()
    text = _replace(text, RESULTS_MARKERS, table(doc), md_path)
    text = _replace(text, PARAMS_MARKERS, params_table(modules), md_path)
    md_path.write_text(text)
    return soak_chart(doc, md_path.with_name(f"{md_path.stem}-soak.png"))


def soak_chart(doc: dict, path: Path) -> str | None:
    """Draw the soak's samples (memory, descriptors, sessions of the worker processes over
    time, one line per database) into ``path``; returns None, or why there is no chart."""
    soaks = [r for r in doc["results"] if r["scenario"] == "soak" and r["figures"].get("samples")]
    if not soaks:
        return "no soak samples in this results file"
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install -e '.[bench]')"
    panels = [
        ("rss_mb", "resident memory of the worker processes (MB, sum)"),
        ("fds", "open file descriptors (sum)"),
        ("db_sessions", "database sessions"),
    ]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for ax, (key, title) in zip(axes, panels, strict=False):
        for r in soaks:
            pts = [(s["t"] / 60, s[key]) for s in r["figures"]["samples"] if s.get(key) is not None]
            if pts:
                ax.plot(*zip(*pts, strict=True), label=r["backend"], linewidth=1.2)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("minutes")
        ax.set_ylim(bottom=0)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, "not sampled (SQLite has no server)", ha="center", va="center", transform=ax.transAxes)
    lengths = ", ".join(f"{r['backend']} {r['duration_s'] / 60:.0f} min" for r in soaks)
    fig.suptitle(f"pq soak — {doc['host']}, {doc['cpus']} CPUs: {lengths}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return None
