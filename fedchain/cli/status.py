"""``fedchain status``: a deployed task's state over JSON-RPC."""

from __future__ import annotations

import argparse
import json


def main(args: argparse.Namespace) -> int:
    from fedchain.report.status import format_status, task_status

    status = task_status(args.rpc_url, args.task)
    print(json.dumps(status, indent=2) if args.json else format_status(status))
    return 0
