"""Slither gate: the contract has no untriaged High/Medium finding, and a new one fails.

Runs Slither from ``.venv-slither`` (``make setup-slither``) exactly as ``make slither``
does: solc-js through ``scripts/solc_wrapper.js --combined-json``, ``slither.config.json``,
``--fail-medium``. The second test plants a Medium finding (an uninitialized local) into a
copy of the contract and checks the gate fails on it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SLITHER = REPO / ".venv-slither" / "bin" / "slither"

pytestmark = pytest.mark.skipif(
    not SLITHER.exists() and not os.environ.get("FEDCHAIN_REQUIRE_REALNET"),
    reason="Slither is not installed: run `make setup-slither`",
)


def _slither(cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SLITHER), "contracts/FedChainTask.sol", "--fail-medium"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_contract_has_no_untriaged_finding() -> None:
    done = _slither(REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 result(s) found" in done.stderr


def test_a_new_medium_finding_fails_the_gate(tmp_path: Path) -> None:
    shutil.copytree(
        REPO / "contracts", tmp_path / "contracts", ignore=shutil.ignore_patterns("build")
    )
    shutil.copy(REPO / "slither.config.json", tmp_path)
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "solc_wrapper.js", tmp_path / "scripts")
    (tmp_path / "node_modules").symlink_to(REPO / "node_modules")
    source = tmp_path / "contracts" / "FedChainTask.sol"
    text = source.read_text()
    planted = (
        "    function plantedFinding() external pure returns (uint256) {\n"
        "        uint256 never;\n"
        "        return never;\n"
        "    }\n}\n"
    )
    source.write_text(text[: text.rstrip().rfind("}")] + planted)
    done = _slither(tmp_path)
    assert done.returncode != 0
    assert "uninitialized-local" in done.stderr and "plantedFinding" in done.stderr
