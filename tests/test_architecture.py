"""House rules that are cheap to check: dependency direction, no import circles, module length,
and that SQL and every write of the tables live in queue_core/store (named transitions only)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Call):  # importlib.import_module("pqflow"): a dynamic import is one too
            names.update(_imported_names(node))
    return names


def test_a_dynamic_import_counts_as_an_import(tmp_path):
    sample = tmp_path / "m.py"
    sample.write_text("import importlib\nimportlib.import_module('pqflow.runs')\n__import__('perfectsched')\n")
    assert {"pqflow.runs", "perfectsched"} <= _imports(sample)


def test_queue_core_never_imports_the_upper_layers():
    for path in (ROOT / "queue_core").rglob("*.py"):
        bad = {n for n in _imports(path) if n.split(".")[0] in ("perfectsched", "pqflow")}
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_nothing_below_imports_pqweb():
    """pqweb (the dashboard) is the top layer: it reads the other three, none of them reads it."""
    for pkg in ("queue_core", "perfectsched", "pqflow"):
        for path in (ROOT / pkg).rglob("*.py"):
            bad = {n for n in _imports(path) if n.split(".")[0] == "pqweb"}
            assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


# -- no import circles ----------------------------------------------------------------------------
PACKAGES = ("queue_core", "perfectsched", "pqflow", "pqweb")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def _imported_modules(name: str, source: str, is_package: bool, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``source`` (module ``name``) imports, at any depth: in a
    function too, so that an import moved into a function does not hide a circle."""
    package = name.split(".") if is_package else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names)
    return {_known_prefix(n, known) for n in found} - {None, name}


