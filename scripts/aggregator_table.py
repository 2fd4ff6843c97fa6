"""Print the malicious-aggregator table (markdown) of an ``aggregators-fmnist`` run.

    .venv/bin/python scripts/aggregator_table.py runs/experiments/aggregators-fmnist

Per (rule, committee, behaviour): final and last-5 accuracy (means over seeds), how many
seeds ended byte-identical to the honest twin (same rule, committee and seed), rounds
lost, faulty aggregates submitted / rejected / finalized, disputes, withheld slots,
blocks from a faulty submission to its rejection, dispute gas and total gas per run (means
over seeds). ``--csv FILE`` also writes the per-unit rows
(the cells CSV, without the accuracy series).
"""

from __future__ import annotations

import argparse
import csv
import math
from pathlib import Path
from typing import Any

from fedchain.experiments.execute import load_rows
from fedchain.experiments.study import aggregator_table

CSV_COLUMNS = (
    "rule",
    "aggregators",
    "aggregator_behaviour",
    "seed",
    "final_accuracy",
    "last5_accuracy",
    "final_model_digest",
    "rounds_finalized",
    "rounds_lost",
    "faulty_aggregates",
    "rejected",
    "faulty_finalized",
    "false_rejections",
    "disputes",
    "challenges",
    "withheld",
    "timeouts",
    "detection_blocks_mean",
    "dispute_gas_total",
    "total_gas",
    "gas_per_round",
)


def _num(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float) and (value >= 1000 or digits == 0):
        return f"{value:,.0f}"
    if isinstance(value, float) and digits == 1:
        return f"{value:.1f}"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("directory", nargs="?", default="runs/experiments/aggregators-fmnist")
    p.add_argument("--csv", help="also write the per-unit rows to this CSV file")
    args = p.parse_args(argv)
    rows = load_rows(Path(args.directory))
    if args.csv:
        with open(args.csv, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=CSV_COLUMNS, lineterminator="\n")
            w.writeheader()
            for r in sorted(rows, key=lambda r: tuple(str(r.get(k)) for k in CSV_COLUMNS[:4])):
                w.writerow({k: r.get(k) for k in CSV_COLUMNS})
    print(
        "| rule | n | behaviour | final acc. | last-5 acc. | = honest twin | rounds lost "
        "| faulty / rejected / finalized | disputes | withheld | blocks to rejection "
        "| dispute gas | total gas |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for t in aggregator_table(rows):
        print(
            f"| {t['rule']} | {t['aggregators']} | {t['aggregator_behaviour']} "
            f"| {_num(t['final_accuracy'])} | {_num(t['last5_accuracy'])} "
            f"| {t['identical']}/{t['seeds']} | {_num(t['rounds_lost'], 1)} "
            f"| {_num(t['faulty_aggregates'], 1)} / {_num(t['rejected'], 1)} / "
            f"{_num(t['faulty_finalized'], 1)} | {_num(t['disputes'], 1)} "
            f"| {_num(t['withheld'], 1)} | {_num(t['detection_blocks'], 1)} "
            f"| {_num(t['dispute_gas'], 0)} | {_num(t['total_gas'], 0)} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
