"""The committed contract artifact matches a fresh compilation of contracts/ (drift check)."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from adapters import compile as fcompile

NODE = shutil.which("node")
HAVE_TOOLCHAIN = NODE is not None and (fcompile.NODE_MODULES / "solc" / "package.json").is_file()
needs_toolchain = pytest.mark.skipif(
    not HAVE_TOOLCHAIN, reason="node or node_modules/solc missing (run `make setup`)"
)


@pytest.fixture(scope="module")
def fresh() -> dict[str, dict[str, Any]]:
    """One in-memory compilation shared by the module (~5 s with solc-js)."""
    if not HAVE_TOOLCHAIN:
        pytest.skip("node or node_modules/solc missing (run `make setup`)")
    return fcompile.build_artifacts()


def committed(name: str = "FedChainTask") -> dict[str, Any]:
    artifact: dict[str, Any] = json.loads(fcompile.artifact_path(name).read_text("utf-8"))
    return artifact


@needs_toolchain
def test_committed_artifact_matches_sources(fresh: dict[str, dict[str, Any]]) -> None:
    art = committed()
    new = fresh["FedChainTask"]
    for field in ("abi", "bytecode", "deployedBytecode", "sources", "compiler"):
        assert art[field] == new[field], (
            f"contracts/build/FedChainTask.json is stale ({field}); run `make compile`"
        )
    assert art == new  # byte-identical JSON content


def test_artifact_metadata() -> None:
    art = committed()
    assert art["compiler"]["version"].startswith("0.8.37+commit.")
    settings = art["compiler"]["settings"]
    assert settings["evmVersion"] == "cancun"
    assert settings["optimizer"] == {"enabled": True, "runs": 200}
    assert "FedChainTask.sol" in art["sources"] and "lib/Rotation.sol" in art["sources"]
    assert any(unit.startswith("@openzeppelin/contracts/") for unit in art["sources"])
    assert all(len(digest) == 64 for digest in art["sources"].values())
    assert art["deployedSize"] == (len(art["deployedBytecode"]) - 2) // 2 < 24_576
    assert art["warnings"] == []


@needs_toolchain
def test_check_cli_detects_drift(
    fresh: dict[str, dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(fcompile, "build_artifacts", lambda: copy.deepcopy(fresh))
    monkeypatch.setattr(fcompile, "BUILD_DIR", tmp_path)
    monkeypatch.setattr(fcompile, "REPO_ROOT", tmp_path.parent)
    target = tmp_path / "FedChainTask.json"
    for name, artifact in fresh.items():  # every deployable (the task, its privacy records)
        (tmp_path / f"{name}.json").write_text(json.dumps(artifact), encoding="utf-8")
    assert fcompile.main(["--check"]) == 0
    assert "up to date" in capsys.readouterr().out

    tampered = copy.deepcopy(fresh["FedChainTask"])
    tampered["deployedBytecode"] = tampered["deployedBytecode"][:-2] + "00"
    target.write_text(json.dumps(tampered), encoding="utf-8")
    assert fcompile.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert "deployedBytecode" in err and "make compile" in err

    target.unlink()
    assert fcompile.main(["--check"]) == 1
    assert "missing" in capsys.readouterr().err

    assert fcompile.main([]) == 0  # write mode recreates it
    assert json.loads(target.read_text("utf-8")) == fresh["FedChainTask"]


def test_evidence_codehash_matches_the_committed_artifact() -> None:
    """The generated EVIDENCE_CODEHASH is keccak256 of EquivocationEvidence's committed runtime
    code (no immutables, no CBOR metadata: what a deployment's eth_getCode returns)."""
    from eth_utils.crypto import keccak

    art = committed("EquivocationEvidence")
    generated = (fcompile.CONTRACTS_DIR / fcompile.CODEHASH_UNIT).read_text("utf-8")
    digest = keccak(hexstr=art["deployedBytecode"])
    assert generated == fcompile.render_codehash_source(digest)
    assert f"EVIDENCE_CODEHASH = 0x{digest.hex()};" in generated
    assert art["compiler"]["settings"]["metadata"] == {"appendCBOR": False, "bytecodeHash": "none"}


@needs_toolchain
def test_check_cli_detects_stale_generated_codehash(
    fresh: dict[str, dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--check`` fails while contracts/lib/EvidenceCodeHash.sol is missing or names another
    hash; write mode regenerates it."""
    build = tmp_path / "build"
    build.mkdir()
    (tmp_path / "lib").mkdir()
    monkeypatch.setattr(fcompile, "build_artifacts", lambda: copy.deepcopy(fresh))
    monkeypatch.setattr(fcompile, "BUILD_DIR", build)
    monkeypatch.setattr(fcompile, "REPO_ROOT", tmp_path.parent)
    monkeypatch.setattr(fcompile, "GENERATED_DIR", tmp_path)
    for name, artifact in fresh.items():
        (build / f"{name}.json").write_text(json.dumps(artifact), encoding="utf-8")
    real = (fcompile.CONTRACTS_DIR / fcompile.CODEHASH_UNIT).read_text("utf-8")
    target = tmp_path / fcompile.CODEHASH_UNIT
    target.write_text(real, encoding="utf-8")
    assert fcompile.main(["--check"]) == 0
    capsys.readouterr()

    target.write_text(fcompile.render_codehash_source(b"\x01" * 32), encoding="utf-8")
    assert fcompile.main(["--check"]) == 1
    assert "EvidenceCodeHash.sol (generated) is missing or stale" in capsys.readouterr().err

    target.unlink()
    assert fcompile.main(["--check"]) == 1
    assert "EvidenceCodeHash.sol" in capsys.readouterr().err

    assert fcompile.main([]) == 0  # write mode regenerates it
    assert target.read_text("utf-8") == real


@needs_toolchain
def test_wrapper_is_a_solc_binary_for_solcx() -> None:
    import solcx.wrapper
    from packaging.version import Version

    out = subprocess.run(
        [str(fcompile.WRAPPER), "--version"], capture_output=True, text=True, check=True
    ).stdout
    assert out.startswith("solc, the solidity compiler commandline interface\nVersion: 0.8.37+")
    assert solcx.wrapper.get_solc_version(fcompile.WRAPPER) == Version("0.8.37")


@needs_toolchain
def test_wrapper_prints_only_json_and_confines_imports() -> None:
    source = (
        "// SPDX-License-Identifier: MIT\npragma solidity ^0.8.24;\n"
        'import {Context} from "@openzeppelin/contracts/utils/Context.sol";\n'
        'import "../../../../etc/hostname";\n'
        "contract A is Context {}\n"
    )
    request = {
        "language": "Solidity",
        "sources": {"A.sol": {"content": source}},
        "settings": {"outputSelection": {"*": {"*": ["abi"]}}},
    }
    proc = subprocess.run(
        [str(fcompile.WRAPPER), "--standard-json"],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        check=True,
    )
    output = json.loads(proc.stdout)  # nothing but JSON on stdout
    messages = " ".join(e["message"] for e in output.get("errors", []))
    assert "etc/hostname" in messages and "not found" in messages


def test_missing_toolchain_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fcompile, "NODE_MODULES", tmp_path)
    with pytest.raises(fcompile.CompileError, match="make setup"):
        fcompile.build_artifacts()
    monkeypatch.setattr(fcompile.shutil, "which", lambda _name: None)
    with pytest.raises(fcompile.CompileError, match="node"):
        fcompile.compile_contracts()
    assert fcompile.main(["--check"]) == 2


def test_foundry_tests_are_not_part_of_the_artifacts() -> None:
    """contracts/test/ (forge tests, `make forge-test`) never enters adapters.compile's input."""
    forge_tests = sorted(fcompile.TEST_DIR.rglob("*.sol"))
    assert forge_tests, "contracts/test/ holds the Foundry tests"
    units = fcompile._local_sources()
    assert not [unit for unit in units if unit.startswith("test/")]
    assert "FedChainTask.sol" in units and "PrivacyRecords.sol" in units
