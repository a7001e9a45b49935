"""``pqflow``: the command line of pqflow (start, inspect, cancel, retry and draw workflow runs).

Everything but ``run`` and ``graph TARGET`` works from the database alone: a run's DAG is
stored with it. Exit codes and the common options (-D/--table/-c/-e/-v, given after the
subcommand) are those of :mod:`queue_core.cli_common`; in addition an unknown run
(:class:`pqflow.UnknownRunError`) or an unknown step of ``why`` exits 4.
"""

from __future__ import annotations

import re
import sys
import time
from typing import Any

import click

from queue_core.cli import _short_error
from queue_core.cli_common import (
    EXIT_CODES_HELP,
    EXIT_EXISTS,
    EXIT_NOT_FOUND,
    CLIError,
    PQGroup,
    common_options,
    format_time,
    main_wrapper,
    open_queue,
    parse_json_object,
    print_json,
    print_table,
    run_worker_command,
    settings,
    worker_options,
)
from queue_core.errors import AlreadyExistsError, ConfigError
from queue_core.queue import check_name

from . import logic
from .dag import NAME_PATTERN, Workflow, registered_workflows
from .errors import UnknownRunError, UnknownWorkflowError
from .render import FORMATS
from .runtime import MARK, SEP, Decider, Run, _state, _status_of, cancel_run, get_run, retry_run

PROG = "pqflow"
STEP_COLUMNS = ["step", "status", "attempts", "started", "finished", "error"]
RUN_COLUMNS = ["run", "workflow", "status", "steps", "created_at", "finished_at"]
BINARY_FORMATS = ("svg", "png")
#: how long ``cancel`` waits for a decider that is picking the run up right now
CANCEL_PICKUP_WAIT = 10.0
_NAME_RE = re.compile(NAME_PATTERN)
#: longest run id ``start`` accepts: its steps are keyed "<run id>#<step>", step names have at
#: most 64 characters and keys at most 255
MAX_RUN_ID = 255 - len(SEP) - 64