def _known_prefix(name: str, known: set[str]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _import_graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {
        name: _imported_modules(name, path.read_text(), path.name == "__init__.py", known)
        for name, path in modules.items()
    }


def _a_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (``[a, b, a]``), or None."""
    done: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        if node in path:
            return path[path.index(node) :] + [node]
        if node in done:
            return None
        path.append(node)
        for target in sorted(graph.get(node, ())):
            circle = visit(target)
            if circle:
                return circle
        path.pop()
        done.add(node)
        return None

    return next((c for c in map(visit, sorted(graph)) if c), None)


def test_the_circle_finder_sees_function_level_imports():
    known = {"pkg", "pkg.a", "pkg.b"}
    source_a = "def start():\n    from .b import run\n    return run()\n"
    graph = {
        "pkg.a": _imported_modules("pkg.a", source_a, False, known),
        "pkg.b": _imported_modules("pkg.b", "from pkg.a import start\n", False, known),
    }
    assert graph == {"pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}}
    assert _a_circle(graph) == ["pkg.a", "pkg.b", "pkg.a"]


def test_no_import_circles():
    graph = _import_graph()
    assert "queue_core.worker.main" in graph["queue_core.cli.kit.worker_command"]  # imported in a function
    circle = _a_circle(graph)
    assert circle is None, "import circle: " + " -> ".join(circle or [])


# -- module size ------------------------------------------------------------------------------------
MAX_MODULE_LINES = 600
#: Debts of the rule "one home for each rule": modules already longer than MAX_MODULE_LINES,
#: each capped at its length when the rule came in. Lower a cap when its module shrinks; drop the
#: entry once the module is back under the limit. Never raise a cap or add an entry.
KNOWN_LONG_MODULES = {}


def _line_count(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_modules_stay_small():
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            rel = str(path.relative_to(ROOT))
            limit = KNOWN_LONG_MODULES.get(rel, MAX_MODULE_LINES)
            assert _line_count(path) <= limit, f"{rel} has {_line_count(path)} lines; the limit is {limit}"


def test_known_long_modules_are_still_debts():
    for rel in KNOWN_LONG_MODULES:
        lines = _line_count(ROOT / rel)
        assert lines > MAX_MODULE_LINES, f"{rel} has {lines} lines: drop it from KNOWN_LONG_MODULES"


#: the longest a function's body may be (its lines after the docstring), and the most its median may be
MAX_FUNCTION_LINES = 50
MAX_MEDIAN_FUNCTION_LINES = 8


def _function_lengths(source: str) -> dict[str, int]:
    """``{qualified name: lines of its body after the docstring}`` of every function of ``source``."""
    lengths: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = f"{prefix}{getattr(child, 'name', '')}"
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                body = child.body
                documented = isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant)
                first = body[1] if documented and len(body) > 1 else body[0]
                lengths[name] = (child.end_lineno or child.lineno) - first.lineno + 1
            visit(child, f"{name}." if isinstance(child, ast.FunctionDef | ast.ClassDef) else prefix)

    visit(ast.parse(source), "")
    return lengths


def test_functions_stay_small():
    lengths = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            rel = str(path.relative_to(ROOT))
            lengths.update({f"{rel}:{name}": n for name, n in _function_lengths(path.read_text()).items()})
    long = sorted((n, name) for name, n in lengths.items() if n > MAX_FUNCTION_LINES)
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"
    ordered = sorted(lengths.values())
    assert ordered[len(ordered) // 2] <= MAX_MEDIAN_FUNCTION_LINES


def test_the_function_length_check_counts_the_body_after_the_docstring():
    source = 'def f():\n    """Doc\n    more."""\n    a = 1\n    return a\n\n\nclass C:\n    def g(self):\n' + (
        "        x = 1\n" * 60
    )
    assert _function_lengths(source) == {"f": 2, "C.g": 60}


# -- the store is the only writer ------------------------------------------------------------------------------------
#: columns that say what state a row and its lease are in: only the store's named transitions set them
LEASE_COLUMNS = {"state", "leased", "lease_token", "cancel_requested"}
STATE_COLUMNS = LEASE_COLUMNS | {
    "timeout",
    "next_time",
    "next_run_time",
    "run_at",
    "outcome",
    "finished_at",
    "attempts",
    "owner",
    "updated_at",
}
#: the generic writers the store's named transitions replaced; none of them may come back
GENERIC_WRITERS = {"update", "update_by_key", "update_group", "fenced_update", "update_columns", "set_columns"}
DB_API_CALLS = {"execute", "executemany", "executescript", "exec_driver_sql"}
DB_DRIVERS = {"sqlalchemy", "sqlite3", "pymysql", "MySQLdb", "psycopg", "psycopg2", "asyncpg"}
SQL_TEXT = re.compile(
    r"\b(SELECT\b.*\bFROM|INSERT\s+INTO|UPDATE\s+\S+\s+SET|DELETE\s+FROM|(CREATE|ALTER|DROP)\s+TABLE)\b", re.DOTALL
)
#: SQL in lower case, in the shapes only a statement has (prose may say "delete from the list")
SQL_TEXT_ANY_CASE = re.compile(
    r"\b(update\s+\S+\s+set\s+\w+\s*=|insert\s+into\s+\S+\s*\(|delete\s+from\s+\S+\s+where\b|"
    r"select\s+[\w*,\s.]+\s+from\s+\S+\s+where\b|(create|alter|drop)\s+table\s+\S+)",
    re.IGNORECASE | re.DOTALL,
)
#: a store's batch writer by id: only the store's named transitions may call it
STORE_ONLY_CALLS = {"update_each"}


def sql_outside_the_store(source: str) -> list[str]:
    """What in ``source`` (a module outside queue_core/store) talks SQL: a database driver's
    import (static, or dynamic by a constant name), a DB-API call, or a string (an f-string too)
    that reads as a SQL statement."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = _imported_names(node)
        found += [f"line {node.lineno}: imports {n}" for n in names if n.split(".")[0] in DB_DRIVERS]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in DB_API_CALLS:
            found.append(f"line {node.lineno}: calls .{node.func.attr}()")
        text = _text_of(node)
        if text is not None and _reads_as_sql(text):
            found.append(f"line {node.lineno}: SQL text {text[:40]!r}")
    return found


def _imported_names(node: ast.AST) -> list[str]:
    """The modules ``node`` imports: an import statement, or ``importlib.import_module`` /
    ``__import__`` of a constant name (a way round the static check)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        return [node.module or ""]
    if isinstance(node, ast.Call) and ast.unparse(node.func).rpartition(".")[2] in DYNAMIC_IMPORTERS:
        named = [a.value for a in node.args[:1] if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        return [n.partition(":")[0] for n in named]  # load_target("pkg.mod:Name")
    return []


#: functions that import a module given by name: the standard ones and queue_core/worker/loader.py's
DYNAMIC_IMPORTERS = {"import_module", "__import__", "_import_module", "load_target"}


def _text_of(node: ast.AST) -> str | None:
    """A string literal's text; an f-string's literal parts, each value a placeholder word."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "x" for v in node.values)
    return None


def _reads_as_sql(text: str) -> bool:
    return bool(SQL_TEXT.search(text) or SQL_TEXT_ANY_CASE.search(text))


def _items(node: ast.AST) -> dict[str, ast.AST]:
    """The string keys a dict literal or ``dict(...)`` call sets, with their values."""
    if isinstance(node, ast.Dict):
        return {
            k.value: v
            for k, v in zip(node.keys, node.values, strict=True)
            if isinstance(k, ast.Constant) and isinstance(k.value, str)
        }
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict":
        return {k.arg: k.value for k in node.keywords if k.arg}
    return {}


def _sets_a_state(items: dict[str, ast.AST]) -> bool:
    """A dict that sets a lease column to a constant (``leased=0``, ``lease_token=None``) and
    another state column: a row being written (a listing shows a value it read)."""
    constant = {k for k, v in items.items() if k in LEASE_COLUMNS and isinstance(v, ast.Constant)}
    return bool(constant) and len(set(items) & STATE_COLUMNS) >= 2


def _receiver(node: ast.Attribute) -> str:
    return ast.unparse(node.value).lower()


#: an expression that is a store or one of the parts it is composed of: ``q.store``, ``tx.store``,
#: ``store.runs``, ``q.store.stats``
_STORE_EXPR = re.compile(
    r"(^|\.)_?store$|\.(runs|workers|failures|stats|tags|events|reads|submits|changes|settles|browse|bulk)$|^store$",
    re.IGNORECASE,
)


def _store_aliases(tree: ast.AST) -> set[str]:
    """Names bound to a store or its run rows (``s = q.store``, ``s: SqlStore = q.store``,
    ``s, c = q.store, tx.conn``): calls on them are calls on the store."""
    aliases = set()
    for node in ast.walk(tree):
        pairs: list = []
        if isinstance(node, ast.Assign):
            for target in node.targets:
                pairs += _bound(target, node.value)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            pairs += _bound(node.target, node.value)
        aliases |= {name.lower() for name, value in pairs if _STORE_EXPR.search(ast.unparse(value))}
    return aliases


def _bound(target: ast.AST, value: ast.AST) -> list:
    """The (name, value) pairs an assignment binds, a tuple unpacked element by element."""
    if isinstance(target, ast.Name):
        return [(target.id, value)]
    if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts):
        return [p for t, v in zip(target.elts, value.elts, strict=True) for p in _bound(t, v)]
    return []


