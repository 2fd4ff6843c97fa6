"""Print a robustness grid's headline table (markdown, or JSON) from its run directory.

    .venv/bin/python scripts/study_table.py runs/experiments/robustness-fmnist
    .venv/bin/python scripts/study_table.py runs/experiments/robustness-fmnist --by-rule
    .venv/bin/python scripts/study_table.py runs/experiments/robustness-fmnist-alpha --by-rule
    .venv/bin/python scripts/study_table.py DIR --experiment robustness-fmnist-f10 --json
    .venv/bin/python scripts/study_table.py DIR1 DIR2 --seed 0 --by-rule   # grids side by side
    .venv/bin/python scripts/study_table.py DIR1 DIR2 --experiment robustness-fmnist \\
        --experiment robustness-fmnist-overf --seed 0 --by-rule        # one builtin per DIR

Per (setting, rule), where the setting is the partition with its Dirichlet alpha: the worst
case over attacks of the last-5-round mean test accuracy (the attack named), its 95 %
Student-t interval and seed count, and the clean accuracy. Cells still running are left
out; a (setting, rule) whose attacks are not all finished is marked "partial: a of A
attacks". ``--by-rule``: one row per rule, one column per setting alone and after NNM
(mean ± interval, the attack, the seeds). The grid is the builtin named by
``--experiment``, or by the directory's name when that is a builtin.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from fedchain.experiments.builtin import BUILTINS, builtin
from fedchain.experiments.execute import load_rows
from fedchain.experiments.study import worst_case_table

SHORT = {
    "inner_product_manipulation(epsilon=0.1)": "IPM 0.1",
    "gaussian_noise(sigma=1.0, replace=true)": "Gaussian",
    "alie_opt": "ALIE opt.",
    "ipm_opt": "IPM opt.",
    "fang_trmean": "Fang trmean",
    "fang_krum": "Fang Krum",
    "sign_flip": "sign flip",
    "label_flip": "label flip",
    "min_max": "min-max",
    "min_sum": "min-sum",
}


SETTING_KEYS = ("byzantine", "assumed_byzantine")
METRICS = ("last5_accuracy", "final_accuracy", "min_after_warmup", "best_accuracy")


def setting_title(setting: str) -> str:
    """A column heading: ``iid`` -> IID, ``dirichlet alpha=0.1`` -> α = 0.1, then
    ``byzantine=0.1`` -> f = 10 %, ``assumed_byzantine=0.3`` -> told f = 30 %."""
    head, *extra = setting.split(" ")
    if head == "dirichlet" and extra and extra[0].startswith("alpha="):
        head = "α = " + extra.pop(0).split("=", 1)[1]
    parts = ["IID" if head == "iid" else head]
    for item in extra:
        key, _, value = item.partition("=")
        share = f"{float(value) * 100:g} %" if value.replace(".", "", 1).isdigit() else value
        if key == "byzantine":
            parts.append(f"f = {share}")
        elif key == "assumed_byzantine":
            parts.append("told the true f" if value in ("-", "true") else f"told f = {share}")
        else:
            parts.append(item)
    return ", ".join(parts)


def _worst(row: dict[str, Any]) -> str:
    """The worst case's mean, with its interval when it has one (not over one seed)."""
    ci = float(row["worst_ci95"])
    band = "" if math.isnan(ci) else f" ± {ci:.3f}"
    return f"{float(row['worst_mean']):.3f}{band}"


def _unfinished(row: dict[str, Any], total_attacks: int) -> str:
    """``"a of A attacks"`` for a cell whose attacks have not all finished, else ``""``."""
    return "" if row["attacks"] == total_attacks else f"{row['attacks']} of {total_attacks} attacks"


def by_rule(table: list[dict[str, Any]], total_attacks: int) -> list[str]:
    """One row per rule; per setting, a column alone and one after NNM. A cell whose
    attacks have not all finished says how many have ("7 of 12 attacks")."""
    cells = {(r["setting"], r["rule"]): r for r in table}
    settings = list(dict.fromkeys(str(r["setting"]) for r in table))
    rules = sorted({str(r["rule"]).removeprefix("nnm+") for r in table})
    heads = [f"{setting_title(s)}{suffix}" for s in settings for suffix in ("", " + NNM")]
    lines = ["| rule | " + " | ".join(heads) + " |", "|---" * (len(heads) + 1) + "|"]
    for rule in rules:
        out = []
        for setting in settings:
            for name in (rule, f"nnm+{rule}"):
                r = cells.get((setting, name))
                if r is None:
                    out.append("-")
                    continue
                attack = SHORT.get(str(r["worst_attack"]), str(r["worst_attack"]))
                missing = _unfinished(r, total_attacks)
                partial = f"; {missing}" if missing else ""
                out.append(f"{_worst(r)} ({attack}; n = {r['worst_n']}{partial})")
        lines.append(f"| {rule} | " + " | ".join(out) + " |")
    return lines