class _FlowErrors(click.Group):
    """Maps pqflow's lookup errors to the documented exit codes (sits below PQGroup in the MRO,
    so PQGroup still turns the result into one ``pqflow: error:`` line)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except UnknownRunError as exc:
            raise CLIError(str(exc), EXIT_NOT_FOUND) from None
        except UnknownWorkflowError as exc:
            raise ConfigError(str(exc)) from None


class FlowGroup(PQGroup, _FlowErrors):
    """PQGroup + UnknownRunError -> exit 4, UnknownWorkflowError -> exit 6."""


@click.group(name=PROG, cls=FlowGroup, epilog=EXIT_CODES_HELP)
@click.version_option(package_name="pq", prog_name=PROG, message="%(prog)s %(version)s")
def cli() -> None:
    """Workflows of Python functions, stored as rows of the queue table.

    Options such as -D URL go after the command: pqflow status RUN -D sqlite:///pq.db
    """


# -- helpers -------------------------------------------------------------------------------------
def _run_id(run_id: str) -> str:
    """A RUN_ID argument checked like any key (exit 1), before it reaches the database driver."""
    return check_name(run_id, "run id")


def _load_run(q, run_id: str) -> Run:
    return get_run(_run_id(run_id), queue=q)


def _step_rows(run: Run) -> list[dict]:
    return [{
        "step": s.name, "status": s.status, "attempts": s.attempts if s.attempts else "-",
        "started": format_time(s.started_at), "finished": format_time(s.finished_at),
        "error": _short_error(s.error),
    } for s in run.steps.values()]


def _run_json(run: Run) -> dict:
    return {
        "run_id": run.run_id,
        "workflow": run.workflow,
        "status": run.status,
        "cancel_requested": run.cancel_requested,
        "picked_up": run.snapshot is not None,
        "input": run.input,
        "created_at": run.created_at,
        "finished_at": run.finished_at,
        "steps": {s.name: {
            "status": s.status, "attempts": s.attempts, "result": s.result, "error": s.error,
            "started_at": s.started_at, "finished_at": s.finished_at,
        } for s in run.steps.values()},
    }


def _counts(statuses: dict[str, str]) -> str:
    done = sum(1 for s in statuses.values() if s == "succeeded")
    return f"{done}/{len(statuses)}" if statuses else "-"


def _load_code(target: str, include: tuple[str, ...], require: tuple[str, ...]) -> Any:
    try:
        from queue_core.worker import load_target
    except ImportError as exc:  # same wording as perfectqueue run
        raise ConfigError(f"the worker is not available in this installation ({exc})") from None
    try:
        return load_target(target, include=list(include), require=list(require))
    except ConfigError:
        # ``-r myapp.flows etl``: a bare workflow name defined by the required modules
        if ":" not in target and target in registered_workflows():
            return registered_workflows()[target]
        raise


def _is_decider(obj: Any) -> bool:
    return isinstance(obj, type) and issubclass(obj, Decider)


# -- run -------------------------------------------------------------------------------------------
@cli.command(short_help="Run a worker serving a pqflow.Decider.")
@click.argument("target")
@worker_options
@common_options(own_logging=True, long_running=True)
def run(target: str, **options: Any) -> None:
    """Run a worker serving TARGET, a pqflow.Decider subclass (module:Name, path/file.py:Name,
    or Name with -r MODULE). Same options as perfectqueue run."""

    def check(handler: Any) -> None:
        if not _is_decider(handler):
            what = f"class {handler.__name__}" if isinstance(handler, type) else type(handler).__name__
            raise ConfigError(f"TARGET {target} is not a pqflow.Decider subclass (it is a {what})")

    run_worker_command(target, check=check, **options)


# -- start -----------------------------------------------------------------------------------------
@cli.command(short_help="Start a run of a workflow.")
@click.argument("workflow")
@click.argument("run_id", metavar="RUN_ID")
@click.argument("data", required=False, metavar="[DATA]")
@common_options
def start(workflow: str, run_id: str, data: str | None) -> None:
    """Start a run: submit task RUN_ID of type WORKFLOW with DATA (a JSON object, default {};
    @FILE reads a file, - reads stdin) as the run's input. No workflow code is needed here:
    the decider takes the DAG snapshot when it first picks the run up."""
    _run_id(run_id)
    if SEP in run_id:
        raise CLIError(f"run id must not contain {SEP!r}: {run_id!r}")
    if len(run_id) > MAX_RUN_ID:
        raise CLIError(f"run id is {len(run_id)} characters long; the limit is {MAX_RUN_ID} "
                       "(its steps are keyed '<run id>#<step>')")
    if not _NAME_RE.match(workflow):
        raise CLIError(f"invalid workflow name {workflow!r}: 1 to 64 letters, digits, '_' or '-', "
                       "starting with a letter or '_' (no dots)")
    payload = parse_json_object(data) if data is not None else {}
    if MARK in payload:
        raise CLIError(f"DATA must not have the key {MARK!r} (reserved for pqflow's own state)")
    with open_queue(settings()) as q:
        try:
            task = q.submit(run_id, workflow, payload)
        except AlreadyExistsError:
            raise CLIError(f"run {run_id!r} already exists (a task with this key is in the table)",
                           EXIT_EXISTS) from None
    click.echo(task.key)


# -- status ----------------------------------------------------------------------------------------
@cli.command(short_help="Show a run and its steps.")
@click.argument("run_id", metavar="RUN_ID")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json includes the input and every step's result.")
@common_options
def status(run_id: str, fmt: str) -> None:
    """Show a run: status, workflow, times, and a table of its steps."""
    with open_queue(settings()) as q:
        r = _load_run(q, run_id)
        if r.snapshot is None and r.finished_at is None and r.status != "running":
            # ended before a decider picked it up (cancelled, or no worker knew the workflow):
            # get_run leaves finished_at unset then; take it from the run row
            r.finished_at = q[run_id].metadata().finished_at
    if fmt == "json":
        print_json(_run_json(r))
        return
    click.echo(f"{'run:':<10} {r.run_id}")
    click.echo(f"{'workflow:':<10} {r.workflow}")
    extra = " (cancel requested)" if r.cancel_requested and r.status == "running" else ""
    click.echo(f"{'status:':<10} {r.status}{extra}")
    click.echo(f"{'created:':<10} {format_time(r.created_at)}")
    click.echo(f"{'finished:':<10} {format_time(r.finished_at)}")
    if r.snapshot is None:
        click.echo("steps:     - (not picked up by a decider yet)" if r.status == "running"
                   else "steps:     - (ended before a decider picked it up)")
        return
    click.echo("")
    print_table(_step_rows(r), STEP_COLUMNS)


# -- runs ------------------------------------------------------------------------------------------
def _run_summary(meta, step_rows: list) -> dict:
    """One line of ``runs`` for run row ``meta`` and its step rows."""
    st = _state(meta)
    if st is None:
        status = "cancelled" if meta.outcome == "cancelled" else ("failed" if meta.finished else "running")
        return {"run": meta.key, "workflow": meta.type, "status": status, "steps": "-", "succeeded": 0,
                "total": 0, "created_at": meta.created_at, "finished_at": meta.finished_at}
    snap = st["dag"]
    submitted = {}
    for m in step_rows:
        name = m.key[len(meta.key) + 1:]
        if name in snap["steps"]:
            submitted[name] = _status_of(m)
    statuses = logic.decide(snap, submitted, cancel_requested=bool(st.get("cancel"))).statuses
    return {"run": meta.key, "workflow": snap["workflow"], "status": st.get("status", "running"),
            "steps": _counts(statuses), "succeeded": sum(1 for s in statuses.values() if s == "succeeded"),
            "total": len(statuses), "created_at": meta.created_at, "finished_at": st.get("finished_at")}


def _marked(meta) -> bool:
    return isinstance(meta.data.get(MARK), dict)


@cli.command(short_help="List workflow runs.")
@click.option("--workflow", metavar="W", help="Only runs of workflow W.")
@click.option("--status", "run_status", type=click.Choice(logic.RUN_STATUSES), help="Only runs with this status.")
@click.option("--limit", type=click.IntRange(min=0), metavar="N", help="At most N runs.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@common_options
def runs(workflow: str | None, run_status: str | None, limit: int | None, fmt: str) -> None:
    """List workflow runs (oldest first) with their status and succeeded/total steps.

    Without --workflow, a run that no decider has picked up yet is listed only if its workflow
    already has other runs in the table (a plain task of that type is otherwise
    indistinguishable from a run)."""
    out: list[dict] = []
    with open_queue(settings()) as q:
        if workflow is not None:
            candidates = [m for m in q.list(type=workflow) if SEP not in m.key]
            steps_of = {m.key: list(q.list(group=m.key)) for m in candidates if _state(m) is not None}
        else:
            candidates, steps_of, known = [], {}, set()
            for m in q.list():
                if SEP in m.key:
                    info = m.data.get(MARK)
                    if isinstance(info, dict) and info.get("run") and info.get("workflow"):
                        steps_of.setdefault(info["run"], []).append(m)
                        known.add(info["workflow"])
                elif "." not in m.type:
                    candidates.append(m)
                    if _state(m) is not None:
                        known.add(_state(m)["dag"]["workflow"])
            candidates = [m for m in candidates if _state(m) is not None or _marked(m) or m.type in known]
    for m in candidates:
        row = _run_summary(m, [s for s in steps_of.get(m.key, []) if s.key.startswith(m.key + SEP)])
        if run_status is not None and row["status"] != run_status:
            continue
        out.append(row)
        if limit is not None and len(out) >= limit:
            break
    if fmt == "json":
        print_json([{"run_id": r["run"], "workflow": r["workflow"], "status": r["status"],
                     "succeeded_steps": r["succeeded"], "total_steps": r["total"],
                     "created_at": r["created_at"], "finished_at": r["finished_at"]} for r in out])
        return
    print_table([{**r, "created_at": format_time(r["created_at"]), "finished_at": format_time(r["finished_at"])}
                 for r in out], RUN_COLUMNS)
    click.echo(f"{len(out)} {'run' if len(out) == 1 else 'runs'}.")


# -- cancel / retry / why ---------------------------------------------------------------------------
def _cancel_unpicked(q, run_id: str) -> str:
    """Cancel the run row of a run no decider has picked up; "started" if one has."""
    def work(tx):
        row = tx.lock(run_id)
        if row is None:
            raise UnknownRunError(f"run {run_id!r} not found")
        if _state(row) is not None:
            return "started"
        if row.finished:
            return "finished"
        if row.running:
            return "busy"  # a decider is picking it up right now: wait for its snapshot
        tx.cancel(run_id)
        return "cancelled"

    return q.transaction(work, what="cancel run")


@cli.command(short_help="Cancel a run.")
@click.argument("run_id", metavar="RUN_ID")
@common_options
def cancel(run_id: str) -> None:
    """Cancel a run: nothing new is submitted, waiting steps are cancelled and running ones told
    to stop. Prints the run's status afterwards (running while steps are still stopping)."""
    _run_id(run_id)
    with open_queue(settings()) as q:
        before = _load_run(q, run_id)
        if before.status != "running":
            raise CLIError(f"run {run_id!r} is already {before.status}")
        deadline = time.monotonic() + CANCEL_PICKUP_WAIT
        while before.snapshot is None:
            outcome = _cancel_unpicked(q, run_id)
            if outcome == "started":
                break
            if outcome == "finished":
                raise CLIError(f"run {run_id!r} is already {_load_run(q, run_id).status}")
            if outcome == "cancelled":
                click.echo(_load_run(q, run_id).status)
                return
            if time.monotonic() > deadline:
                raise CLIError(f"run {run_id!r} is being picked up by a decider; try again")
            time.sleep(0.2)
        click.echo(cancel_run(q, run_id).status)


