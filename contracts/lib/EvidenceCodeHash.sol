// SPDX-License-Identifier: MIT
// GENERATED FILE, DO NOT EDIT: written by `python -m adapters.compile`
// (adapters/compile.py) from keccak256 of EquivocationEvidence's runtime code
// (contracts/lib/EquivocationEvidence.sol, compiled without CBOR metadata);
// `python -m adapters.compile --check` fails when it is stale.
pragma solidity ^0.8.24;

/// @dev Code hash of the only EquivocationEvidence a FedChainTask accepts (EIP-3860:
///      deployed by its own transaction, checked by the task's constructor).
bytes32 constant EVIDENCE_CODEHASH = 0xd4340ff9726d7bf71ba1dedf6548d7bb4e73cbe42158ac0d4974bff17b2e29d4;
