"""Tables over run directories: the fault-detection table of scenario runs."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

COLUMNS = (
    ("scenario", "scenario"),
    ("behaviour", "behaviour"),
    ("n", "n"),
    ("f", "f"),
    ("faulty", "faulty aggregates"),
    ("withheld", "withheld"),
    ("timeouts", "timeouts"),
    ("rejected", "rejected"),
    ("false_rejections", "false rejections"),
    ("faulty_finalized", "faulty finalized"),
    ("dispute_timeouts", "disputes timed out"),
    ("equivocations", "equivocators slashed"),
    ("view_changes", "view changes"),
    ("blocks", "blocks to detection"),
    ("seconds", "s to detection"),
    ("dispute_gas", "dispute gas"),
    ("outcome", "outcome"),
    ("identical", "= honest model"),
)


def _behaviour(summary: dict[str, Any]) -> str:
    scen = summary.get("scenario") or {}
    kinds = []
    for b in scen.get("aggregators", {}).values():
        parts = [b["publish"]] if b["publish"] != "honest" else []
        if b["challenger"] != "honest":
            parts.append(f"{b['challenger']} challenger")
        if b["pbft"] != "honest":
            parts.append(f"{b['pbft']} PBFT")
        if b.get("attest", "honest") != "honest":
            parts.append(f"attests {b['attest']}")
        if b["crash_at"]:
            parts.append(f"crash {b['crash_at']}")
        kinds.append("+".join(parts) or "honest")
    for c in scen.get("clients", {}).values():
        to = c.get("params", {}).get("to")
        kinds.append(f"client {c['attack']}" + (f" to {to}" if to is not None else ""))
    unique = sorted(set(kinds))
    return ", ".join(unique) if unique else "honest"


def detection_row(run_dir: Path) -> dict[str, Any] | None:
    """One table row from a run directory (None if it has no summary)."""
    summary_path = run_dir / "summary.json"
    if not summary_path.exists():
        return None
    summary = json.loads(summary_path.read_text())
    verdict_path = run_dir / "verdict.json"
    verdict = json.loads(verdict_path.read_text()) if verdict_path.exists() else {}
    faults = summary["faults"]
    scen = summary.get("scenario") or {}
    source = scen.get("source") or summary["config"]["name"]
    if summary["safety_violated"]:
        outcome = "SAFETY VIOLATED"
    elif summary["liveness_lost"]:
        outcome = "LIVENESS LOST"
    else:
        outcome = "safe"
    return {
        "scenario": Path(source).stem,
        "behaviour": _behaviour(summary),
        "n": summary["config"]["aggregators"],
        "f": len(scen.get("byzantine_aggregators", [])),
        "faulty": faults["faulty_aggregates"],
        "withheld": faults["withheld"],
        "timeouts": faults["timeouts"],
        "rejected": faults["rejected"],
        "false_rejections": faults["false_rejections"],
        "faulty_finalized": faults["faulty_finalized"],
        "dispute_timeouts": faults.get("dispute_timeouts", 0),
        "equivocations": faults.get("equivocations_slashed", 0),
        "view_changes": faults["view_changes"],
        "blocks": faults["detection_blocks_mean"],
        "seconds": faults["detection_seconds_mean"],
        "dispute_gas": faults["dispute_gas_total"],
        "outcome": outcome,
        "identical": verdict.get("identical_to_honest"),
        "expected": verdict.get("expected"),
        "problems": verdict.get("problems", []),
        "run_dir": str(run_dir),
    }


def format_cell(value: Any) -> str:
    """A table cell as the detection table prints it (`-`, yes/NO, thousands separators)."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, int) and value >= 10_000:
        return f"{value:,}"
    return str(value)


def markdown_table(rows: Iterable[dict[str, Any]]) -> str:
    """Render rows as a GitHub-flavoured markdown table."""
    header = "| " + " | ".join(title for _, title in COLUMNS) + " |"
    rule = "|" + "|".join("---" for _ in COLUMNS) + "|"
    body = ["| " + " | ".join(format_cell(r[key]) for key, _ in COLUMNS) + " |" for r in rows]
    return "\n".join([header, rule, *body])


def collect(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Rows for every run directory among ``paths`` (directories of runs are searched)."""
    rows = []
    for p in map(Path, paths):
        candidates = [p] if (p / "summary.json").exists() else sorted(p.glob("*/"))
        for run_dir in candidates:
            row = detection_row(run_dir)
            if row is not None and not row["scenario"].endswith("-honest"):
                rows.append(row)
    rows.sort(key=lambda r: (r["scenario"].startswith("collusion"), r["n"], r["f"], r["scenario"]))
    return rows
