"""Compile the Solidity contracts into the committed artifacts under ``contracts/build/``.

Compilation goes through py-solc-x's ``compile_standard`` with ``scripts/solc_wrapper.js`` as
the solc binary (a Node script backed by the pinned solc-js in ``node_modules``), so no native
compiler download is needed. Nothing at run time needs a compiler: ``adapters.contract`` loads
the JSON artifact.

Usage::

    python -m adapters.compile           # (re)write contracts/build/FedChainTask.json
    python -m adapters.compile --check   # exit 1 if the committed artifact has drifted
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from protocol.errors import FedchainError

REPO_ROOT = Path(__file__).resolve().parent.parent
CONTRACTS_DIR = REPO_ROOT / "contracts"
BUILD_DIR = CONTRACTS_DIR / "build"
#: Foundry tests and their helpers (``make forge-test``): never part of the artifacts.
TEST_DIR = CONTRACTS_DIR / "test"
NODE_MODULES = REPO_ROOT / "node_modules"
WRAPPER = REPO_ROOT / "scripts" / "solc_wrapper.js"

#: Source unit name (relative to ``contracts/``) -> contract name, for every deployable.
MAIN_CONTRACTS: dict[str, str] = {
    "FedChainTask.sol": "FedChainTask",
    "PrivacyRecords.sol": "PrivacyRecords",
    "OneStep.sol": "OneStep",
    "FaultGames.sol": "FaultGames",
    "TaskDisputes.sol": "TaskDisputes",
    # deployed by each FedChainTask; its ABI is what reporters commit equivocation evidence to
    "lib/EquivocationEvidence.sol": "EquivocationEvidence",
}

#: Compiler settings; part of the artifact so a settings change shows up as drift.
SETTINGS: dict[str, Any] = {
    "evmVersion": "cancun",
    "optimizer": {"enabled": True, "runs": 200},
    "viaIR": False,
    # no CBOR metadata: the runtime code depends on the code only, so EquivocationEvidence's
    # code hash (EVIDENCE_CODEHASH) is the same under Foundry (foundry.toml: cbor_metadata
    # = false, bytecode_hash = "none")
    "metadata": {"appendCBOR": False, "bytecodeHash": "none"},
    "outputSelection": {
        "*": {
            "*": [
                "abi",
                "evm.bytecode.object",
                "evm.deployedBytecode.object",
                "evm.methodIdentifiers",
                "devdoc",
                "userdoc",
            ]
        }
    },
}

#: EquivocationEvidence: deployed by its own transaction; the task accepts only its code hash.
EVIDENCE_UNIT = "lib/EquivocationEvidence.sol"
EVIDENCE_NAME = "EquivocationEvidence"
#: The generated Solidity file holding ``EVIDENCE_CODEHASH`` (committed; ``--check`` compares).
CODEHASH_UNIT = "lib/EvidenceCodeHash.sol"
#: Where the generated sources are written (their unit names are relative to it).
GENERATED_DIR = CONTRACTS_DIR

#: Fields compared by ``--check`` (the ones the Python side actually uses).
CHECKED_FIELDS = ("abi", "bytecode", "deployedBytecode")

#: EIP-170 runtime code size limit.
MAX_RUNTIME_SIZE = 24_576


class CompileError(FedchainError):
    """The Solidity toolchain is missing, or compilation failed."""


def _require_toolchain() -> str:
    node = shutil.which("node")
    if node is None:
        raise CompileError("`node` is not on PATH; install Node 20+ and run `make setup`")
    if not (NODE_MODULES / "solc" / "package.json").is_file():
        raise CompileError(
            f"solc-js is missing from {NODE_MODULES}; run `make setup` (npm ci) first"
        )
    if not (NODE_MODULES / "@openzeppelin" / "contracts").is_dir():
        raise CompileError(
            f"@openzeppelin/contracts is missing from {NODE_MODULES}; run `make setup` first"
        )
    if not WRAPPER.is_file():
        raise CompileError(f"compiler wrapper {WRAPPER} is missing")
    return node


def _local_sources() -> dict[str, Path]:
    """Every ``.sol`` file under ``contracts/`` (except build output and the Foundry tests
    under ``contracts/test``), by source unit name."""
    return {
        path.relative_to(CONTRACTS_DIR).as_posix(): path
        for path in sorted(CONTRACTS_DIR.rglob("*.sol"))
        if BUILD_DIR not in path.parents and TEST_DIR not in path.parents
    }


def _resolve_unit(unit: str) -> Path:
    """The file behind a source unit name, resolved like ``solc_wrapper.js`` does."""
    if unit.startswith("@"):
        return NODE_MODULES / unit
    local = CONTRACTS_DIR / unit
    return local if local.is_file() else NODE_MODULES / unit


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _run_solc(standard_input: dict[str, Any]) -> dict[str, Any]:
    _require_toolchain()
    import solcx  # imported lazily: run-time users never need it
    from solcx.exceptions import SolcError

    try:
        output: dict[str, Any] = solcx.compile_standard(
            standard_input,
            solc_binary=WRAPPER,
            allow_paths=[str(CONTRACTS_DIR), str(NODE_MODULES)],
        )
    except SolcError as exc:
        raise CompileError(f"solc failed:\n{exc}") from exc
    except FileNotFoundError as exc:  # pragma: no cover - shebang interpreter missing
        raise CompileError(f"cannot run {WRAPPER}: {exc}; run `make setup`") from exc
    return output


def compiler_version() -> str:
    """The solc version string reported by the wrapper (e.g. ``0.8.37+commit.f401782d``)."""
    _require_toolchain()
    import solcx.wrapper

    return solcx.wrapper.get_version_str_from_solc_binary(WRAPPER)


def render_codehash_source(codehash: bytes) -> str:
    """The text of ``contracts/lib/EvidenceCodeHash.sol`` for EquivocationEvidence's runtime
    code hash ``codehash``."""
    return (
        "// SPDX-License-Identifier: MIT\n"
        "// GENERATED FILE, DO NOT EDIT: written by `python -m adapters.compile`\n"
        "// (adapters/compile.py) from keccak256 of EquivocationEvidence's runtime code\n"
        "// (contracts/lib/EquivocationEvidence.sol, compiled without CBOR metadata);\n"
        "// `python -m adapters.compile --check` fails when it is stale.\n"
        "pragma solidity ^0.8.24;\n"
        "\n"
        "/// @dev Code hash of the only EquivocationEvidence a FedChainTask accepts (EIP-3860:\n"
        "///      deployed by its own transaction, checked by the task's constructor).\n"
        f"bytes32 constant EVIDENCE_CODEHASH = 0x{codehash.hex()};\n"
    )


def _evidence_runtime() -> str:
    """EquivocationEvidence's runtime code (hex), compiled on its own (its imports only)."""
    path = CONTRACTS_DIR / EVIDENCE_UNIT
    output = _run_solc(
        {
            "language": "Solidity",
            "sources": {EVIDENCE_UNIT: {"content": path.read_text("utf-8")}},
            "settings": SETTINGS,
        }
    )
    try:
        runtime: str = output["contracts"][EVIDENCE_UNIT][EVIDENCE_NAME]["evm"]["deployedBytecode"][
            "object"
        ]
    except KeyError as exc:
        raise CompileError(f"solc produced no output for {EVIDENCE_UNIT}:{EVIDENCE_NAME}") from exc
    return runtime