def _calls_the_store(node: ast.Attribute, aliases: set[str]) -> bool:
    """A call on a store: its receiver names one (``self.store``, ``tx.runs``), or an alias of one;
    a plain local named ``runs`` (a dict of runs) is not."""
    receiver = _receiver(node)
    return "store" in receiver or receiver.endswith(".runs") or receiver in aliases


def table_writes_outside_the_store(source: str) -> list[str]:
    """What in ``source`` (a module outside queue_core/store) writes columns itself: a dict of
    state columns with a lease column set to a constant (the values of a generic update), a call of a store's generic
    writer, or of a store's private helper (a way round the named transitions), through any alias."""
    found = []
    tree = ast.parse(source)
    aliases = _store_aliases(tree)
    for node in ast.walk(tree):
        if _sets_a_state(_items(node)):
            found.append(f"line {node.lineno}: a row of columns {sorted(set(_items(node)) & STATE_COLUMNS)}")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "values"
            and {k.arg for k in node.keywords} & LEASE_COLUMNS
        ):
            found.append(f"line {node.lineno}: .values() of lease columns")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in STORE_ONLY_CALLS:
            found.append(f"line {node.lineno}: calls {ast.unparse(node.func)}()")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _calls_the_store(node.func, aliases):
            name = node.func.attr
            if name in GENERIC_WRITERS or name.startswith("_"):
                found.append(f"line {node.lineno}: calls {ast.unparse(node.func)}()")
    return found


def generic_writers_in_the_store(source: str) -> list[str]:
    """Methods of ``source`` (a store module) that write the columns their caller names: one of
    the generic writers' names, or a public method that passes its ``**kwargs`` (or a parameter
    it takes as a dict of values) on to ``.values(**...)``."""
    found = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if fn.name in GENERIC_WRITERS:
            found.append(f"{fn.name} (line {fn.lineno}): a generic writer")
            continue
        if fn.name.startswith("_"):
            continue
        params = {a.arg for a in fn.args.args + fn.args.kwonlyargs} | ({fn.args.kwarg.arg} if fn.args.kwarg else set())
        for call in ast.walk(fn):
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "values":
                splat = [k.value.id for k in call.keywords if k.arg is None and isinstance(k.value, ast.Name)]
                if set(splat) & params:
                    found.append(f"{fn.name} (line {fn.lineno}): writes the columns its caller passes")
    return found


