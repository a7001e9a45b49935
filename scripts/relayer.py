"""Move modules to new places and rewrite every reference to them (a one-off, reproducible).

    python scripts/relayer.py          # apply MOVES to the working tree (git mv + rewrites)
    python scripts/relayer.py --check  # say what would change, change nothing

References rewritten: dotted names (``queue_core.apart``, ``:mod:`queue_core.store.screen```,
``"queue_core.cli:main"``) and paths (``queue_core/apart.py``) in every text file; relative
imports (``from .apart import x``, ``from . import policy``) and ``from package import module``
in every Python file, recomputed from each file's new place. Import order and line length are
left to ``ruff check --fix`` and ``ruff format`` afterwards.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: new subpackages and what they hold (their ``__init__.py`` docstrings)
PACKAGES = {
    "queue_core.rules": "The queue's rules as pure functions and checks: no I/O, no SQL, no clock.",
    "queue_core.api": "The queue API: Queue and its parts, tasks, transactions, handlers, tracing.",
    "queue_core.ops": "What operators run beside the queue: Prometheus metrics and their HTTP server.",
    "queue_core.worker": "The worker runtime: supervisor, processors, monitors, settlers, signals, service loop.",
    "queue_core.cli": "``perfectqueue``: its commands, and the kit the three command lines share.",
}

#: old module -> new module (packages move with everything under them)
MOVES = {
    # pure rules
    "queue_core.policy": "queue_core.rules.policy",
    "queue_core.statistics": "queue_core.rules.statistics",
    "queue_core.attempt_events": "queue_core.rules.attempt_events",
    "queue_core.failures": "queue_core.rules.failure_groups",
    "queue_core.strict_json": "queue_core.rules.strict_json",
    "queue_core.validate": "queue_core.rules.validate",
    "queue_core.row_states": "queue_core.rules.row_states",
    "queue_core.url_secrets": "queue_core.rules.url_secrets",
    "queue_core.tracebacks": "queue_core.rules.tracebacks",
    # the API and the parts of Queue
    "queue_core.queue": "queue_core.api.queue",
    "queue_core.task": "queue_core.api.task",
    "queue_core.transaction": "queue_core.api.transaction",
    "queue_core.app": "queue_core.api.app",
    "queue_core.deferred": "queue_core.api.deferred",
    "queue_core.browse": "queue_core.api.queue_browse",
    "queue_core.bulk": "queue_core.api.queue_bulk",
    "queue_core.insight": "queue_core.api.queue_insight",
    "queue_core.queue_controls": "queue_core.api.queue_controls",
    "queue_core.queue_stats": "queue_core.api.queue_stats",
    "queue_core.history": "queue_core.api.task_history",
    "queue_core.stream": "queue_core.api.event_stream",
    "queue_core.registry": "queue_core.api.worker_registry",
    "queue_core.tracing": "queue_core.api.tracing",
    # operations
    "queue_core.metrics": "queue_core.ops.metrics",
    "queue_core.metrics_http": "queue_core.ops.metrics_http",
    # the worker runtime
    "queue_core.worker": "queue_core.worker.main",
    "queue_core.service": "queue_core.worker.service",
    "queue_core.supervisor": "queue_core.worker.supervisor",
    "queue_core.processor": "queue_core.worker.processor",
    "queue_core.monitor": "queue_core.worker.monitor",
    "queue_core.settler": "queue_core.worker.settler",
    "queue_core.thread_worker": "queue_core.worker.thread_worker",
    "queue_core.burst": "queue_core.worker.burst",
    "queue_core.chores": "queue_core.worker.periodic",
    "queue_core.apart": "queue_core.worker.forked_check",
    "queue_core.listener": "queue_core.worker.listener",
    "queue_core.wakeup": "queue_core.worker.wakeup",
    "queue_core.lease_ledger": "queue_core.worker.lease_ledger",
    "queue_core.logs": "queue_core.worker.logs",
    "queue_core.loader": "queue_core.worker.loader",
    # the command line
    "queue_core.cli": "queue_core.cli.main",
    "queue_core.cli_bulk": "queue_core.cli.failure_commands",
    "queue_core.cli_insight": "queue_core.cli.insight_commands",
    "queue_core.cli_metrics": "queue_core.cli.metrics_command",
    "queue_core.cli_queues": "queue_core.cli.queue_commands",
    "queue_core.cli_tags": "queue_core.cli.tag_commands",
    "queue_core.clikit": "queue_core.cli.kit",
    # names that say what the module holds
    "queue_core.store.screen": "queue_core.store.claim_screen",
    "queue_core.store.typed": "queue_core.store.typed_claims",
}

#: modules still started by ``python -m`` under their old name (a ``__main__`` in the package)
KEEP_QUOTED = {"queue_core.cli"}
#: the ``__main__.py`` of those packages
MAINS = {
    "queue_core/cli/__main__.py": (
        '"""``python -m queue_core.cli``: the perfectqueue command."""\n\nfrom .main import main\n\nmain()\n'
    )
}

TEXT_SUFFIXES = {".py", ".md", ".toml", ".cfg", ".ini", ".sh", ".txt", ".html", ".j2", ".yml", ".yaml", ".js"}
SKIP_DIRS = {".git", ".venv", "node_modules", "__pycache__", "pq.egg-info", ".mypy_cache", ".ruff_cache"}


def module_path(name: str, package: bool) -> Path:
    return Path(*name.split(".")) / "__init__.py" if package else Path(*name.split(".")).with_suffix(".py")


def old_modules() -> dict[str, Path]:
    """Every module of the tree's Python packages, by dotted name, and its file."""
    found = {}
    for top in ("queue_core", "perfectsched", "pqflow", "pqweb"):
        for path in (ROOT / top).rglob("*.py"):
            rel = path.relative_to(ROOT)
            parts = list(rel.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = rel
    return found


def new_name(name: str) -> str:
    """Where module ``name`` lives after the moves (a package's modules move with it)."""
    for old in sorted(MOVES, key=len, reverse=True):
        if name == old or name.startswith(old + "."):
            return MOVES[old] + name[len(old) :]
    return name


def file_moves(modules: dict[str, Path]) -> dict[Path, Path]:
    moves = {}
    for name, path in modules.items():
        target = new_name(name)
        if target != name:
            moves[path] = module_path(target, path.name == "__init__.py")
    return moves


# -- dotted names and paths in any text ---------------------------------------------------------
def text_rewriter(modules: dict[str, Path]):
    olds = sorted(MOVES, key=len, reverse=True)
    dotted = re.compile(r"(?<![\w.\x01])(" + "|".join(re.escape(o) for o in olds) + r")(?![\w])")
    paths = {}
    for old in olds:
        is_pkg = modules.get(old, Path()).name == "__init__.py"
        old_p, new_p = old.replace(".", "/"), MOVES[old].replace(".", "/")
        if is_pkg:
            paths[old_p + "/"] = new_p + "/"
        else:
            paths[old_p + ".py"] = new_p + ".py"
    slashed = re.compile(r"(?<![\w])(" + "|".join(re.escape(p) for p in sorted(paths, key=len, reverse=True)) + ")")

    def moved(m: re.Match) -> str:  # (a reference after MARK was written by the import pass)
        before, name = m.string[max(0, m.start() - 12) : m.start()], m.group(1)
        quoted = before[-1:] in "\"'" and m.string[m.end() : m.end() + 1] in "\"'"
        if re.search(r"getLogger\([\"']$|-m $", before) or (name in KEEP_QUOTED and quoted):
            return name  # a logger's name, or ``python -m`` of a kept entry point
        return MOVES[name]

    def rewrite(text: str) -> str:
        text = dotted.sub(moved, text)
        return slashed.sub(lambda m: paths[m.group(1)], text)

    return rewrite


# -- imports in Python files --------------------------------------------------------------------
def package_of(path: Path) -> list[str]:
    parts = list(path.with_suffix("").parts)
    return parts[:-1]  # a module's package; an __init__'s package is its folder


def absolute(node: ast.ImportFrom, path: Path) -> str:
    if not node.level:
        return node.module or ""
    base = package_of(path)
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def relative(target: str, new_path: Path) -> str:
    """``target`` as a relative module reference from the file at ``new_path``."""
    pkg, parts = package_of(new_path), target.split(".")
    common = 0
    while common < min(len(pkg), len(parts)) and pkg[common] == parts[common]:
        common += 1
    return "." * (len(pkg) - common + 1) + ".".join(parts[common:])


def render_from(module_ref: str, names: list[tuple[str, str | None]]) -> str:
    listed = ", ".join(name + (f" as {bound}" if bound else "") for name, bound in names)
    return f"from {module_ref} import {listed}"


#: marks a module reference this script wrote, so that the text pass leaves it alone
MARK = "\x01"


def import_rewrites(source: str, path: Path, new_path: Path, modules: set[str]) -> list[tuple[int, int, str]]:
    """(start offset, end offset, new text) of each import of ``source`` whose target moved or
    whose file moved (relative imports), recomputed from ``new_path``. A statement keeps its
    text but for the module it names (its comments included) unless its names must change."""
    lines = source.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    edits = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ImportFrom):
            continue
        target = absolute(node, path)
        if target.split(".")[0] not in ("queue_core", "perfectsched", "pqflow", "pqweb"):
            continue
        groups = _groups(node, target, modules)
        ref = (lambda mod: relative(mod, new_path)) if node.level else (lambda mod: MARK + mod)
        start = starts[node.lineno - 1] + node.col_offset
        end = starts[node.end_lineno - 1] + node.end_col_offset
        text = source[start:end]
        if len(groups) == 1 and next(iter(groups.values())) == [(a.name, a.asname) for a in node.names]:
            [mod] = groups
            old_ref = ("." * node.level + (node.module or "")) if node.level else target
            if ref(mod).lstrip(MARK) == old_ref:
                continue
            edits.append((start, end, re.sub(r"^from\s+[\w.]+\s+import", f"from {ref(mod)} import", text, count=1)))
            continue
        if "#" in text:
            print(f"note: comments dropped from an import of {path}:{node.lineno}: {text!r}")
        indent = " " * node.col_offset
        rendered = [render_from(ref(mod), names) for mod, names in groups.items()]
        edits.append((start, end, ("\n" + indent).join(rendered)))
    return sorted(edits, reverse=True)


