"""Print the robustness study's headline table (markdown) from a run directory.

    .venv/bin/python scripts/study_table.py runs/experiments/robustness-fmnist

Per (partition, rule): the worst case over attacks of the last-5-round mean test accuracy
(the attack named), its 95 % Student-t interval and seed count, and the clean accuracy.
Cells still running are left out; a (partition, rule) whose attacks are not all finished
is marked "partial: a of A attacks".
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from fedchain.experiments.builtin import builtin
from fedchain.experiments.execute import load_rows
from fedchain.experiments.study import worst_case_table


def main(argv: list[str]) -> int:
    directory = Path(argv[1] if len(argv) > 1 else "runs/experiments/robustness-fmnist")
    spec = builtin("robustness-fmnist")
    total_attacks = len([a for a in spec.axes["attack"] if a != "none"])
    wanted = {c.id for c in spec.cells()}
    rows = [r for r in load_rows(directory) if r["cell_id"] in wanted]
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