@cli.command(short_help="Retry a failed or cancelled run.")
@click.argument("run_id", metavar="RUN_ID")
@common_options
def retry(run_id: str) -> None:
    """Re-run the failed, skipped and cancelled steps of a failed or cancelled run; the steps that
    succeeded keep their results. The run's input cannot be changed."""
    with open_queue(settings()) as q:
        before = _load_run(q, run_id)
        if before.snapshot is None:
            if before.status == "running":
                raise CLIError(f"run {run_id!r} is running; only failed or cancelled runs can be retried")
            raise CLIError(f"run {run_id!r} ended ({before.status}) before a decider picked it up; "
                           "start a new run instead")
        click.echo(retry_run(q, run_id).status)


@cli.command(short_help="Explain why a step is (not) running.")
@click.argument("run_id", metavar="RUN_ID")
@click.argument("step")
@common_options
def why(run_id: str, step: str) -> None:
    """Explain in one line why STEP of run RUN_ID has its status (an unknown STEP exits 4)."""
    with open_queue(settings()) as q:
        r = _load_run(q, run_id)
    try:
        click.echo(r.why(step))
    except ValueError as exc:
        raise CLIError(str(exc), EXIT_NOT_FOUND) from None


# -- graph -----------------------------------------------------------------------------------------
def _stdout_is_terminal() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def _pick_workflows(obj: Any, target: str, name: str | None, fmt: str) -> list[Workflow]:
    if isinstance(obj, Workflow):
        if name is not None and name != obj.name:
            raise ConfigError(f"{target} is workflow {obj.name!r}, not {name!r}")
        return [obj]
    if _is_decider(obj):
        wfs = list(obj.workflows)
        if not wfs:
            raise ConfigError(f"{obj.__name__}.workflows is empty")
        names = ", ".join(w.name for w in wfs)
        if name is not None:
            chosen = [w for w in wfs if w.name == name]
            if not chosen:
                raise ConfigError(f"{obj.__name__} has no workflow {name!r} (workflows: {names})")
            return chosen
        if len(wfs) > 1 and fmt != "text":
            raise CLIError(f"{obj.__name__} has {len(wfs)} workflows ({names}); choose one with --workflow NAME")
        return wfs
    what = f"class {obj.__name__}" if isinstance(obj, type) else type(obj).__name__
    raise ConfigError(f"TARGET {target} is neither a pqflow.Workflow nor a pqflow.Decider subclass "
                      f"(it is a {what})")


