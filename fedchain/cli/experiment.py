"""``fedchain experiment``: a grid of runs over seeds."""

from __future__ import annotations

import argparse
import json
import sys

from fedchain.options.checks import experiment_out, experiment_spec


def main(args: argparse.Namespace) -> int:
    from fedchain.experiments.execute import run_experiment
    from protocol.metrics import Progress

    spec = experiment_spec(args)
    out = experiment_out(args, spec)
    result = run_experiment(
        spec,
        out,
        jobs=args.jobs,
        progress=Progress(quiet=args.quiet),
        command=["fedchain", "experiment", *sys.argv[2:]],
        quick=args.quick,
        report_only=args.report_only,
    )
    if args.json:
        from fedchain.experiments.stats import describe, group_rows

        cells = []
        for key, members in group_rows(result.rows, ["cell_id"]).items():
            first = members[0]
            stats = {}
            for metric, value in first.items():
                if (
                    isinstance(value, int | float)
                    and not isinstance(value, bool)
                    and metric not in ("seed",)
                    and metric not in spec.fixed
                    and metric not in spec.axes
                ):
                    st = describe(m.get(metric) for m in members)
                    stats[metric] = {"mean": st.mean, "std": st.std, "ci95": st.ci95, "n": st.n}
            cells.append(
                {
                    "cell_id": key[0],
                    "axes": {a: first.get(a) for a in spec.axes},
                    "seeds": sorted(m["seed"] for m in members),
                    "metrics": stats,
                }
            )
        print(
            json.dumps(
                {
                    "experiment": spec.name,
                    "directory": str(result.directory),
                    "status": result.status,
                    "units_run": result.ran,
                    "units_reused": result.reused,
                    "wall_seconds": round(result.wall_seconds, 3),
                    "cells": cells,
                },
                indent=2,
                default=str,
            )
        )
    if args.report_only:
        return 0
    return 0 if result.status == "finished" else 130
