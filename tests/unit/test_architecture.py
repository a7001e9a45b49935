"""House rules that are cheap to check: dependency direction and where SQL lives."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_queue_core_never_imports_the_upper_layers():
    for path in (ROOT / "queue_core").rglob("*.py"):
        bad = {n for n in _imports(path) if n.split(".")[0] in ("perfectsched", "pqflow")}
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_sqlalchemy_only_in_the_store_layer():
    for pkg in ("queue_core", "perfectsched", "pqflow"):
        for path in (ROOT / pkg).rglob("*.py"):
            if "store" in path.relative_to(ROOT).parts:
                continue
            rel = str(path.relative_to(ROOT))
            uses = {n for n in _imports(path) if n.split(".")[0] == "sqlalchemy"}
            if rel in ("queue_core/cli_common.py",):  # make_url only, for password masking
                uses = {n for n in uses if n != "sqlalchemy.engine"}
            assert not uses, f"{rel} imports {uses}: SQL belongs in queue_core/store"


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top_level_imports(path: Path) -> set[str]:
    """pq modules ``path`` imports when it is imported (function-level imports left out)."""
    package = _module(path).split(".") if path.name == "__init__.py" else _module(path).split(".")[:-1]
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[:len(package) - node.level + 1]) if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            names.add(module)
            names.update(f"{module}.{a.name}" for a in node.names)  # `from . import config`
    return names


def test_imports_between_pq_modules_go_one_way():
    paths = [p for pkg in ("queue_core", "perfectsched", "pqflow") for p in (ROOT / pkg).rglob("*.py")]
    graph = {_module(p): _top_level_imports(p) for p in paths}
    # a module's own packages are imported before it anyway: no circle of anyone's making
    graph = {m: {d for d in deps if d in graph and not (m + ".").startswith(d + ".")} for m, deps in graph.items()}
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, f"import circle: {' -> '.join(path[path.index(module):] + (module,))}"
        if module not in done:
            for dep in sorted(graph[module]):
                visit(dep, path + (module,))
            done.add(module)

    for module in sorted(graph):
        visit(module, ())


def test_signal_handlers_are_installed_only_by_the_service_module():
    """queue_core/service.py is the one home of the rule that a signal handler takes no lock."""
    for pkg in ("queue_core", "perfectsched", "pqflow"):
        for path in (ROOT / pkg).rglob("*.py"):
            rel = str(path.relative_to(ROOT))
            for node in ast.walk(ast.parse(path.read_text())):
                if _is_call_of(node, "signal", "signal") and rel != "queue_core/service.py":
                    handler = ast.unparse(node.args[1])
                    assert handler in ("signal.SIG_DFL", "signal.SIG_IGN"), f"{rel}:{node.lineno} installs {handler}"


def _is_call_of(node: ast.AST, owner: str, name: str) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == name
            and isinstance(node.func.value, ast.Name) and node.func.value.id == owner)
