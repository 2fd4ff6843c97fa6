"""``fedchain demo``: one complete federated training."""

from __future__ import annotations

import argparse
import json
from typing import Any

from fedchain.cli._backends import backends as _backends
from fedchain.options.checks import demo_config as _demo_config


def main(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from fedchain.sim.runner import run_demo
    from protocol.metrics import Progress

    with _backends(args) as backends:
        cfg = replace(_demo_config(args), **backends)
        result = run_demo(cfg, Progress(quiet=args.quiet))
    if args.json:
        print(json.dumps(result.summary, indent=2))
    return 0 if _run_ok(result.summary) else 1


def _run_ok(summary: dict[str, Any]) -> bool:
    """Every round finalized, or every round the privacy budget afforded (a clean stop)."""
    if summary["all_rounds_finalized"]:
        return True
    privacy = summary.get("privacy", {})
    return bool(privacy.get("budget_exhausted")) and not summary["liveness_lost"]