def _outside_the_store():
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            rel = path.relative_to(ROOT)
            if rel.parts[:2] != ("queue_core", "store"):
                yield str(rel), path.read_text()


def test_no_sql_outside_the_store():
    allowed = {"queue_core/rules/url_secrets.py": ["imports sqlalchemy.engine"]}  # make_url, to mask passwords
    for rel, source in _outside_the_store():
        found = [f for f in sql_outside_the_store(source) if not any(f.endswith(a) for a in allowed.get(rel, []))]
        assert not found, f"{rel}: {found}: SQL belongs in queue_core/store"


def test_no_table_writes_outside_the_store():
    for rel, source in _outside_the_store():
        found = table_writes_outside_the_store(source)
        assert not found, f"{rel}: {found}: every write is a named transition of queue_core/store"


def test_no_generic_update_writer_in_the_store():
    for path in (ROOT / "queue_core" / "store").rglob("*.py"):
        found = generic_writers_in_the_store(path.read_text())
        assert not found, f"{path.relative_to(ROOT)}: {found}: write one named transition per method"


_WRITE = "    def {}(self, conn, key, {}):\n        conn.execute(sa.update(t).values(**{}))\n"
#: (checker, samples it must flag, samples it must pass)
SAMPLES = [
    (
        sql_outside_the_store,
        [
            "import sqlalchemy as sa\n",
            "from psycopg import connect\n",
            "def f(conn):\n    conn.execute(q)\n",
            "Q = 'UPDATE pq_tasks SET state = 1 WHERE id = ?'\n",
            "Q = '''SELECT key\n  FROM t'''\n",
            "Q = 'update pq_tasks set state = 1 where id = ?'\n",
            "Q = 'delete from pq_tasks where id = 1'\n",
            "Q = f'UPDATE {table} SET state = {s} WHERE id = ?'\n",
            "Q = f'delete from {t} where id = {i}'\n",
            "import importlib\nsa = importlib.import_module('sqlalchemy')\n",
            "pm = __import__('pymysql')\n",
        ],
        ["'''Select the rows a worker updates, then delete from the list.'''\n"],
    ),
    (
        table_writes_outside_the_store,
        [
            "values = dict(state=0, leased=0, outcome=None)\n",
            "row = {'next_time': 1, 'leased': 0}\n",
            "def f(s, c):\n    s.store.update(c, 'k', x=1)\n",
            "def f(tx):\n    tx._store.update_by_key(tx.conn, 'k')\n",
            "def f(tx):\n    tx.runs._write(tx.conn, 'k')\n",
            "def f(t, c):\n    c.run(t.update().values(state=1, leased=0))\n",
            "def f(q, c):\n    q.db.dialect.update_each(c, t, rows, each=['state'])\n",
            "def f(q, c):\n    s = q.store\n    s.update(c, 'k', x=1)\n",
            "def f(q, c):\n    w = q.store\n    w._held(c, 1, 2, 'finish', {})\n",
        ],
        [
            "m = TaskMetadata(state=1, leased=0)\nd = {'outcome': 'x'}\n",
            "shown = {'next_time': 1, 'next_run_time': 2, 'outcome': 'x'}\n",
            "shown = {'cancel_requested': run.cancel, 'finished_at': 1}\n",
            "def f(tx):\n    tx.store.run_close(tx.conn, 1, 'skipped', 0.0)\n",
        ],
    ),
    (
        generic_writers_in_the_store,
        [
            "class S:\n    def update(self, conn, key, **values):\n        pass\n",
            "class S:\n" + _WRITE.format("put", "**cols", "cols"),
            "class S:\n" + _WRITE.format("put", "values", "values"),
        ],
        [
            "class S:\n"
            + _WRITE.format("_write", "values", "values")
            + "    def finish(self, conn):\n        values = dict(state=1)\n"
            + "        conn.execute(sa.update(t).values(**values))\n"
        ],
    ),
]


