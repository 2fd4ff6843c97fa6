"""Print the robustness study's headline table (markdown) from a run directory.

    .venv/bin/python scripts/study_table.py runs/experiments/robustness-fmnist
    .venv/bin/python scripts/study_table.py runs/experiments/robustness-fmnist --by-rule

Per (partition, rule): the worst case over attacks of the last-5-round mean test accuracy
(the attack named), its 95 % Student-t interval and seed count, and the clean accuracy.
Cells still running are left out; a (partition, rule) whose attacks are not all finished
is marked "partial: a of A attacks". ``--by-rule``: one row per rule, one column per
partition alone and after NNM (mean ± interval, the attack, the seeds).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from fedchain.experiments.builtin import builtin
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


def by_rule(table: list[dict[str, object]]) -> None:
    """One row per rule: IID, IID + NNM, Dirichlet, Dirichlet + NNM."""
    cells = {(r["partition"], r["rule"]): r for r in table}
    rules = sorted({str(r["rule"]).removeprefix("nnm+") for r in table})
    print("| rule | IID | IID + NNM | Dirichlet α = 0.1 | α = 0.1 + NNM |")
    print("|---|---|---|---|---|")
    for rule in rules:
        out = []
        for part in ("iid", "dirichlet"):
            for name in (rule, f"nnm+{rule}"):
                r = cells.get((part, name))
                if r is None:
                    out.append("-")
                    continue
                ci = r["worst_ci95"]
                mean = float(r["worst_mean"])  # type: ignore[arg-type]
                band = "" if math.isnan(float(ci)) else f" ± {float(ci):.3f}"  # type: ignore[arg-type]
                attack = SHORT.get(str(r["worst_attack"]), str(r["worst_attack"]))
                out.append(f"{mean:.3f}{band} ({attack}; n = {r['worst_n']})")
        print(f"| {rule} | " + " | ".join(out) + " |")


def main(argv: list[str]) -> int:
    args = [a for a in argv[1:] if not a.startswith("--")]
    directory = Path(args[0] if args else "runs/experiments/robustness-fmnist")
    spec = builtin("robustness-fmnist")
    total_attacks = len([a for a in spec.axes["attack"] if a != "none"])
    wanted = {c.id for c in spec.cells()}
    rows = [r for r in load_rows(directory) if r["cell_id"] in wanted]
    if "--by-rule" in argv:
        by_rule(worst_case_table(rows))
        print(f"\n({len(rows)} of {len(spec.cells()) * len(spec.seeds)} units finished)")
        return 0
    print("| partition | rule | clean | worst attack | worst-case last-5 accuracy | seeds | note |")
    print("|---|---|---|---|---|---|---|")
    for r in worst_case_table(rows):
        ci = "" if math.isnan(r["worst_ci95"]) else f" ± {r['worst_ci95']:.3f}"
        clean = "-" if r["clean"] is None else f"{r['clean']:.3f}"
        note = (
            ""
            if r["attacks"] == total_attacks
            else f"partial: {r['attacks']} of {total_attacks} attacks"
        )
        print(
            f"| {r['partition']} | {r['rule']} | {clean} | {r['worst_attack']} | "
            f"{r['worst_mean']:.3f}{ci} | {r['worst_n']} | {note} |"
        )
    print(f"\n({len(rows)} of {len(spec.cells()) * len(spec.seeds)} units finished)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
