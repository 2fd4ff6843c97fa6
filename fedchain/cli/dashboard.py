"""``fedchain dashboard``: the web dashboard on a loopback address."""

from __future__ import annotations

import argparse
from pathlib import Path


def main(args: argparse.Namespace) -> int:
    from fedchain.dashboard.server import serve

    return serve(
        runs=Path(args.runs),
        host=args.host,
        port=args.port,
        max_seconds=args.max_seconds,
        job_timeout=args.job_timeout,
        max_jobs=args.max_jobs,
        max_streams=args.max_streams,
    )
