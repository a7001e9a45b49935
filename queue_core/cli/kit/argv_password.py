"""Keeping the database password out of process titles.

A long-running command (``run``) started with ``-D URL`` where URL holds a password re-executes
itself at once, with the URL moved into ``PQ_DATABASE_URL`` and the ``-D`` argument removed,
so the password is not left in ``/proc/<pid>/cmdline`` (readable by every local user through
``ps``) of the worker or its children; ``/proc/<pid>/environ`` is readable only by the same
user and root. The process keeps its pid. Since the option beats the environment variable,
which beats the config file, the precedence is unchanged. See :func:`hide_url_from_argv`.
"""

from __future__ import annotations

import logging
import os
import sys

import click

from .passwords import url_password

#: this process's arguments when a console script parses them (set by ``main_wrapper``);
#: None in-process (tests, embedding): nothing is ever re-executed then
_process_args: list[str] | None = None


def set_process_args(args: list[str] | None) -> None:
    """Note the arguments a console script parses (None: not this process's own argv)."""
    global _process_args
    _process_args = args


def _option_table(command: click.Command) -> dict[str, tuple[str, bool]]:
    """``{"-D": ("pq_database", True), "--burst": ("burst", False), ...}``: name, takes a value."""
    table: dict[str, tuple[str, bool]] = {}
    for p in command.params:
        if isinstance(p, click.Option):
            takes_value = not (p.is_flag or p.count)
            for opt in (*p.opts, *p.secondary_opts):
                table[opt] = (p.name or "", takes_value)
    return table


def without_option(args: list[str], group: click.Command, command: click.Command, name: str) -> tuple[list[str], int]:
    """``args`` (``[<group options>] SUBCOMMAND [...]``) without every occurrence of the option
    whose parameter is ``name`` and its value, tokenised as click does (``-D URL``, ``-DURL``,
    ``-vD URL``, ``--database URL``, ``--database=URL``; nothing after ``--``).
    Returns the new list and how many occurrences were removed."""
    out: list[str] = []
    removed = 0
    table = _option_table(group)
    in_command = False
    i = 0
    while i < len(args):
        tok = args[i]
        i += 1
        if tok == "--":
            return [*out, tok, *args[i:]], removed
        if not tok.startswith("-") or tok == "-":
            out.append(tok)
            if not in_command:  # the subcommand's name
                in_command, table = True, _option_table(command)
            continue
        kept, i, gone = _drop_option(tok, args, i, table, name)
        out += kept
        removed += gone
    return out, removed


def _drop_option(tok: str, args: list[str], i: int, table: dict, name: str) -> tuple[list[str], int, int]:
    """Of the option token ``tok`` (its value may be ``args[i]``): the tokens kept, the index of
    the next token, and how many occurrences of the option ``name`` it held."""
    head, eq, _value = tok.partition("=")
    if head in table and (head.startswith("--") or len(head) > 2):  # a long option
        pname, takes_value = table[head]
        after = i + 1 if takes_value and not eq and i < len(args) else i
        if pname == name:
            return [], after, 1
        return [tok, *args[i:after]], after, 0
    if tok.startswith("--"):  # unknown long option: click refused it already; keep as is
        return [tok], i, 0
    return _drop_short_option(tok, args, i, table, name)


def _drop_short_option(tok: str, args: list[str], i: int, table: dict, name: str) -> tuple[list[str], int, int]:
    """:func:`_drop_option` of short options, possibly clustered: ``-v``, ``-vD URL``, ``-DURL``."""
    kept, out, removed = "-", [], 0
    for j, ch in enumerate(tok[1:], start=2):
        spec = table.get("-" + ch)
        if spec is None:  # not ours to understand: keep the rest untouched
            kept += tok[j - 1 :]
            break
        pname, takes_value = spec
        if not takes_value:
            kept += ch
            continue
        rest = tok[j:]
        if pname == name:
            removed += 1
            if not rest and i < len(args):
                i += 1  # the value is the next argument
        else:
            kept += ch + rest
            if not rest and i < len(args):
                out += [kept, args[i]]
                kept = ""
                i += 1
        break
    if kept not in ("", "-"):
        out.append(kept)
    return out, i, removed


def hide_url_from_argv(ctx: click.Context, url: str | None) -> None:
    """Re-execute this command without a password in its argv.

    When ``-D URL`` (``url``) was given on the command line, URL has a password and this
    process was started as a console script (``perfectqueue``, ``python -m queue_core.cli``, ...), replace
    the process (``execve``: same pid) by the same command with ``-D`` removed and the URL in
    ``PQ_DATABASE_URL``. The option beats the variable and the variable beats the config file,
    so the same URL is used. Does nothing otherwise, or when anything looks unusual.
    """
    if os.name != "posix" or _process_args is None or sys.argv[1:] != _process_args or not sys.executable:
        return
    if ctx.get_parameter_source("pq_database") != click.core.ParameterSource.COMMANDLINE:
        return
    if not url_password(url):
        return
    root = ctx.find_root().command
    args, removed = without_option(_process_args, root, ctx.command, "pq_database")
    orig = list(getattr(sys, "orig_argv", []) or [])
    n = len(_process_args)
    if not removed or len(orig) <= n or (n and orig[-n:] != _process_args):
        return
    interpreter_args = orig[1 : len(orig) - n]  # interpreter options and the script (or -m MODULE)
    env = dict(os.environ)
    env["PQ_DATABASE_URL"] = str(url)
    logging.getLogger("queue_core.cli").debug("re-executing without the database URL in argv")
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, *interpreter_args, *args], env)
    except OSError as exc:  # keep running as we are: a visible password beats no worker
        logging.getLogger("queue_core.cli").warning("could not re-execute without the URL in argv: %s", exc)
