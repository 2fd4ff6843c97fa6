"""The ``fedchain`` command line: one module per command over :mod:`fedchain.options`.

:mod:`fedchain.options` holds the parser, the pre-flight checks and the configuration each
command builds from its options (the dashboard's control panel uses the same layer, so the
CLI and the dashboard never import each other); each command's work is in its own module
here (``demo``, ``run``, ``testnet``, ``netem``, ``experiment``, ``report``, ``dashboard``,
``status``, ``rules``). :func:`main` parses, runs the command's pre-flight checks, then the
command; bad input is one line on stderr and exit status 2.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from fedchain.options import build_parser, check_command, error_line, preflight
from protocol.errors import FedchainError

__all__ = ["COMMANDS", "build_parser", "check_command", "main"]

#: Each subcommand and the module under ``fedchain.cli`` whose ``main(args)`` runs it.
COMMANDS = {
    "demo": "demo",
    "run": "run",
    "testnet": "testnet",
    "netem": "netem",
    "experiment": "experiment",
    "report": "report",
    "dashboard": "dashboard",
    "status": "status",
    "rules": "rules",
}


def main(argv: Sequence[str] | None = None) -> int:
    """``fedchain ARGV``: the exit status (0 ok, 1 a run failed its check, 2 bad input,
    130 interrupted)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    module = importlib.import_module(f"fedchain.cli.{COMMANDS[args.command]}")
    try:
        preflight(args)
        return int(module.main(args))
    except (FedchainError, OSError) as exc:
        line = error_line(exc)
        if line is None:
            raise
        print(line, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fedchain: interrupted", file=sys.stderr)
        return 130
