"""EIP-712 hashing shared by everything that signs for a task: one domain, one digest rule.

Every signature a task's contract checks (the committee's PBFT votes and verdicts, the
clients' records) is over ``keccak256(0x19 0x01 ‖ domainSeparator ‖ structHash)`` with the
domain {name "FedChainTask", version "1", chainId, verifyingContract = the task}, so a
signature binds one task on one chain. Pure functions; no web3.
"""

from __future__ import annotations

from typing import Final

from eth_utils.crypto import keccak

DOMAIN_NAME: Final = "FedChainTask"
DOMAIN_VERSION: Final = "1"
DOMAIN_TYPEHASH: Final = keccak(
    text="EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)"
)


def domain_separator(
    chain_id: int,
    verifying_contract: str,
    name: str = DOMAIN_NAME,
    version: str = DOMAIN_VERSION,
) -> bytes:
    """The EIP-712 domain separator of a task (``verifying_contract`` is its address)."""
    if not 0 <= chain_id < 2**256:
        raise ValueError(f"chain id out of range: {chain_id}")
    address = bytes.fromhex(verifying_contract.removeprefix("0x"))
    if len(address) != 20:
        raise ValueError(f"not a 20-byte address: {verifying_contract!r}")
    return keccak(
        DOMAIN_TYPEHASH
        + keccak(text=name)
        + keccak(text=version)
        + chain_id.to_bytes(32, "big")
        + bytes(12)
        + address
    )


def typed_data_digest(separator: bytes, struct_hash: bytes) -> bytes:
    """The digest a signer signs: ``keccak256(0x19 0x01 ‖ separator ‖ structHash)``."""
    return keccak(b"\x19\x01" + separator + struct_hash)
