"""The layer contract (pyproject ``[tool.importlinter]``) holds, and the check can fail.

``make test`` runs ``lint-imports`` on the repository. These tests run the same contract on
a copy of the packages: unchanged it is kept; with one upward import planted in a
primitive, it is broken and ``lint-imports`` exits non-zero naming the offending import.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("fedchain", "clients", "aggregators", "consensus", "adapters", "privacy", "protocol")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _copy_tree(dest: Path) -> None:
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, dest / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")


def _lint(cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=cwd,
        env={"PYTHONPATH": str(cwd), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    _copy_tree(tmp_path)
    return tmp_path


def test_layers_kept(tree: Path) -> None:
    result = _lint(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "KEPT" in result.stdout


@pytest.mark.parametrize(
    ("module", "upward"),
    [
        ("protocol/codec.py", "import fedchain.sim.runner"),  # bottom -> top
        ("protocol/cid.py", "import adapters.storage"),  # bottom -> middle
        ("adapters/chain.py", "import aggregators.registry"),  # adapter -> node package
        ("aggregators/execution.py", "import fedchain.sim.scenario"),  # node package -> top
        ("clients/training.py", "import aggregators.registry"),  # sideways between nodes
        ("privacy/secagg.py", "import adapters.storage"),  # sideways: pure cores vs adapters
        ("privacy/accounting.py", "import clients.node"),  # pure core -> node package
        ("protocol/manifest.py", "import privacy.spec"),  # bottom -> pure cores
    ],
)
def test_upward_import_breaks_the_contract(tree: Path, module: str, upward: str) -> None:
    path = tree / module
    path.write_text(path.read_text() + f"\n{upward}  # planted by the test\n")
    result = _lint(tree)
    assert result.returncode != 0
    assert "BROKEN" in result.stdout
    importer = module.removesuffix(".py").replace("/", ".")
    assert importer in result.stdout
