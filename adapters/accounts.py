"""Deterministic local test accounts (never hold real value with them)."""

from __future__ import annotations

from eth_account import Account
from eth_account.signers.local import LocalAccount
from eth_utils.crypto import keccak

__all__ = ["CONNECT_BALANCE_WEI", "DEFAULT_BALANCE_WEI", "derive_accounts"]

#: Balance given to every derived account (1000 ether).
DEFAULT_BALANCE_WEI = 1000 * 10**18  # embedded chain: genesis balances cost nothing
#: What ``Chain.connect`` tops accounts up to from the funding key: stakes and bonds are at
#: most ~1 ether, so a shared node is not drained by a few runs.
CONNECT_BALANCE_WEI = 10 * 10**18

_SECP256K1_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141


def derive_accounts(num_accounts: int, seed: int = 0) -> list[LocalAccount]:
    """``num_accounts`` deterministic local accounts derived from ``seed``.

    Key i is ``keccak256("fedchain-account" || seed (32 bytes) || i (32 bytes) || ctr)``, the
    first valid secp256k1 scalar over ``ctr = 0, 1, ...``. Test keys only: never hold real value.
    """
    if num_accounts < 0:
        raise ValueError("num_accounts must be >= 0")
    accounts: list[LocalAccount] = []
    for i in range(num_accounts):
        counter = 0
        while True:
            material = (
                b"fedchain-account"
                + seed.to_bytes(32, "big", signed=False)
                + i.to_bytes(32, "big")
                + counter.to_bytes(4, "big")
            )
            key = keccak(material)
            if 0 < int.from_bytes(key, "big") < _SECP256K1_N:
                break
            counter += 1  # pragma: no cover - probability ~2^-128
        accounts.append(Account.from_key(key))
    return accounts