def _groups(node: ast.ImportFrom, target: str, modules: set[str]) -> dict[str, list[tuple[str, str | None]]]:
    """The names of an import by the module they come from after the moves: a name that is a
    moved module comes from its new package (under its new name, bound to its old one)."""
    groups: dict[str, list[tuple[str, str | None]]] = {}
    for alias in node.names:
        as_module = f"{target}.{alias.name}"
        if as_module in modules and new_name(as_module) != as_module:
            parent, leaf = new_name(as_module).rsplit(".", 1)
            bound = alias.asname or (alias.name if leaf != alias.name else None)
            groups.setdefault(parent, []).append((leaf, bound))
        else:
            groups.setdefault(new_name(target), []).append((alias.name, alias.asname))
    return groups


def list_packages(pyproject: Path) -> None:
    """The ``packages`` setuptools installs: every package of the tree, the new ones too."""
    found = sorted(
        ".".join(init.parent.relative_to(ROOT).parts)
        for top in ("queue_core", "perfectsched", "pqflow", "pqweb")
        for init in (ROOT / top).rglob("__init__.py")
    )
    text = pyproject.read_text(encoding="utf-8")
    listed = ", ".join(f'"{name}"' for name in found)
    pyproject.write_text(re.sub(r"(?m)^packages = \[.*\]$", f"packages = [{listed}]", text), encoding="utf-8")


