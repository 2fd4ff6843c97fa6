"""``fedchain report``: the detection table, or one HTML report."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from protocol.errors import ConfigError


def main(args: argparse.Namespace) -> int:
    from fedchain.report.detection import collect, markdown_table

    for path in args.paths:
        if not Path(path).exists():
            raise ConfigError(f"RUN_DIR {path!r}: no such file or directory")
    if args.html:
        return _html_report(args)
    if args.output is not None:
        raise ConfigError(f"-o {args.output!r}: only with --html (the table goes to stdout)")
    rows = collect(args.paths)
    if not rows:
        print(
            f"fedchain: error: RUN_DIR {' '.join(args.paths)!r}: no run directory with a "
            "summary.json there",
            file=sys.stderr,
        )
        return 2
    print(json.dumps(rows, indent=2) if args.json else markdown_table(rows))
    unreadable = [r["scenario"] for r in rows if r["outcome"] == "unreadable"]
    if unreadable:
        print(
            f"fedchain: warning: {len(unreadable)} run directories unreadable "
            f"({', '.join(map(str, unreadable))}): their rows say why",
            file=sys.stderr,
        )
    return 0


def _html_report(args: argparse.Namespace) -> int:
    from fedchain.dashboard.report_html import write_report

    if len(args.paths) != 1:
        raise ConfigError(
            f"RUN_DIR {' '.join(args.paths)!r}: --html writes one report per run or scenario "
            "set: give one directory"
        )
    out = write_report(Path(args.paths[0]), args.output)
    print(f"report: {out}")
    return 0
