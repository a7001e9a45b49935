"""``python -m benchmarks``: run the benchmarks of issues 5 and 11 and write their results.

    python -m benchmarks --db sqlite,mariadb,postgres            # full run (docs/benchmarks.md)
    python -m benchmarks --quick                                 # < 2 minutes, small counts
    python -m benchmarks --smoke                                 # every scenario runs; no figure means anything
    python -m benchmarks --scenarios drain,latency --runs 5 --peers huey,rq
    python -m benchmarks --from-json benchmarks/results/X.json   # re-render the Markdown and chart

Writes benchmarks/results/<date>-<host>.json (``-quick`` added in quick mode), and the
Markdown table plus the PNG chart into docs/benchmarks.md / docs/benchmarks.png (a full run;
a quick run writes Markdown only when --out-md is given).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from . import analysis, report, runner, scenarios
from .env import DATABASES, log
from .peers import registry as peers
from .procs import ROOT
from .sizes import FULL, QUICK, SMOKE


def _list(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", default=",".join(DATABASES), help="databases, comma-separated (default: all three)")
    ap.add_argument("--quick", action="store_true", help="small counts, 1 run: under 2 minutes")
    ap.add_argument(
        "--smoke", action="store_true", help="the smallest counts (a quick run): that every scenario runs and checks"
    )
    ap.add_argument("--runs", type=int, help="runs per figure (default: 3; 1 with --quick)")
    ap.add_argument("--scenarios", help=f"comma-separated subset of: {', '.join(scenarios.SECTIONS)}")
    ap.add_argument("--peers", help=f"comma-separated subset of: {', '.join(peers.NAMES)} (default: all installed)")
    ap.add_argument("--no-peers", action="store_true", help="measure pq only")
    ap.add_argument("--out-json", type=Path, help="results file (default: benchmarks/results/<date>-<host>.json)")
    ap.add_argument(
        "--out-md",
        type=Path,
        help="Markdown file to update between its markers "
        "(default: docs/benchmarks.md for a full run, none for --quick); the chart goes next to it",
    )
    ap.add_argument("--from-json", type=Path, help="do not measure: re-render the Markdown/chart from this file")
    ap.add_argument("--keep-workdir", action="store_true", help="keep worker logs and SQLite files")
    args = ap.parse_args(argv)
    args.quick = args.quick or args.smoke
    args.dbs = _list(args.db)
    bad = [d for d in args.dbs if d not in DATABASES]
    if bad:
        ap.error(f"unknown database {', '.join(bad)}; choose from {', '.join(DATABASES)}")
    if args.runs is not None and args.runs < 1:
        ap.error("--runs must be at least 1")
    try:
        scenarios.select(_list(args.scenarios) if args.scenarios else None)
        peers.select(_list(args.peers) if args.peers else None)
    except ValueError as exc:
        ap.error(str(exc))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.from_json:
        doc = analysis.analyse(json.loads(args.from_json.read_text()))
    else:
        sizes = SMOKE if args.smoke else QUICK if args.quick else FULL
        if args.runs:
            sizes = dataclasses.replace(sizes, runs=args.runs)
        opts = runner.Options(
            dbs=args.dbs,
            sizes=sizes,
            quick=args.quick,
            scenarios=_list(args.scenarios) if args.scenarios else None,
            peers=[] if args.no_peers else (_list(args.peers) if args.peers else None),
            keep_workdir=args.keep_workdir,
        )
        doc = analysis.analyse(runner.run(opts))
        out_json = args.out_json or report.default_json_path(ROOT, doc["started"], args.quick)
        report.write_json(doc, out_json)
        log(f"results: {out_json}")
    out_md = args.out_md or (None if doc["mode"] == "quick" and not args.from_json else ROOT / "docs" / "benchmarks.md")
    chart, note = None, None
    if out_md is not None:
        png = out_md.with_suffix(".png")
        note = report.chart(doc, png)
        chart = None if note else png.name
        report.write_markdown(out_md, report.render(doc, chart, note))
        log(f"markdown: {out_md}" + (f", chart: {png}" if chart else f" (no chart: {note})"))
    print(report.render(doc, None, None))
    failed = [f"{db}/{s}" for db, secs in doc["pq"].items() for s, sec in secs.items() if sec["errors"]]
    if failed:
        log(f"measurements failed: {', '.join(failed)}")
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