def main(check: bool) -> int:
    modules = old_modules()
    moves = file_moves(modules)
    rewrite = text_rewriter(modules)
    changed = 0
    files = [
        p
        for p in ROOT.rglob("*")
        if p.is_file() and p.suffix in TEXT_SUFFIXES and not (set(p.relative_to(ROOT).parts) & SKIP_DIRS)
    ]
    for path in files:
        rel = path.relative_to(ROOT)
        if rel in (Path("scripts/relayer.py"), Path("CHANGELOG.md")):  # history keeps its names
            continue
        text = path.read_text(encoding="utf-8")
        new = text
        if path.suffix == ".py":
            for start, end, piece in import_rewrites(new, rel, moves.get(rel, rel), set(modules)):
                new = new[:start] + piece + new[end:]
        new = rewrite(new).replace(MARK, "")
        if new != text:
            changed += 1
            if check:
                print(f"rewrite {rel}")
            else:
                path.write_text(new, encoding="utf-8")
    for src, dst in sorted(moves.items()):
        print(f"move {src} -> {dst}")
        if not check:
            (ROOT / dst).parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["git", "mv", str(src), str(dst)], cwd=ROOT, check=True)
    for src in {s.parent for s in moves}:
        if not check and (ROOT / src).is_dir() and not any((ROOT / src).glob("*.py")):
            subprocess.run(["rm", "-rf", str(ROOT / src)], check=True)  # a package that moved whole
    for name, doc in PACKAGES.items():
        init = ROOT / module_path(name, True)
        if not check and not init.exists():
            init.write_text(f'"""{doc}"""\n', encoding="utf-8")
            subprocess.run(["git", "add", str(init)], cwd=ROOT, check=True)
    for rel, body in MAINS.items():
        if not check:
            (ROOT / rel).write_text(body, encoding="utf-8")
            subprocess.run(["git", "add", rel], cwd=ROOT, check=True)
    if not check:
        list_packages(ROOT / "pyproject.toml")
    print(f"{changed} files rewritten, {len(moves)} moved")
    return 0


if __name__ == "__main__":
    sys.exit(main("--check" in sys.argv))