@cli.command(short_help="Draw a workflow, or a run with its step statuses.")
@click.argument("target", required=False)
@click.option("--run", "run_id", metavar="RUN_ID", help="Draw this run from the database (no code needed).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True)
@click.option("-o", "--output", metavar="FILE", help="Write to FILE (needed for svg/png on a terminal).")
@click.option("--workflow", "workflow_name", metavar="NAME",
              help="With a Decider TARGET: which of its workflows to draw.")
@click.option("-I", "--include", "include", multiple=True, metavar="PATH", help="Add PATH to the import path.")
@click.option("-r", "--require", "require", multiple=True, metavar="MODULE", help="Import MODULE (or FILE.py) first.")
@common_options
def graph(target: str | None, run_id: str | None, fmt: str, output: str | None, workflow_name: str | None,
          include: tuple[str, ...], require: tuple[str, ...]) -> None:
    """Draw TARGET (module:Name or path/file.py:Name of a pqflow.Workflow or Decider), or with
    --run RUN_ID a run coloured by step status. text/dot/mermaid print; svg/png need -o FILE
    unless stdout is redirected."""
    import pqflow

    if (target is None) == (run_id is None):
        raise click.UsageError("give either TARGET or --run RUN_ID")
    if run_id is not None and (workflow_name or include or require):
        raise click.UsageError("--workflow, -I and -r go with TARGET, not --run")
    if fmt in BINARY_FORMATS and output is None and _stdout_is_terminal():
        raise click.UsageError(f"--format {fmt} needs -o FILE (or redirect stdout)")
    if run_id is not None:
        with open_queue(settings()) as q:
            drawings = [pqflow.graph(_load_run(q, run_id), fmt)]
    else:
        obj = _load_code(target, include, require)
        drawings = [pqflow.graph(wf, fmt) for wf in _pick_workflows(obj, target, workflow_name, fmt)]
    data: str | bytes
    data = drawings[0] if len(drawings) == 1 else "\n".join(drawings)  # several: text only
    if output is not None:
        try:
            if isinstance(data, bytes):
                with open(output, "wb") as fh:
                    fh.write(data)
            else:
                with open(output, "w", encoding="utf-8") as fh:
                    fh.write(data)
        except OSError as exc:
            raise CLIError(f"cannot write {output}: {exc.strerror}") from None
        size = len(data) if isinstance(data, bytes) else len(data.encode("utf-8"))
        click.echo(f"wrote {output} ({size} bytes)")
        return
    if isinstance(data, bytes):
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    else:
        click.echo(data, nl=not data.endswith("\n"))


main = main_wrapper(cli, PROG)

__all__ = ["FlowGroup", "cli", "main"]

if __name__ == "__main__":
    main()