@pytest.mark.parametrize("check, bad, good", SAMPLES, ids=lambda x: getattr(x, "__name__", ""))
def test_the_checks_see_bad_samples(check, bad, good):
    for sample in bad:
        assert check(sample), f"{check.__name__} misses {sample!r}"
    for sample in good:
        assert not check(sample), f"{check.__name__} flags {sample!r}: {check(sample)}"


# -- signal handlers --------------------------------------------------------------------------------
def handlers_installed(source: str) -> list[str]:
    """The signal handlers ``source`` installs (``signal.signal(n, h)``, through any alias of
    the module or of the function), but the defaults SIG_DFL and SIG_IGN."""
    tree = ast.parse(source)
    modules, functions = _signal_names(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if (
            isinstance(f, ast.Attribute)
            and f.attr == "signal"
            and isinstance(f.value, ast.Name)
            and f.value.id in modules
        ) or (isinstance(f, ast.Name) and f.id in functions):
            handler = node.args[1] if len(node.args) >= 2 else None  # signal.signal(*pair): unknown
            if not _is_default_handler(handler):
                found.append(f"line {node.lineno}: installs {ast.unparse(handler) if handler else '?'}")
    return found


def _signal_names(tree: ast.AST) -> tuple[set[str], set[str]]:
    """The names of the signal module and of signal.signal in ``tree``: imported under any name,
    or bound by an assignment (``install = signal.signal``)."""
    modules, functions = {"signal"}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name == "signal"}
        elif isinstance(node, ast.ImportFrom) and node.module == "signal":
            functions |= {a.asname or a.name for a in node.names if a.name == "signal"}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "signal"
            and isinstance(node.value.value, ast.Name)
            and node.value.value.id in modules
        ):
            functions |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return modules, functions


def _is_default_handler(node: ast.AST | None) -> bool:
    """Exactly ``SIG_DFL`` or ``SIG_IGN`` (of any alias of the module), nothing computed."""
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
    return name in ("SIG_DFL", "SIG_IGN")


def test_signal_handlers_are_installed_only_by_the_service_module():
    """queue_core/worker/service.py is the one home of the rule that a signal handler takes no lock."""
    for pkg in ("queue_core", "perfectsched", "pqflow"):
        for path in (ROOT / pkg).rglob("*.py"):
            rel = str(path.relative_to(ROOT))
            if rel != "queue_core/worker/service.py":
                assert not handlers_installed(path.read_text()), f"{rel}: {handlers_installed(path.read_text())}"


def test_the_signal_check_sees_aliases():
    for bad in [
        "import signal as sig\nsig.signal(sig.SIGTERM, h)\n",
        "from signal import signal as on\non(15, h)\n",
        "import signal\nsignal.signal(15, lambda *a: 0)\n",
    ]:
        assert handlers_installed(bad), bad
    assert not handlers_installed("import signal as s\ns.signal(s.SIGCHLD, s.SIG_DFL)\n")


# -- layers inside and beside queue_core ------------------------------------------------------------
#: what the store may use of queue_core: the errors it raises, the rules it applies, the clock it reads
STORE_MAY_IMPORT = {
    "queue_core.errors",
    "queue_core.extras",  # the extra that installs a missing driver (a leaf: it imports only the errors)
    "queue_core.rules.policy",
    "queue_core.rules.statistics",  # the pure rules of what an event counts, which the roll-up applies
    "queue_core.rules.attempt_events",  # the pure rules of which event carries an attempt's claim
    "queue_core.clock",
    "queue_core.rules.task_states",
    "queue_core.rules.strict_json",
    "queue_core.rules.url_secrets",
    "queue_core.rules.validate",  # the limits of what pq takes as input, which a stored value must keep
}


def test_the_store_imports_nothing_above_it():
    graph = _import_graph()
    for name, imported in graph.items():
        if name.startswith("queue_core.store"):
            above = {m for m in imported if m.startswith("queue_core") and not m.startswith("queue_core.store")}
            assert above <= STORE_MAY_IMPORT, f"{name} imports {sorted(above - STORE_MAY_IMPORT)}"


#: queue_core's layers, lowest first: a module imports from its own layer and those below only.
#: The package itself (``queue_core``, the public names of every layer) is above them all.
LAYERS = (
    ("queue_core.errors",),
    ("queue_core.rules",),
    ("queue_core.clock", "queue_core.config", "queue_core.extras", "queue_core.exit_codes"),
    ("queue_core.store",),
    ("queue_core.api",),
    ("queue_core.ops",),
    ("queue_core.worker",),
    ("queue_core.cli",),
)