def generated_sources() -> dict[str, str]:
    """The generated Solidity sources, by source unit name: ``lib/EvidenceCodeHash.sol`` from
    EquivocationEvidence compiled first (it imports nothing generated)."""
    from eth_utils.crypto import keccak

    return {CODEHASH_UNIT: render_codehash_source(keccak(hexstr=_evidence_runtime()))}


def build_artifacts() -> dict[str, dict[str, Any]]:
    """Compile every main contract in memory and return ``{contract name: artifact}`` (with the
    generated sources as :func:`generated_sources` makes them, whatever is on disk)."""
    sources = _local_sources()
    generated = generated_sources()
    contents = {unit: path.read_text("utf-8") for unit, path in sources.items()} | generated
    standard_input = {
        "language": "Solidity",
        "sources": {unit: {"content": text} for unit, text in contents.items()},
        "settings": SETTINGS,
    }
    output = _run_solc(standard_input)
    evidence = output.get("contracts", {}).get(EVIDENCE_UNIT, {}).get(EVIDENCE_NAME, {})
    runtime = evidence.get("evm", {}).get("deployedBytecode", {}).get("object")
    from eth_utils.crypto import keccak

    together = None if runtime is None else render_codehash_source(keccak(hexstr=runtime))
    if together != generated[CODEHASH_UNIT]:
        raise CompileError(
            f"{EVIDENCE_NAME} compiles to other code with the other contracts than on its own: "
            f"{CODEHASH_UNIT} would not match the deployed code"
        )
    version = compiler_version()
    used_units = sorted(output.get("sources", {}))
    source_hashes = {
        unit: hashlib.sha256(generated[unit].encode("utf-8")).hexdigest()
        if unit in generated
        else _sha256(_resolve_unit(unit))
        for unit in used_units
    }

    artifacts: dict[str, dict[str, Any]] = {}
    for unit, name in MAIN_CONTRACTS.items():
        try:
            compiled = output["contracts"][unit][name]
        except KeyError as exc:
            raise CompileError(f"solc produced no output for {unit}:{name}") from exc
        deployed = compiled["evm"]["deployedBytecode"]["object"]
        size = len(deployed) // 2
        if size > MAX_RUNTIME_SIZE:
            raise CompileError(
                f"{name} runtime code is {size} bytes, over the EIP-170 limit {MAX_RUNTIME_SIZE}"
            )
        warnings = [
            e["formattedMessage"]
            for e in output.get("errors", [])
            if e.get("severity") == "warning" and e.get("sourceLocation", {}).get("file") in sources
        ]
        artifacts[name] = {
            "contractName": name,
            "sourceName": unit,
            "abi": compiled["abi"],
            "bytecode": "0x" + compiled["evm"]["bytecode"]["object"],
            "deployedBytecode": "0x" + deployed,
            "deployedSize": size,
            "methodIdentifiers": compiled["evm"]["methodIdentifiers"],
            "devdoc": compiled.get("devdoc", {}),
            "userdoc": compiled.get("userdoc", {}),
            "compiler": {"name": "solc", "version": version, "settings": _artifact_settings()},
            "sources": source_hashes,
            "warnings": warnings,
        }
    return artifacts


