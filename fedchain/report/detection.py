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
    scen = json_object(summary.get("scenario"), "scenario")
    kinds = []
    for b in json_object(scen.get("aggregators"), "scenario.aggregators").values():
        b = json_object(b, "an aggregator's behaviour")
        publish = b.get("publish", "honest")
        parts = [str(publish)] if publish != "honest" else []
        if b.get("challenger", "honest") != "honest":
            parts.append(f"{b['challenger']} challenger")
        if b.get("pbft", "honest") != "honest":
            parts.append(f"{b['pbft']} PBFT")
        if b.get("attest", "honest") != "honest":
            parts.append(f"attests {b['attest']}")
        if b.get("crash_at"):
            parts.append(f"crash {b['crash_at']}")
        kinds.append("+".join(parts) or "honest")
    for c in json_object(scen.get("clients"), "scenario.clients").values():
        c = json_object(c, "a client's attack")
        to = json_object(c.get("params"), "a client's params").get("to")
        kinds.append(f"client {c.get('attack')}" + (f" to {to}" if to is not None else ""))
    unique = sorted(set(kinds))
    return ", ".join(unique) if unique else "honest"


def json_object(value: Any, name: str = "a field") -> dict[str, Any]:
    """``value`` if it is a JSON object, an empty one if it is missing (a reader tolerates
    missing fields), else TypeError naming the field (a wrong type is not guessed around)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TypeError(f"{name} is a JSON {type(value).__name__}, not an object")
    return value


def _read_object(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path.name} holds a JSON {type(data).__name__}, not an object")
    return data


def why_unreadable(exc: BaseException) -> str:
    """A short reason a run directory's files could not be read, for a table or a page."""
    if isinstance(exc, KeyError):
        return f"missing field {exc.args[0]!r}" if exc.args else "a missing field"
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text"
    if isinstance(exc, json.JSONDecodeError):
        return f"not JSON ({exc.msg} at line {exc.lineno})"
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    text = str(exc) or type(exc).__name__
    if isinstance(exc, TypeError | AttributeError):
        text = f"a field has the wrong type ({text})"
    return text[:200]


def detection_row(run_dir: Path) -> dict[str, Any] | None:
    """One table row from a run directory (None if it has no summary). A malformed
    directory (a file of the wrong type, missing fields) gives a row whose outcome is
    ``unreadable`` and whose behaviour says why, never an exception."""
    summary_path = run_dir / "summary.json"
    if not summary_path.exists():
        return None
    try:
        return _detection_row(run_dir, summary_path)
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        row: dict[str, Any] = {key: None for key, _ in COLUMNS}
        row.update(
            scenario=run_dir.name,
            behaviour=f"unreadable: {why_unreadable(exc)}",
            outcome="unreadable",
            expected=None,
            problems=[],
            run_dir=str(run_dir),
        )
        return row


def _detection_row(run_dir: Path, summary_path: Path) -> dict[str, Any]:
    summary = _read_object(summary_path)
    verdict_path = run_dir / "verdict.json"
    verdict = _read_object(verdict_path) if verdict_path.exists() else {}
    faults = json_object(summary.get("faults"), "faults")
    scen = json_object(summary.get("scenario"), "scenario")
    config = json_object(summary.get("config"), "config")
    source = scen.get("source") or config.get("name") or run_dir.name
    if summary.get("safety_violated"):
        outcome = "SAFETY VIOLATED"
    elif summary.get("liveness_lost"):
        outcome = "LIVENESS LOST"
    else:
        outcome = "safe"
    byzantine = scen.get("byzantine_aggregators")
    problems = verdict.get("problems")
    behaviour = _behaviour(summary)
    dispute = config.get("dispute", "pbft")
    if dispute != "pbft":  # issue 22: the one-step fault proof settles (or overrides) disputes
        behaviour += f" [dispute {dispute}]"
    dispute_gas = faults.get("dispute_gas_total")
    if isinstance(dispute_gas, int) and isinstance(faults.get("game_gas_total"), int):
        dispute_gas += faults["game_gas_total"]  # every game move, claims included
    return {
        "scenario": Path(str(source)).stem,
        "behaviour": behaviour,
        "n": config.get("aggregators"),
        "f": len(byzantine) if isinstance(byzantine, list) else 0,
        "faulty": faults.get("faulty_aggregates"),
        "withheld": faults.get("withheld"),
        "timeouts": faults.get("timeouts"),
        "rejected": faults.get("rejected"),
        "false_rejections": faults.get("false_rejections"),
        "faulty_finalized": faults.get("faulty_finalized"),
        "dispute_timeouts": faults.get("dispute_timeouts", 0),
        "equivocations": faults.get("equivocations_slashed", 0),
        "view_changes": faults.get("view_changes"),
        "blocks": faults.get("detection_blocks_mean"),
        "seconds": faults.get("detection_seconds_mean"),
        "dispute_gas": dispute_gas,
        "outcome": outcome,
        "identical": verdict.get("identical_to_honest"),
        "expected": verdict.get("expected"),
        "problems": [str(p) for p in problems] if isinstance(problems, list) else [],
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
            if row is not None and not str(row["scenario"]).endswith("-honest"):
                rows.append(row)
    rows.sort(
        key=lambda r: (
            str(r["scenario"]).startswith("collusion"),
            r["n"] if isinstance(r["n"], int) else -1,
            r["f"] if isinstance(r["f"], int) else -1,
            str(r["scenario"]),
        )
    )
    return rows