def by_setting(table: list[dict[str, Any]], total_attacks: int) -> list[str]:
    """One row per (setting, rule), with the clean accuracy and a partial-cell note."""
    lines = [
        "| setting | rule | clean | worst attack | worst-case last-5 accuracy | seeds | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in table:
        clean = "-" if r["clean"] is None else f"{r['clean']:.3f}"
        missing = _unfinished(r, total_attacks)
        note = f"partial: {missing}" if missing else ""
        lines.append(
            f"| {setting_title(r['setting'])} | {r['rule']} | {clean} | {r['worst_attack']} | "
            f"{_worst(r)} | {r['worst_n']} | {note} |"
        )
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="study_table.py",
        description="The worst case over attacks per (setting, rule) of a robustness grid.",
    )
    parser.add_argument(
        "directories",
        nargs="*",
        metavar="DIR",
        default=["runs/experiments/robustness-fmnist"],
        help="the grid's run directory, or several grids' (their settings side by side; "
        "default: %(default)s)",
    )
    parser.add_argument(
        "--experiment",
        action="append",
        help="the builtin grid a directory holds (default: the directory's name if it is "
        "a builtin, else robustness-fmnist); once for all directories, or once per "
        "directory in their order",
    )
    parser.add_argument(
        "--seed",
        type=int,
        help="only this seed's units (to set grids of unequal seeds side by side)",
    )
    parser.add_argument(
        "--metric",
        choices=METRICS,
        default="last5_accuracy",
        help="per unit: the mean of the last 5 rounds (default), the final round, the "
        "minimum after warm-up, or the best round (ByzFL's benchmark reports the best "
        "accuracy reached, so this one compares with it)",
    )
    parser.add_argument("--by-rule", action="store_true", help="one row per rule")
    parser.add_argument("--json", action="store_true", help="the table as JSON rows")
    args = parser.parse_args(argv[1:])
    rows: list[dict[str, Any]] = []
    names: list[str] = []
    units = 0
    total_attacks = 0
    given = args.experiment or []
    if len(given) not in (0, 1, len(args.directories)):
        parser.error("give --experiment once, or once per directory")
    for i, text in enumerate(args.directories):
        directory = Path(text)
        default = directory.name if directory.name in BUILTINS else "robustness-fmnist"
        name = given[i] if len(given) > 1 else given[0] if given else default
        if name not in BUILTINS:
            parser.error(f"unknown experiment {name!r}; builtins: {', '.join(sorted(BUILTINS))}")
        if not (directory / "cells").is_dir():
            parser.error(f"{directory} holds no cells/ directory: not a grid's run directory")
        spec = builtin(name)
        attacks = [a for a in spec.axes.get("attack", ()) if a != "none"]
        total_attacks = max(total_attacks, len(attacks))
        wanted = {c.id for c in spec.cells()}
        seeds = spec.seeds if args.seed is None else (args.seed,)
        units += len(spec.cells()) * len(seeds)
        rows += [
            r
            for r in load_rows(directory)
            if r["cell_id"] in wanted and (args.seed is None or r["seed"] == args.seed)
        ]
        names.append(name)
    name = ", ".join(names)
    if args.metric == "best_accuracy":
        rows = [{**r, "best_accuracy": max(r["accuracy_per_round"])} for r in rows]
    # grids side by side that differ in f (or in what the rules are told) keep apart
    keys = [k for k in SETTING_KEYS if len({str(r.get(k)) for r in rows}) > 1]
    table = worst_case_table(rows, args.metric, keys)
    if args.json:
        # strict JSON: an interval over one seed is undefined (NaN) and is written null
        strict = [
            {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in r.items()}
            for r in table
        ]
        summary = {"experiment": name, "metric": args.metric, "units": units}
        print(json.dumps({**summary, "finished": len(rows), "table": strict}, indent=1))
        return 0
    lines = by_rule(table, total_attacks) if args.by_rule else by_setting(table, total_attacks)
    print("\n".join(lines))
    print(f"\n({len(rows)} of {units} units of {name} finished; metric {args.metric})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
