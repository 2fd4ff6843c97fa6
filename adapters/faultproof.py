"""Thin wrappers of the fault-proof contracts: ``OneStep`` (the one-step check) and
``FaultGames`` (claims, the leaf / exclusion / data-availability games, bonds and clocks).

Reverts come back typed (``adapters.reverts.error_class(name)``); transactions are recorded
in the chain's gas ledger under their function names.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any, Final

from eth_account.signers.local import LocalAccount
from eth_utils.address import to_checksum_address

from adapters.chain import Chain
from protocol.errors import ConfigError

__all__ = ["FaultGamesContract", "OneStepContract", "artifact"]

BUILD_DIR: Final = Path(__file__).resolve().parent.parent / "contracts" / "build"


@cache
def artifact(name: str) -> dict[str, Any]:
    """The committed build artifact of contract ``name``."""
    path = BUILD_DIR / f"{name}.json"
    if not path.exists():
        raise ConfigError(f"missing contract artifact {path}; run `python -m adapters.compile`")
    data: dict[str, Any] = json.loads(path.read_text())
    return data


class OneStepContract:
    """The stateless one-step checker."""

    def __init__(self, chain: Chain, address: str) -> None:
        self.chain = chain
        self.address = to_checksum_address(address)
        self.contract: Any = chain.w3.eth.contract(
            address=self.address, abi=artifact("OneStep")["abi"]
        )

    @classmethod
    def deploy(cls, chain: Chain, deployer: LocalAccount) -> OneStepContract:
        art = artifact("OneStep")
        address, _ = chain.deploy(deployer, art["abi"], art["bytecode"], op="deployOneStep")
        return cls(chain, address)

    def step(self, args: tuple[Any, ...]) -> tuple[bytes, bytes]:
        """``OneStep.step``: the recomputed chunk (1024 bytes) and its leaf hash."""
        chunk, leaf = self.chain.call(self.contract.functions.step(args))
        return bytes(chunk), bytes(leaf)

    def norm_step(self, args: tuple[Any, ...]) -> tuple[int, bytes]:
        """``OneStep.normStep``: the recomputed prefix sum S_j and its norm leaf."""
        total, leaf = self.chain.call(self.contract.functions.normStep(args))
        return int(total), bytes(leaf)

    def chunk_norm_sq(self, prev: bytes, new: bytes, valid: int) -> int:
        """``OneStep.chunkNormSq``: sum of (new - prev)**2 over the valid lanes."""
        return int(self.chain.call(self.contract.functions.chunkNormSq(prev, new, valid)))

    def step_chunk(
        self,
        rule: int,
        beta_num: int,
        beta_den: int,
        valid: int,
        prev: bytes,
        chunks: list[bytes],
        weights: list[int],
        witness: bytes,
    ) -> bytes:
        """``OneStep.stepChunk``: the rule alone, without openings."""
        fn = self.contract.functions.stepChunk(
            rule, beta_num, beta_den, valid, prev, chunks, weights, witness
        )
        return bytes(self.chain.call(fn))

    def leaf_hash(self, payload: bytes) -> bytes:
        return bytes(self.chain.call(self.contract.functions.leafHash(payload)))

    def node_hash(self, left: bytes, right: bytes) -> bytes:
        return bytes(self.chain.call(self.contract.functions.nodeHash(left, right)))

    def verify_chunk(self, root: bytes, d: int, j: int, leaf: bytes, proof: list[bytes]) -> bool:
        return bool(self.chain.call(self.contract.functions.verifyChunk(root, d, j, leaf, proof)))

    def vector_root(self, packed: bytes, d: int) -> bytes:
        return bytes(self.chain.call(self.contract.functions.vectorRoot(packed, d)))


class FaultGamesContract:
    """The games contract (see ``contracts/FaultGames.sol``)."""

    def __init__(self, chain: Chain, address: str) -> None:
        self.chain = chain
        self.address = to_checksum_address(address)
        # OneStep's errors bubble up through prove(): decode them too
        step_errors = [e for e in artifact("OneStep")["abi"] if e["type"] == "error"]
        self.contract: Any = chain.w3.eth.contract(
            address=self.address, abi=artifact("FaultGames")["abi"] + step_errors
        )

    @classmethod
    def deploy(
        cls, chain: Chain, deployer: LocalAccount, one_step: str, clock: int, bond: int
    ) -> FaultGamesContract:
        art = artifact("FaultGames")
        address, _ = chain.deploy(
            deployer, art["abi"], art["bytecode"], one_step, clock, bond, op="deployFaultGames"
        )
        return cls(chain, address)

    def tx(self, acct: LocalAccount, name: str, *args: Any, value: int = 0) -> Any:
        """Send ``name(*args)`` from ``acct`` (gas recorded under ``name``)."""
        fn = getattr(self.contract.functions, name)(*args)
        return self.chain.transact(acct, fn, name, value)

    def view(self, name: str, *args: Any) -> Any:
        return self.chain.call(getattr(self.contract.functions, name)(*args))