def _artifact_settings() -> dict[str, Any]:
    return {k: v for k, v in SETTINGS.items() if k != "outputSelection"}


def artifact_path(name: str) -> Path:
    return BUILD_DIR / f"{name}.json"


def _dump(artifact: dict[str, Any]) -> str:
    return json.dumps(artifact, indent=2, sort_keys=True) + "\n"


def compile_contracts(write: bool = True) -> dict[str, dict[str, Any]]:
    """Compile all contracts; unless ``write`` is false, (re)write ``contracts/build/*.json``."""
    if write:
        for unit, text in generated_sources().items():
            (GENERATED_DIR / unit).write_text(text, encoding="utf-8")
    artifacts = build_artifacts()
    if write:
        BUILD_DIR.mkdir(parents=True, exist_ok=True)
        for name, artifact in artifacts.items():
            artifact_path(name).write_text(_dump(artifact), encoding="utf-8")
    return artifacts


def check_artifacts() -> list[str]:
    """Recompile in memory; return a description of every drift (empty list = up to date)."""
    problems: list[str] = []
    for unit, text in generated_sources().items():
        path = GENERATED_DIR / unit
        if not path.is_file() or path.read_text("utf-8") != text:
            problems.append(f"contracts/{unit} (generated) is missing or stale")
    for name, fresh in build_artifacts().items():
        path = artifact_path(name)
        if not path.is_file():
            problems.append(f"{path.relative_to(REPO_ROOT)} is missing")
            continue
        committed = json.loads(path.read_text("utf-8"))
        for field in CHECKED_FIELDS:
            if committed.get(field) != fresh[field]:
                problems.append(f"{path.relative_to(REPO_ROOT)}: `{field}` differs from sources")
        changed = sorted(
            unit
            for unit in set(committed.get("sources", {})) | set(fresh["sources"])
            if committed.get("sources", {}).get(unit) != fresh["sources"].get(unit)
        )
        if changed and not problems:
            problems.append(
                f"{path.relative_to(REPO_ROOT)}: source hashes differ for {', '.join(changed)}"
            )
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m adapters.compile", description="Compile fedchain's Solidity contracts."
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="recompile in memory and exit 1 if the committed artifacts differ",
    )
    args = parser.parse_args(argv)
    try:
        if args.check:
            problems = check_artifacts()
            if problems:
                print("contract artifacts are out of date:", file=sys.stderr)
                for problem in problems:
                    print(f"  - {problem}", file=sys.stderr)
                print(
                    "run `make compile` (python -m adapters.compile) and commit contracts/build/",
                    file=sys.stderr,
                )
                return 1
            print("contract artifacts are up to date")
            return 0
        for name, artifact in compile_contracts().items():
            version = artifact["compiler"]["version"]
            print(
                f"wrote {artifact_path(name).relative_to(REPO_ROOT)} "
                f"({artifact['deployedSize']} bytes runtime, solc {version})"
            )
            for warning in artifact["warnings"]:
                print(warning, file=sys.stderr)
        return 0
    except CompileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
