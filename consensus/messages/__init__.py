"""PBFT messages for dispute votes: EIP-712 signing and a canonical wire encoding.

Every message is a frozen dataclass whose signed content is an EIP-712 struct under the task's
domain ``{name: "FedChainTask", version: "1", chainId, verifyingContract: task}``. The COMMIT
message signs exactly ``DisputeVerdict(uint256 round,uint256 attempt,bytes32 aggregateDigest,
bool faulty,uint256 view)`` so that a quorum of commits is a certificate the task contract can
check with ``ecrecover``. Composite messages (view-change, new-view, commit proofs) sign a
fixed-size struct holding a hash of their nested, individually signed messages; the exact
byte layout is in ``docs/pbft.md``.

Signing goes through ``eth_account``: the ``SignableMessage`` we build is byte-for-byte what
``eth_account.messages.encode_typed_data`` returns for :func:`typed_data` (the tests check it),
only computed without the generic JSON-schema walk, and it is signed with
``LocalAccount.sign_message`` and checked with ``Account.recover_message``. Both are memoised
(signing is deterministic, RFC 6979; recovery is a pure function), because the pure-Python
secp256k1 backend costs milliseconds per operation.

The wire format is canonical JSON (sorted keys, no whitespace, lowercase ``0x`` hex for byte
strings, integers as JSON numbers). :func:`decode` accepts only input that re-encodes to the
same bytes, so there is exactly one encoding of each message. Pickle is never used.

Layout (one phase per file): :mod:`~consensus.messages.common` (EIP-712 types, domain,
instance, limits), :mod:`~consensus.messages.ordering` (pre-prepare, prepare, commit, commit
proof, fetch), :mod:`~consensus.messages.checkpoint`, :mod:`~consensus.messages.view_change`
(prepared certificates, view-change, new-view), :mod:`~consensus.messages.signing` (the
``Message`` union, signing and recovery) and :mod:`~consensus.messages.wire` (canonical
encoding). Every public name is re-exported here.
"""

from __future__ import annotations

from consensus.messages.checkpoint import (
    Checkpoint,
)
from consensus.messages.common import (
    DOMAIN_NAME,
    DOMAIN_VERSION,
    EIP712_TYPES,
    GENESIS_STATE_DIGEST,
    MAX_MESSAGE_BYTES,
    Domain,
    Instance,
    InstanceKey,
    checksum_address,
    item_hash,
    struct_hash,
)
from consensus.messages.common import (
    MAX_LIST as MAX_LIST,
)
from consensus.messages.common import (
    MAX_SENDER as MAX_SENDER,
)
from consensus.messages.common import (
    SECP256K1_N as SECP256K1_N,
)
from consensus.messages.common import (
    TYPE_HASHES as TYPE_HASHES,
)
from consensus.messages.common import (
    TYPE_STRINGS as TYPE_STRINGS,
)
from consensus.messages.common import (
    UINT256_MAX as UINT256_MAX,
)
from consensus.messages.ordering import (
    Commit,
    CommitProof,
    Fetch,
    Prepare,
    PrePrepare,
)
from consensus.messages.signing import (
    Message,
    check_signature_format,
    recover_signer,
    sign,
    signable,
    signing_digest,
    typed_data,
    verify_signer,
)
from consensus.messages.signing import (
    SignedT as SignedT,
)
from consensus.messages.signing import (
    sign_struct as sign_struct,
)
from consensus.messages.view_change import (
    NewView,
    PreparedCert,
    ViewChange,
)
from consensus.messages.wire import (
    MAX_DEPTH as MAX_DEPTH,
)
from consensus.messages.wire import (
    WIRE_VERSION as WIRE_VERSION,
)
from consensus.messages.wire import (
    decode,
    encode,
)

__all__ = [
    "DOMAIN_NAME",
    "DOMAIN_VERSION",
    "EIP712_TYPES",
    "GENESIS_STATE_DIGEST",
    "MAX_MESSAGE_BYTES",
    "Checkpoint",
    "Commit",
    "CommitProof",
    "Domain",
    "Fetch",
    "Instance",
    "InstanceKey",
    "Message",
    "NewView",
    "PrePrepare",
    "Prepare",
    "PreparedCert",
    "ViewChange",
    "check_signature_format",
    "checksum_address",
    "decode",
    "encode",
    "item_hash",
    "recover_signer",
    "sign",
    "signable",
    "signing_digest",
    "struct_hash",
    "typed_data",
    "verify_signer",
]
