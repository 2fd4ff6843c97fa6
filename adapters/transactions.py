"""Sending transactions: fees, gas limits, nonces, signing, receipts, failure explanations.

:class:`TxSender` builds every transaction locally, signs it with an ``eth_account`` key and
sends it raw, so the same code runs against the in-process eth-tester (py-evm) chain and any
JSON-RPC node (anvil, geth, a public testnet). Nonces are allocated under a lock, so several
threads may share one sender. A transaction is first checked in the context of the block it
will be mined in; a mined receipt with status 0 is explained as the typed revert.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from eth_account.signers.local import LocalAccount
from hexbytes import HexBytes
from web3 import Web3
from web3.exceptions import TransactionNotFound
from web3.types import RPCEndpoint

from adapters.reverts import decode_revert, is_revert, typed_revert
from protocol.errors import ChainError

__all__ = ["TxSender", "rpc"]

_GAS_MARGIN_NUM, _GAS_MARGIN_DEN = 6, 5  # send estimate * 1.2 (+ a small constant)
_GAS_MARGIN_ADD = 10_000
#: How often a pending transaction is checked to still be known to the node.
_DROPPED_CHECK_SECONDS = 5.0


def rpc(w3: Web3, method: str, params: list[Any]) -> dict[str, Any]:
    """Raw JSON-RPC request (node-specific methods web3 has no wrapper for)."""
    return dict(w3.provider.make_request(RPCEndpoint(method), params))


class TxSender:
    """Fee logic, gas limits, the nonce cache and receipt handling of one connection."""

    def __init__(
        self,
        w3: Web3,
        *,
        embedded: bool,
        poll_latency: float,
        receipt_timeout: float,
        on_mined: Callable[[], None],
    ) -> None:
        self.w3 = w3
        self.embedded = embedded
        self.poll_latency = poll_latency
        self.receipt_timeout = receipt_timeout
        self.on_mined = on_mined
        self.chain_id: int = int(w3.eth.chain_id)
        self.nonces: dict[str, int] = {}
        self.lock = threading.RLock()
        latest = w3.eth.get_block("latest")
        self._eip1559 = latest.get("baseFeePerGas") is not None
        self._block_gas_limit = int(latest["gasLimit"])
        self._priority_fee = self._initial_priority_fee()
        self._estimate_pending = True
        self._embedded_gas_limit = min(self._block_gas_limit // 2, 15_000_000)

    # -- the public steps ------------------------------------------------------------------

    def build(
        self, contract_fn: Any, account: LocalAccount, value: int, gas: int | None
    ) -> dict[str, Any]:
        """The unsigned transaction calling ``contract_fn`` (nonce allocated at send time)."""
        return dict(
            contract_fn.build_transaction(
                {
                    "from": account.address,
                    "value": int(value),
                    "chainId": self.chain_id,
                    "nonce": 0,  # allocated in send
                    "gas": gas or 1,
                    **self.fee_fields(),
                }
            )
        )

    def gas_limit(self, tx: Mapping[str, Any]) -> int:
        """Gas limit for ``tx``, checked in the context of the block it will be mined in.

        JSON-RPC nodes such as anvil run a ``latest`` estimate at block.number = latest while
        the transaction will execute at latest + 1, so block-number-sensitive checks
        (deadlines, windows) need ``pending``. eth-tester rejects ``pending`` estimates, and its
        estimate is a binary search (~13 EVM executions, ~40% of a transaction's cost), so
        there a single ``pending`` dry-run ``eth_call`` surfaces reverts and a fixed limit is
        used (only gas used is charged).
        """
        call: dict[str, Any] = {
            k: tx[k] for k in ("from", "to", "data", "value") if tx.get(k) is not None
        }
        if self.embedded:
            self.w3.eth.call(call, block_identifier="pending")  # type: ignore[arg-type]
            return self._embedded_gas_limit
        if self._estimate_pending:
            try:
                estimate = int(self.w3.eth.estimate_gas(call, "pending"))  # type: ignore[arg-type]
            except Exception as exc:
                if is_revert(exc):
                    raise
                self._estimate_pending = False  # unsupported by this node: use latest
                estimate = int(self.w3.eth.estimate_gas(call))  # type: ignore[arg-type]
        else:
            estimate = int(self.w3.eth.estimate_gas(call))  # type: ignore[arg-type]
        return min(
            estimate * _GAS_MARGIN_NUM // _GAS_MARGIN_DEN + _GAS_MARGIN_ADD,
            self._block_gas_limit,
        )

    def fee_fields(self) -> dict[str, int]:
        if not self._eip1559:
            return {"gasPrice": int(self.w3.eth.gas_price)}
        base = int(self.w3.eth.get_block("latest").get("baseFeePerGas") or 0)
        return {
            "maxFeePerGas": 2 * base + self._priority_fee,
            "maxPriorityFeePerGas": self._priority_fee,
        }

    def send(self, account: LocalAccount, tx: Mapping[str, Any], *, gas: int) -> HexBytes:
        """Fill chain id, fees, gas and nonce; sign; send raw. Returns the tx hash."""
        full: dict[str, Any] = {"chainId": self.chain_id, **tx, "gas": gas}
        if "gasPrice" not in full and "maxFeePerGas" not in full:
            full.update(self.fee_fields())
        full.pop("from", None)
        address = account.address
        with self.lock:
            nonce = self.nonces.get(address)
            if nonce is None:
                nonce = int(self.w3.eth.get_transaction_count(address, "pending"))
            full["nonce"] = nonce
            signed = account.sign_transaction(full)
            try:
                tx_hash = self.w3.eth.send_raw_transaction(signed.raw_transaction)
            except Exception as exc:
                self.nonces.pop(address, None)  # resync from the node next time
                if is_revert(exc):
                    raise typed_revert(exc, [], "send") from exc
                raise ChainError(f"sending transaction from {address} failed: {exc}") from exc
            self.nonces[address] = nonce + 1
        return HexBytes(tx_hash)

    def wait(self, tx_hash: HexBytes) -> Any:
        """The receipt of ``tx_hash``.

        ``ChainError`` if it is not mined within the timeout, if the node forgot it (a node
        restarted from saved state drops its pending pool), or if the node cannot be
        reached; then every cached nonce is dropped, so the next transaction takes its nonce
        from the node again instead of leaving a gap that would never be mined."""
        deadline = time.monotonic() + self.receipt_timeout
        latency = self.poll_latency or 0.01
        next_check = time.monotonic() + _DROPPED_CHECK_SECONDS
        try:
            while True:
                try:
                    receipt = self.w3.eth.get_transaction_receipt(tx_hash)
                except TransactionNotFound:
                    receipt = None
                if receipt is not None:
                    self.on_mined()  # our own transaction changed state
                    return receipt
                now = time.monotonic()
                if now > deadline:
                    raise ChainError(
                        f"transaction {tx_hash.hex()} not mined after {self.receipt_timeout}s"
                    )
                if not self.embedded and now > next_check:
                    next_check = now + _DROPPED_CHECK_SECONDS
                    try:
                        self.w3.eth.get_transaction(tx_hash)
                    except TransactionNotFound as exc:
                        raise ChainError(
                            f"transaction {tx_hash.hex()} was dropped by the node"
                        ) from exc
                time.sleep(latency)
        except ChainError:
            self.nonces.clear()
            raise
        except OSError as exc:  # connection refused/reset: the node is down or restarting
            self.nonces.clear()
            raise ChainError(
                f"lost the JSON-RPC node while waiting for {tx_hash.hex()}: {exc}"
            ) from exc

    def explain_failure(
        self, tx: Mapping[str, Any], receipt: Any, abi: Sequence[Mapping[str, Any]], op: str
    ) -> ChainError:
        """Explain a status-0 receipt as a typed revert (or a generic ChainError).

        JSON-RPC nodes: ``debug_traceTransaction`` (callTracer) gives the exact revert data.
        Otherwise (eth-tester, or nodes without the debug API) the call is replayed with
        ``eth_call`` on the parent block's state (the pre-state when the transaction was first in
        its block, as on eth-tester), then on the block itself. A replay runs with the replay
        block's number, so a revert that depends on block.number may not reproduce; then a
        generic :class:`ChainError` is raised.
        """
        call: dict[str, Any] = {
            "from": receipt["from"],
            "data": tx.get("data", "0x"),
            "value": tx.get("value", 0),
        }  # no gas limit: an out-of-gas failure must not reproduce as a "revert"
        if receipt.get("to"):
            call["to"] = receipt["to"]
        if not self.embedded:
            traced = self._trace_failure(receipt, abi, op)
            if traced is not None:
                return traced
        block = int(receipt["blockNumber"])
        for block_id in (block - 1, block):
            try:
                self.w3.eth.call(call, block_identifier=block_id)  # type: ignore[arg-type]
            except Exception as exc:
                if is_revert(exc):
                    return typed_revert(exc, abi, op)
        return ChainError(
            f"{op}: transaction {HexBytes(receipt['transactionHash']).hex()} failed "
            f"(status 0, gas used {receipt['gasUsed']} of {tx.get('gas')}); the replay did not "
            "revert, so it most likely ran out of gas"
        )

    # -- internals ------------------------------------------------------------------------

    def _initial_priority_fee(self) -> int:
        if not self._eip1559:
            return 0
        try:
            return int(self.w3.eth.max_priority_fee)
        except Exception:
            return 10**9

    def _trace_failure(
        self, receipt: Any, abi: Sequence[Mapping[str, Any]], op: str
    ) -> ChainError | None:
        """Recover revert data of a mined failed transaction via ``debug_traceTransaction``."""
        tx_hash = "0x" + HexBytes(receipt["transactionHash"]).hex().removeprefix("0x")
        try:
            response = rpc(self.w3, "debug_traceTransaction", [tx_hash, {"tracer": "callTracer"}])
        except Exception:
            return None
        result = response.get("result") if isinstance(response, Mapping) else None
        if not isinstance(result, Mapping):
            return None
        error = str(result.get("error") or "")
        output = str(result.get("output") or "")
        if "out of gas" in error.lower():
            return ChainError(f"{op}: transaction {tx_hash} ran out of gas")
        if output.startswith("0x") and len(output) >= 10:
            return decode_revert(abi, bytes.fromhex(output[2:]), op)
        return None