def _layer(name: str) -> int:
    """The index in LAYERS of module ``name``; every module of queue_core is in one."""
    if name == "queue_core":
        return len(LAYERS)
    for index, prefixes in enumerate(LAYERS):
        if any(name == p or name.startswith(p + ".") for p in prefixes):
            return index
    raise AssertionError(f"{name} is in no layer of LAYERS (tests/test_architecture.py)")


def _upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{name} imports {target}"
        for name, imported in graph.items()
        if name.startswith("queue_core")
        for target in imported
        if target.startswith("queue_core") and _layer(target) > _layer(name)
    )


def test_queue_core_layers_import_only_downwards():
    """rules < store < api < ops < worker < cli (ARCHITECTURE.md): the API never reaches into the
    worker or the command line, the store never into the API; every module is in a layer."""
    assert _upward_imports(_import_graph()) == []
    unplaced = []
    for name in _modules():
        try:
            _layer(name) if name.startswith("queue_core") else None
        except AssertionError:
            unplaced.append(name)
    assert unplaced == [], "modules in no layer of LAYERS"


def test_the_layer_check_sees_an_upward_import():
    graph = {"queue_core.store.tasks": {"queue_core.api.queue"}, "queue_core.api.app": {"queue_core.worker.main"}}
    assert _upward_imports(graph) == [
        "queue_core.api.app imports queue_core.worker.main",
        "queue_core.store.tasks imports queue_core.api.queue",
    ]
    assert _layer("queue_core.api.queue") < _layer("queue_core.cli.kit.group") < _layer("queue_core")
    with pytest.raises(AssertionError, match="in no layer"):
        _layer("queue_core.somewhere_new")


#: the one module of the store layer that the layers above may import: the Store interface (the
#: protocols, the values they pass, the constructors of the stores)
STORE_INTERFACE = "queue_core.store.protocol"


def _store_reaches(graph: dict[str, set[str]]) -> list[str]:
    """The imports of store modules other than its interface by modules outside the store."""
    return sorted(
        f"{name} imports {target}"
        for name, imported in graph.items()
        if not (name == "queue_core.store" or name.startswith("queue_core.store."))
        for target in imported
        if target.startswith("queue_core.store.") and target != STORE_INTERFACE
    )


def test_above_the_store_only_its_interface_is_imported():
    """The API, the worker, the CLIs, perfectsched, pqflow and pqweb reach the database through
    queue_core/store/protocol.py alone (ARCHITECTURE.md): a store module's inside can change freely."""
    assert _store_reaches(_import_graph()) == []


def test_the_store_interface_check_sees_a_reach_inside():
    graph = {
        "pqflow.lifecycle": {"queue_core.store.schema", STORE_INTERFACE},
        "queue_core.api.queue": {"queue_core.store.tasks"},
        "queue_core.store.runs": {"queue_core.store.tasks"},
    }
    assert _store_reaches(graph) == [
        "pqflow.lifecycle imports queue_core.store.schema",
        "queue_core.api.queue imports queue_core.store.tasks",
    ]


def test_perfectsched_and_pqflow_stand_side_by_side():
    graph = _import_graph()
    for name, imported in graph.items():
        top = name.split(".")[0]
        other = {"perfectsched": "pqflow", "pqflow": "perfectsched"}.get(top)
        assert not other or not any(m.split(".")[0] == other for m in imported), f"{name} imports {other}"


# -- ways round the checks: each must still be caught ---------------------------------------------
def test_an_upper_layer_loaded_through_queue_cores_own_loader_is_an_import(tmp_path):
    """queue_core/worker/loader.py imports modules by name for a living (load_target, its _import_module
    wrapper of importlib.import_module). A queue_core module that loads pqflow through it by a
    constant name depends on pqflow as surely as an import statement, but _imports only knows the
    spellings importlib.import_module / import_module / __import__: neither
    load_target("pqflow.decider:Decider") nor _import_module("pqflow.lifecycle") counts, so
    test_queue_core_never_imports_the_upper_layers passes with them."""
    sample = tmp_path / "m.py"
    sample.write_text(
        "from .loader import _import_module, load_target\n"
        "DECIDER = load_target('pqflow.decider:Decider')\n"
        "engine = _import_module('pqflow.lifecycle')\n"
    )
    found = _imports(sample)
    assert {"pqflow.decider", "pqflow.lifecycle"} & {n.split(":")[0] for n in found}, found


