"""The options and checks every ``fedchain`` command shares, below both its users.

The command line (:mod:`fedchain.cli`) and the dashboard's control panel
(:mod:`fedchain.dashboard`) read the same parser (:func:`build_parser`), run the same
pre-flight checks (:func:`check_command`, :func:`preflight`) and validate the same values
(:mod:`fedchain.options.values`: run names, list items, secrets, worker limits), so what the
panel accepts is exactly what the CLI accepts, and neither imports the other.
"""

from fedchain.options.checks import (
    check_command,
    demo_config,
    engine_overrides,
    error_line,
    experiment_out,
    experiment_spec,
    preflight,
)
from fedchain.options.parser import build_parser

__all__ = [
    "build_parser",
    "check_command",
    "demo_config",
    "engine_overrides",
    "error_line",
    "experiment_out",
    "experiment_spec",
    "preflight",
]
