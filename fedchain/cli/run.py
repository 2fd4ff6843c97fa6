"""``fedchain run``: scenario files."""

from __future__ import annotations

import argparse
import contextlib
import json
from typing import Any

from fedchain.cli._backends import backends as _backends
from fedchain.options.checks import engine_overrides as _engine_overrides


def main(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from fedchain.sim.runner import run_scenario
    from fedchain.sim.scenario import check_expectations, load_scenario, outcome_of
    from protocol.metrics import Progress

    scenarios = [load_scenario(path) for path in args.scenarios]  # all validated up front
    progress = Progress(quiet=args.quiet)
    results = []
    failed = False
    honest_cache: dict[str, dict[str, Any]] = {}
    stack = contextlib.ExitStack()
    backends = stack.enter_context(_backends(args))
    for scenario in scenarios:
        scenario.config = replace(
            scenario.config, out=args.out, **backends, **_engine_overrides(args)
        )
        if args.seed is not None:
            scenario.config = replace(scenario.config, seed=args.seed)
        result = run_scenario(scenario, progress)
        honest = None
        if args.compare_honest or scenario.expect.get("identical_to_honest"):
            twin = scenario.honest_twin()
            key = json.dumps(
                {
                    "config": {k: v for k, v in vars(twin.config).items() if k != "name"},
                    "clients": twin.describe()["clients"],
                },
                sort_keys=True,
            )
            if key not in honest_cache:
                honest_cache[key] = run_scenario(twin, Progress(quiet=True)).summary
            honest = honest_cache[key]
        problems = check_expectations(scenario, result.summary, honest)
        entry = {
            "scenario": scenario.source,
            "run_dir": str(result.run_dir),
            "outcome": outcome_of(result.summary),
            "expected": scenario.expect.get("outcome"),
            "identical_to_honest": None
            if honest is None
            else result.summary["final_model_digest"] == honest["final_model_digest"],
            "faults": {k: v for k, v in result.summary["faults"].items() if k != "crashes"},
            "problems": problems,
        }
        (result.run_dir / "verdict.json").write_text(json.dumps(entry, indent=2) + "\n")
        results.append(entry)
        if problems:
            failed = True
            progress.line(f"EXPECTATION NOT MET for {scenario.source}: {'; '.join(problems)}")
        elif honest is not None:
            progress.line(
                "final model byte-identical to the honest-aggregator twin: "
                + ("yes" if entry["identical_to_honest"] else "NO")
            )
    stack.close()
    if args.json:
        print(json.dumps(results, indent=2))
    return 1 if failed else 0
