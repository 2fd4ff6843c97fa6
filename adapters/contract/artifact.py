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
