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
            if rel in ("queue_core/clikit/passwords.py",):  # make_url only, for password masking
                uses = {n for n in uses if n != "sqlalchemy.engine"}
            assert not uses, f"{rel} imports {uses}: SQL belongs in queue_core/store"
