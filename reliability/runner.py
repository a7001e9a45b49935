"""``python -m reliability``: run scenarios on databases, print and record their figures.

    python -m reliability --db mariadb,postgres,sqlite                  # full parameters
    python -m reliability --db sqlite --quick --scenarios 1,5,7         # the CI sizes
    python -m reliability --db mariadb --scenarios soak --soak-minutes 2
    python -m reliability ... --out-md docs/reliability.md              # also update the doc's table

MariaDB and PostgreSQL: ``TEST_MYSQL_URL`` / ``TEST_PG_URL`` (else the shared servers of
``scripts/start-databases.sh`` are started or reused). The database-restart and soak
scenarios always run on private servers (:mod:`reliability.dbserver`), stopped at the end.
Exit code 0 when every scenario passed.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import report
from .dbserver import BACKEND_ENV, PrivateServers
from .procs import ROOT
from .result import Result
from .scenarios import ALL, BY_NAME
from .stage import Context

BACKENDS = ("mariadb", "postgres", "sqlite")
#: scenarios that need servers nobody else uses (restarts; session counts)
PRIVATE = {"db_restarts", "soak"}


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m reliability", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--db", default="mariadb,postgres,sqlite", help="comma-separated: mariadb, postgres, sqlite")
    ap.add_argument("--scenarios", default="all", help=f"comma-separated names or numbers 1-{len(ALL)} (default: all)")
    ap.add_argument("--quick", action="store_true", help="the reduced sizes the CI tests use")
    ap.add_argument("--soak-minutes", type=float, help="length of the soak (default 30, --quick 1)")
    ap.add_argument("--out-md", type=Path, help="write the figures table into this markdown file")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workdir", type=Path, help="ledgers and process logs (default: a temporary directory)")
    ap.add_argument("--keep-tables", action="store_true", help="do not drop the rel_* tables afterwards")
    args = ap.parse_args(argv)
    args.db = [b.strip() for b in args.db.split(",") if b.strip()]
    for b in args.db:
        if b not in BACKENDS:
            ap.error(f"unknown database {b!r} (choose from {', '.join(BACKENDS)})")
    args.modules = _select(ap, args.scenarios)
    return args


def _select(ap, spec: str) -> list:
    if spec == "all":
        return list(ALL)
    out = []
    for item in spec.split(","):
        item = item.strip()
        mod = ALL[int(item) - 1] if item.isdigit() and 1 <= int(item) <= len(ALL) else BY_NAME.get(item)
        if mod is None:
            ap.error(f"unknown scenario {item!r} (choose from {', '.join(BY_NAME)} or 1-{len(ALL)})")
        out.append(mod)
    return out


def shared_urls() -> dict[str, str]:
    """URLs of the shared servers: from the environment, else by sourcing the start script."""
    urls = {b: os.environ[e] for b, e in BACKEND_ENV.items() if os.environ.get(e)}
    if len(urls) < 2:
        res = subprocess.run(
            [
                "bash",
                "-c",
                '. scripts/start-databases.sh >/dev/null && printf "%s\\n%s\\n" "$TEST_MYSQL_URL" "$TEST_PG_URL"',
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        found = res.stdout.split()
        if res.returncode == 0 and len(found) == 2:
            urls = {"mariadb": found[0], "postgres": found[1], **urls}
    return urls


def params(mod, args):
    p = mod.QUICK if args.quick else mod.FULL
    if mod.NAME == "soak" and args.soak_minutes:
        p = dataclasses.replace(p, minutes=args.soak_minutes)
    return p


def run_one(mod, ctx: Context, p) -> Result:
    try:
        r = mod.run(ctx, p)
    except Exception as exc:  # noqa: BLE001 - a scenario that cannot finish is a failed scenario
        r = Result(mod.NAME, ctx.backend)
        r.fail(f"the scenario did not complete: {type(exc).__name__}: {exc}")
    r.measured = report.now()
    return r


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.ERROR, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="pq-reliability-"))
    servers: PrivateServers | None = None
    shared = shared_urls() if set(args.db) - {"sqlite"} else {}
    results = []
    try:
        for mod in args.modules:
            for backend in args.db:
                if backend not in mod.BACKENDS:
                    continue
                if backend == "sqlite":
                    url = f"sqlite:///{workdir}/{mod.NAME}-{time.time_ns()}.db"
                elif mod.NAME in PRIVATE:
                    if servers is None:
                        servers = PrivateServers()
                        servers.open()
                    url = servers.urls[backend]
                elif backend in shared:
                    url = shared[backend]
                else:
                    print(f"skip {mod.NAME} on {backend}: no server (set {BACKEND_ENV[backend]})", flush=True)
                    continue
                ctx = Context(backend, url, workdir, seed=args.seed, servers=servers, keep_tables=args.keep_tables)
                print(f"... {mod.NAME} on {backend}", flush=True)
                result = run_one(mod, ctx, params(mod, args))
                results.append(result)
                print(result.summary(), flush=True)
                for f in result.failures:
                    print(f"    {f}", flush=True)
    finally:
        if servers is not None:
            servers.close()
    if results:
        path = report.save(results, "quick" if args.quick else "full")
        print(f"figures: {path.relative_to(ROOT)}  (process logs and ledgers: {workdir})")
        if args.out_md:
            why = report.write_markdown(path, args.out_md, ALL)
            print(f"table written to {args.out_md}" + (f" (no soak chart: {why})" if why else ""))
    return 0 if all(r.ok for r in results) else 1
