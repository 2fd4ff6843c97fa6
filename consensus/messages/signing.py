"""The message union and EIP-712 signing, recovery and signer checks (memoised)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Final, TypeAlias, TypeVar

from eth_account import Account
from eth_account.messages import SignableMessage
from eth_account.signers.local import LocalAccount
from eth_utils.crypto import keccak

from consensus.messages.checkpoint import Checkpoint
from consensus.messages.common import EIP712_TYPES, SECP256K1_N, Domain, item_hash
from consensus.messages.ordering import Commit, CommitProof, Fetch, Prepare, PrePrepare
from consensus.messages.view_change import NewView, ViewChange
from protocol.errors import ConsensusError

Message: TypeAlias = (
    PrePrepare | Prepare | Commit | Checkpoint | ViewChange | NewView | CommitProof | Fetch
)
SignedT = TypeVar("SignedT", bound=Message)


# --------------------------------------------------------------------------------------------
# Signing and recovery
# --------------------------------------------------------------------------------------------

_CACHE_SIZE: Final = 1 << 16
_RECOVER_CACHE: OrderedDict[tuple[bytes, bytes, bytes], str] = OrderedDict()
_SIGN_CACHE: OrderedDict[tuple[str, bytes, bytes], bytes] = OrderedDict()


def _cache_put(cache: OrderedDict[Any, Any], key: Any, value: Any) -> None:
    cache[key] = value
    if len(cache) > _CACHE_SIZE:
        cache.popitem(last=False)


def signable(domain: Domain, structhash: bytes) -> SignableMessage:
    """The EIP-712 ``SignableMessage`` (``0x19 0x01 ‖ domainSeparator ‖ structHash``)."""
    return SignableMessage(version=b"\x01", header=domain.separator, body=structhash)


def signing_digest(msg: Message, domain: Domain) -> bytes:
    """``keccak256(0x1901 ‖ domainSeparator ‖ structHash(msg))``: the hash ecrecover checks."""
    return keccak(b"\x19\x01" + domain.separator + msg.struct_hash())


def typed_data(msg: Message, domain: Domain) -> dict[str, Any]:
    """The full EIP-712 typed-data document of ``msg`` (for ``encode_typed_data``, wallets)."""
    primary = msg.TYPE
    values: dict[str, Any]
    if isinstance(msg, (PrePrepare, Prepare)):
        values = {
            "view": msg.view,
            "seq": msg.seq,
            "round": msg.round,
            "attempt": msg.attempt,
            "aggregateDigest": msg.aggregate_digest,
            "faulty": msg.faulty,
        }
    elif isinstance(msg, Commit):
        values = {
            "round": msg.round,
            "attempt": msg.attempt,
            "aggregateDigest": msg.aggregate_digest,
            "faulty": msg.faulty,
            "view": msg.view,
        }
    elif isinstance(msg, Checkpoint):
        values = {"seq": msg.seq, "stateDigest": msg.state_digest}
    elif isinstance(msg, ViewChange):
        values = {
            "newView": msg.new_view,
            "stableSeq": msg.stable_seq,
            "stateDigest": msg.state_digest,
            "proofHash": msg.proof_hash(),
        }
    elif isinstance(msg, Fetch):
        values = {"fromSeq": msg.from_seq, "toSeq": msg.to_seq}
    elif isinstance(msg, NewView):
        values = {
            "view": msg.view,
            "viewChangesHash": keccak(b"".join(item_hash(v) for v in msg.view_changes)),
            "prePreparesHash": keccak(b"".join(item_hash(p) for p in msg.pre_prepares)),
        }
    else:
        values = {"seq": msg.seq, "view": msg.view, "proofHash": msg.proof_hash()}
    return {
        "types": {
            "EIP712Domain": [{"name": n, "type": t} for n, t in EIP712_TYPES["EIP712Domain"]],
            primary: [{"name": n, "type": t} for n, t in EIP712_TYPES[primary]],
        },
        "primaryType": primary,
        "domain": domain.typed_data_domain(),
        "message": values,
    }


def check_signature_format(sig: bytes) -> None:
    """Reject anything the contract's ecrecover path would (length, v, r/s range, high s)."""
    if not isinstance(sig, bytes) or len(sig) != 65:
        raise ConsensusError("signature must be 65 bytes r ‖ s ‖ v")
    r = int.from_bytes(sig[0:32], "big")
    s = int.from_bytes(sig[32:64], "big")
    v = sig[64]
    if v not in (27, 28):
        raise ConsensusError(f"signature v must be 27 or 28, got {v}")
    if not (0 < r < SECP256K1_N and 0 < s <= SECP256K1_N // 2):
        raise ConsensusError("signature r/s out of range or s not in the lower half order")


def recover_signer(domain: Domain, structhash: bytes, sig: bytes) -> str:
    """Checksummed address that signed ``structhash`` under ``domain`` (memoised)."""
    check_signature_format(sig)
    key = (domain.separator, structhash, sig)
    hit = _RECOVER_CACHE.get(key)
    if hit is not None:
        _RECOVER_CACHE.move_to_end(key)
        return hit
    try:
        addr = str(Account.recover_message(signable(domain, structhash), signature=sig))
    except Exception as exc:  # eth_keys raises several types for invalid points
        raise ConsensusError(f"signature does not recover: {exc}") from exc
    _cache_put(_RECOVER_CACHE, key, addr)
    return addr


def sign_struct(account: LocalAccount, domain: Domain, structhash: bytes) -> bytes:
    """65-byte signature of ``structhash`` under ``domain`` (deterministic, memoised)."""
    key = (account.address, domain.separator, structhash)
    hit = _SIGN_CACHE.get(key)
    if hit is None:
        hit = bytes(account.sign_message(signable(domain, structhash)).signature)
        _cache_put(_SIGN_CACHE, key, hit)
    return hit


def sign(msg: SignedT, account: LocalAccount, domain: Domain) -> SignedT:
    """Return ``msg`` with its ``signature`` set by ``account``."""
    sh = msg.struct_hash()
    signed = replace(msg, signature=sign_struct(account, domain, sh))
    signed.__dict__["_memo_struct_hash"] = sh  # the signature is not part of the struct
    return signed


def verify_signer(msg: Message, committee: Sequence[str], domain: Domain) -> None:
    """The recovered signer must be ``committee[msg.sender]`` (raises ConsensusError)."""
    if not 0 <= msg.sender < len(committee):
        raise ConsensusError(f"sender index {msg.sender} outside the committee")
    signer = recover_signer(domain, msg.struct_hash(), msg.signature)
    if signer != committee[msg.sender]:
        raise ConsensusError(f"{type(msg).__name__} signed by {signer}, not by its sender")
