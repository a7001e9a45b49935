"""``pqflow``: the command line of pqflow (start, inspect, cancel, retry and draw workflow runs).

Everything but ``run`` and ``graph TARGET`` works from the database alone: a run's DAG is
stored with it. Exit codes and the common options (-D/--table/-c/-e/-v, given after the
subcommand) are those of :mod:`queue_core.cli.kit`; in addition an unknown run
(:class:`pqflow.UnknownRunError`) or an unknown step of ``why`` exits 4.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from typing import Any, cast

import click

from queue_core.api.queue import check_name
from queue_core.cli.kit.exits import EXIT_CODES_HELP, EXIT_EXISTS, EXIT_NOT_FOUND, CLIError
from queue_core.cli.kit.group import PQGroup, main_wrapper
from queue_core.cli.kit.options import common_options
from queue_core.cli.kit.output import format_time, json_text, print_json, print_table, short_error, terminal_text
from queue_core.cli.kit.parsing import parse_json_object
from queue_core.cli.kit.settings import open_queue, settings
from queue_core.cli.kit.worker_command import run_worker_command, worker_options
from queue_core.errors import ConfigError, TaskError

from . import decision
from .dag import NAME_PATTERN, Workflow, registered_workflows
from .decider import Decider
from .errors import FlowError, UnknownRunError, UnknownWorkflowError
from .lifecycle import check_run_id
from .render import FORMATS
from .rows import RunState
from .runs import Run, StepInfo, cancel_run, get_run, list_runs, retry_run, run_status

PROG = "pqflow"
STEP_COLUMNS = ["step", "status", "attempts", "started", "finished", "error"]
ITEM_COLUMNS = ["index", "status", "attempts", "item", "error"]
RUN_COLUMNS = ["run", "workflow", "status", "steps", "created_at", "finished_at"]
BINARY_FORMATS = ("svg", "png")
#: how long ``cancel`` waits for a decider that is picking the run up right now
CANCEL_PICKUP_WAIT = 10.0
_NAME_RE = re.compile(NAME_PATTERN)


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
    return [
        {
            "step": s.name,
            "status": f"{s.status} ({s.items})" if s.items is not None else s.status,
            "attempts": s.attempts if s.attempts else "-",
            "started": format_time(s.started_at),
            "finished": format_time(s.finished_at),
            "error": short_error(s.error),
        }
        for s in run.steps.values()
    ]


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
        "steps": {
            s.name: {
                "status": s.status,
                "attempts": s.attempts,
                "result": s.result,
                "error": s.error,
                "traceback": s.traceback,
                "started_at": s.started_at,
                "finished_at": s.finished_at,
                **({"items": s.items.__dict__} if s.items is not None else {}),
            }
            for s in run.steps.values()
        },
    }


def _load_code(target: str, include: tuple[str, ...], require: tuple[str, ...]) -> Any:
    try:
        from queue_core.worker.main import load_target
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
        _register(handler)

    run_worker_command(target, check=check, **options)


def _register(decider: type[Decider]) -> None:
    """Record the workflows a decider serves, so that runs submitted as plain tasks are listed."""
    names = sorted(wf.name for wf in decider.workflows)
    try:
        with open_queue(settings()) as q:
            q.transaction(
                lambda tx: [tx.store.run_name_register(tx.conn, "workflow", n) for n in names],
                what="register workflows",
            )
    except TaskError as exc:  # the worker reports an unusable database itself
        logging.getLogger("pqflow").warning("could not record the served workflows: %s", exc)


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
    try:
        check_run_id(run_id)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    if not _NAME_RE.match(workflow):
        raise CLIError(
            f"invalid workflow name {workflow!r}: 1 to 64 letters, digits, '_' or '-', "
            "starting with a letter or '_' (no dots)"
        )
    payload = parse_json_object(data) if data is not None else {}
    with open_queue(settings()) as q:

        def submit(tx) -> bool:
            if not tx.submit(run_id, workflow, payload):
                return False
            tx.store.run_name_register(tx.conn, "workflow", workflow)  # listed by `pqflow runs` at once
            return True

        if not q.transaction(submit, what="start run"):
            raise CLIError(f"run {run_id!r} already exists (a task with this key is in the table)", EXIT_EXISTS)
        nobody = get_run(run_id, queue=q).unserved()
    if nobody is not None:  # stored all the same: a decider started later picks it up
        click.echo(f"{PROG}: warning: {nobody}: run {run_id!r} is stored and waits for one", err=True)
    click.echo(run_id)


# -- status ----------------------------------------------------------------------------------------
@cli.command(short_help="Show a run and its steps.")
@click.argument("run_id", metavar="RUN_ID")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json includes the input and every step's result.",
)
@click.option("--items", "items_of", metavar="STEP", help="List the items of map step STEP instead.")
@common_options
def status(run_id: str, fmt: str, items_of: str | None) -> None:
    """Show a run: status, workflow, times, and a table of its steps (a map step: one line with
    its item counts; --items STEP lists them)."""
    with open_queue(settings()) as q:
        r = _load_run(q, run_id)
        if items_of is not None:
            return _print_items(r, items_of, fmt)
        if r.snapshot is None and r.finished_at is None and r.status != "running":
            # ended before a decider picked it up (cancelled, or no worker knew the workflow):
            # get_run leaves finished_at unset then; take it from the run row
            r.finished_at = q[run_id].metadata().finished_at
        nobody = r.unserved() if r.snapshot is None else None
    if fmt == "json":
        print_json(_run_json(r) | {"unserved": nobody})
        return
    click.echo(f"{'run:':<10} {r.run_id}")
    click.echo(f"{'workflow:':<10} {r.workflow}")
    extra = " (cancel requested)" if r.cancel_requested and r.status == "running" else ""
    click.echo(f"{'status:':<10} {r.status}{extra}")
    click.echo(f"{'created:':<10} {format_time(r.created_at)}")
    click.echo(f"{'finished:':<10} {format_time(r.finished_at)}")
    if r.snapshot is None:
        click.echo(
            "steps:     - (not picked up by a decider yet)"
            if r.status == "running"
            else "steps:     - (ended before a decider picked it up)"
        )
        if nobody is not None:
            click.echo(f"{'waiting:':<10} {nobody}")
        return
    click.echo("")
    print_table(_step_rows(r), STEP_COLUMNS)
    for s in r.steps.values():
        _print_traceback(s)


def _print_traceback(s: StepInfo) -> None:
    """The traceback a failed step kept (its last failed attempt's), indented, after a head line."""
    if s.traceback is None:
        return
    click.echo(terminal_text(f"\ntraceback of step {s.name} ({s.traceback_from}):"))
    for line in s.traceback.splitlines():
        click.echo("  " + terminal_text(line))


def _print_items(run: Run, step: str, fmt: str) -> None:
    try:
        items = run.items(step)
    except ValueError as exc:
        raise CLIError(str(exc), EXIT_NOT_FOUND) from None
    if fmt == "json":
        print_json([i.__dict__ for i in items])
        return
    print_table(
        [
            {
                "index": i.index,
                "status": i.status,
                "attempts": i.attempts,
                "item": json_text(i.item),
                "error": short_error(i.error),
            }
            for i in items
        ],
        ITEM_COLUMNS,
    )


# -- runs ------------------------------------------------------------------------------------------
def _run_summary(row: dict) -> dict:
    """One line of ``runs`` for a run row."""
    state = RunState.load(row.get("workflow"))
    if state is None:  # not picked up by a decider (yet, or ever: cancelled before)
        return {
            "run": row["key"],
            "workflow": row["type"],
            "status": run_status(row),
            "steps": "-",
            "succeeded": 0,
            "total": 0,
            "created_at": row["created_at"],
            "finished_at": row["finished_at"],
        }
    total, done = state.total, state.succeeded
    return {
        "run": row["key"],
        "workflow": row["type"],
        "status": state.status,
        "steps": f"{done}/{total}",
        "succeeded": done,
        "total": total,
        "created_at": row["created_at"],
        "finished_at": state.finished_at,
    }


@cli.command(short_help="List workflow runs.")
@click.option("--workflow", metavar="W", help="Only runs of workflow W.")
@click.option("--status", "run_status", type=click.Choice(decision.RUN_STATUSES), help="Only runs with this status.")
@click.option("--limit", type=click.IntRange(min=0), metavar="N", help="At most N runs.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@common_options
def runs(workflow: str | None, run_status: str | None, limit: int | None, fmt: str) -> None:
    """List workflow runs (oldest first) with their status and succeeded/total steps, from the
    moment they are started (also runs no decider has picked up yet)."""
    out: list[dict] = []
    with open_queue(settings()) as q:
        for row in list_runs(q, workflow=workflow):
            line = _run_summary(row)
            if run_status is not None and line["status"] != run_status:
                continue
            out.append(line)
            if limit is not None and len(out) >= limit:
                break
    if fmt == "json":
        print_json(
            [
                {
                    "run_id": r["run"],
                    "workflow": r["workflow"],
                    "status": r["status"],
                    "succeeded_steps": r["succeeded"],
                    "total_steps": r["total"],
                    "created_at": r["created_at"],
                    "finished_at": r["finished_at"],
                }
                for r in out
            ]
        )
        return
    print_table(
        [{**r, "created_at": format_time(r["created_at"]), "finished_at": format_time(r["finished_at"])} for r in out],
        RUN_COLUMNS,
    )
    click.echo(f"{len(out)} {'run' if len(out) == 1 else 'runs'}.")


# -- cancel / retry / why ---------------------------------------------------------------------------
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
        while True:
            try:
                click.echo(cancel_run(q, run_id).status)
                return
            except FlowError as exc:
                if "picked up" not in str(exc) or time.monotonic() > deadline:
                    raise CLIError(str(exc)) from None
            time.sleep(0.2)


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
            raise CLIError(
                f"run {run_id!r} ended ({before.status}) before a decider picked it up; start a new run instead"
            )
        click.echo(retry_run(q, run_id).status)


@cli.command(short_help="Explain why a step is (not) running.")
@click.argument("run_id", metavar="RUN_ID")
@click.argument("step")
@common_options
def why(run_id: str, step: str) -> None:
    """Explain in one line why STEP of run RUN_ID has its status (an unknown STEP exits 4)."""
    with open_queue(settings()) as q:  # why reads the live workers too: before the queue closes
        r = _load_run(q, run_id)
        try:
            click.echo(terminal_text(r.why(step)))
        except ValueError as exc:
            raise CLIError(str(exc), EXIT_NOT_FOUND) from None
    _print_traceback(r.steps[step])


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
    raise ConfigError(f"TARGET {target} is neither a pqflow.Workflow nor a pqflow.Decider subclass (it is a {what})")


def _code_drawing(
    target: str, fmt: str, workflow_name: str | None, include: tuple[str, ...], require: tuple[str, ...]
) -> str | bytes:
    """The drawing of TARGET's workflow, or of its several workflows one after another."""
    import pqflow

    obj = _load_code(target, include, require)
    drawings = [pqflow.graph(wf, fmt) for wf in _pick_workflows(obj, target, workflow_name, fmt)]
    if len(drawings) == 1:
        return drawings[0]
    return "\n".join(cast(list[str], drawings))  # several only as text: _pick_workflows refuses them in others


@cli.command(short_help="Draw a workflow, or a run with its step statuses.")
@click.argument("target", required=False)
@click.option("--run", "run_id", metavar="RUN_ID", help="Draw this run from the database (no code needed).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True)
@click.option("-o", "--output", metavar="FILE", help="Write to FILE (needed for svg/png on a terminal).")
@click.option(
    "--workflow", "workflow_name", metavar="NAME", help="With a Decider TARGET: which of its workflows to draw."
)
@click.option("-I", "--include", "include", multiple=True, metavar="PATH", help="Add PATH to the import path.")
@click.option("-r", "--require", "require", multiple=True, metavar="MODULE", help="Import MODULE (or FILE.py) first.")
@common_options
def graph(
    target: str | None,
    run_id: str | None,
    fmt: str,
    output: str | None,
    workflow_name: str | None,
    include: tuple[str, ...],
    require: tuple[str, ...],
) -> None:
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
    data: str | bytes
    if run_id is not None:
        with open_queue(settings()) as q:
            data = pqflow.graph(_load_run(q, run_id), fmt)
    elif target is not None:
        data = _code_drawing(target, fmt, workflow_name, include, require)
    else:  # refused above
        raise click.UsageError("give either TARGET or --run RUN_ID")
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