def test_a_handler_chosen_by_a_conditional_expression_is_a_handler():
    """handlers_installed lets through any handler whose source text ends with SIG_DFL or SIG_IGN:
    signal.signal(n, self._on_child if watching else signal.SIG_DFL) installs a Python handler
    (outside queue_core/worker/service.py, the rule's one home) and is not seen; nor is a lambda that
    returns signal.SIG_IGN."""
    for source in [
        "import signal\ndef f(self, watching):\n"
        "    signal.signal(signal.SIGCHLD, self._on_child if watching else signal.SIG_DFL)\n",
        "import signal\nsignal.signal(signal.SIGTERM, lambda *_: signal.SIG_IGN)\n",
    ]:
        assert handlers_installed(source), source


def test_signal_signal_bound_to_a_name_is_still_signal_signal():
    """The check follows 'import signal as x' and 'from signal import signal as y', but not the
    same alias made by an assignment (install = signal.signal), nor a call with the arguments
    unpacked from a table (signal.signal(*pair), skipped as 'fewer than two arguments')."""
    for source in [
        "import signal\ninstall = signal.signal\ninstall(signal.SIGTERM, on_term)\n",
        "import signal\nfor pair in [(signal.SIGTERM, on_term)]:\n    signal.signal(*pair)\n",
    ]:
        assert handlers_installed(source), source


def test_a_store_alias_with_a_type_annotation_is_an_alias():
    """_store_aliases reads plain assignments only. The code base annotates its variables; with
    's: SqlStore = q.store' (an AnnAssign) or 's, c = q.store, tx.conn' (a tuple target) a call
    of a generic writer or a private helper through the alias is not seen."""
    for source in [
        "def f(q, c):\n    s: SqlStore = q.store\n    s._held(c, 1, 2, 'finish', {})\n",
        "def f(q, tx):\n    s, c = q.store, tx.conn\n    s.update(c, 'k', x=1)\n",
    ]:
        assert table_writes_outside_the_store(source), source


def test_a_dict_of_runs_is_not_the_store():
    """False positive: pqflow names its dicts of RunRef 'runs' (pqflow/completions.py:
    runs: dict[str, RunRef]). Merging two of them with dict.update, or updating a dict built from
    one, reads as 'calls runs.update()', a generic writer of the store, and fails the
    architecture test on correct code."""
    for source in [
        "def merge(runs: dict, more: dict) -> None:\n    runs.update(more)\n",
        "def f(runs: dict, more: dict) -> dict:\n    wanted = {k: runs[k] for k in runs}\n"
        "    wanted.update(more)\n    return wanted\n",
    ]:
        assert not table_writes_outside_the_store(source), table_writes_outside_the_store(source)


#: what a test's text says when it tells the story of its own making rather than the behaviour
NARRATION = re.compile(
    r"\b[Gg]uarantees?\s+#?[0-9]|\b[Ff]ail(ed|s)\s+before\s+(its|the|this)\s+fix|\b[Ss]ession\s+[0-9]+"
    r"|\b(a|the|this|fresh)\s+review\b"
)


def narrations(text: str) -> list[str]:
    return [m.group(0) for m in NARRATION.finditer(text)]


def test_no_test_narrates_a_review_an_issue_or_a_session():
    """Tests say what they check; a review's numbered guarantees and the history of a fix belong
    in git and the CHANGELOG. Nor is a test file named after a review."""
    found = {
        str(p.relative_to(ROOT)): narrations(p.read_text())
        for p in (ROOT / "tests").rglob("*.py")
        if p.name != "test_architecture.py"
    }
    assert {p: n for p, n in found.items() if n} == {}
    assert [p.name for p in (ROOT / "tests").rglob("*.py") if re.search(r"(^|_)review", p.name)] == []


def test_the_narration_check_sees_a_story():
    assert narrations('"""Guarantee 4: a lease ... Failed before its fix on sqlite. Found in session 12."""') == [
        "Guarantee 4",
        "Failed before its fix",
        "session 12",
    ]
    assert narrations("(failed before\n    its fix), Guarantee #4, in Session 12") == [
        "failed before\n    its fix",
        "Guarantee #4",
        "Session 12",
    ]
    assert narrations('"""A lease taken over is fenced out."""') == []
