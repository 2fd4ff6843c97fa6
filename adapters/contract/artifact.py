"""The committed ``FedChainTask`` artifact (ABI + bytecode; no compiler at run time)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

ARTIFACT_PATH = Path(__file__).resolve().parents[2] / "contracts" / "build" / "FedChainTask.json"


@cache
def _load_artifact(path: str) -> dict[str, Any]:
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(
            f"contract artifact {file} is missing; run `make compile` (python -m adapters.compile)"
        )
    artifact: dict[str, Any] = json.loads(file.read_text("utf-8"))
    return artifact


def load_artifact(path: Path | str | None = None) -> dict[str, Any]:
    """The compiled ``FedChainTask`` artifact (abi, bytecode, ...). Cached per path."""
    return _load_artifact(str(path or ARTIFACT_PATH))


#: TaskDisputes functions a task reaches through its fallback (no forwarder in FedChainTask:
#: the task's code size): the task-level data-availability game (docs/fault-proof.md).
FALLBACK_FUNCTIONS: tuple[str, ...] = (
    "challengeAvailability",
    "answerAvailability",
    "expireAvailability",
    "availabilityChallenge",
)


def task_abi(artifact: dict[str, Any]) -> list[dict[str, Any]]:
    """``artifact``'s ABI plus the TaskDisputes functions the task serves through its
    fallback (:data:`FALLBACK_FUNCTIONS`), so one web3 contract object calls them all."""
    disputes = load_artifact(ARTIFACT_PATH.with_name("TaskDisputes.json"))
    extra = [
        entry
        for entry in disputes["abi"]
        if entry.get("type") == "function" and entry.get("name") in FALLBACK_FUNCTIONS
    ]
    return [*artifact["abi"], *extra]
