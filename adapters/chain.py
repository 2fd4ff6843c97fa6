"""Thin chain access layer: one code path for the embedded eth-tester chain and any JSON-RPC node.

:class:`Chain` is a web3 connection plus locally held accounts. It composes the pieces that
live in their own modules, each small enough to read in one sitting:

* :mod:`adapters.reverts` — reverts decoded from the contract ABI into typed
  :class:`~protocol.errors.ContractRevert` subclasses (one per Solidity custom error);
* :mod:`adapters.gas` — :class:`GasLedger`, gas used per operation name;
* :mod:`adapters.accounts` — deterministic local test accounts;
* :mod:`adapters.view_cache` — the per-block cache of view-call outcomes;
* :mod:`adapters.transactions` — fees, gas limits, nonces, signing, receipts and
  explanations of failed transactions.

Typical use::

    chain = Chain.embedded(num_accounts=8)
    receipt = chain.transact(chain.accounts[0], contract.functions.start(), "start")
    chain.mine(5)
    print(chain.gas.summary())
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from eth_account import Account
from eth_account.signers.local import LocalAccount
from eth_utils.address import to_checksum_address
from hexbytes import HexBytes
from web3 import Web3

from adapters.accounts import CONNECT_BALANCE_WEI, DEFAULT_BALANCE_WEI, derive_accounts
from adapters.gas import GasLedger
from adapters.reverts import (
    PanicRevert,
    ReasonRevert,
    abi_of,
    decode_revert,
    error_class,
    fn_name,
    is_revert,
    register_error_class,
    typed_revert,
)
from adapters.transactions import TxSender, rpc
from adapters.view_cache import ViewCache
from protocol.errors import ChainError

__all__ = [
    "CONNECT_BALANCE_WEI",
    "DEFAULT_BALANCE_WEI",
    "Chain",
    "GasLedger",
    "PanicRevert",
    "ReasonRevert",
    "decode_revert",
    "derive_accounts",
    "error_class",
    "register_error_class",
]

_ZERO_ADDRESS = "0x0000000000000000000000000000000000000000"


@dataclass(frozen=True)
class LogEntry:
    """One contract log: where it is (block, index in the block) and what it says."""

    block_number: int
    log_index: int
    topics: tuple[bytes, ...]
    data: bytes


def _topics_match(found: tuple[bytes, ...], wanted: Sequence[bytes | None]) -> bool:
    if len(found) < len(wanted):
        return False
    return all(w is None or f == w for f, w in zip(found, wanted, strict=False))


class Chain:
    """A web3 connection plus locally held accounts, nonce cache, fee logic and gas ledger.

    Build one with :meth:`embedded` (in-process eth-tester) or :meth:`connect` (JSON-RPC).
    Thread-safe: nonces are allocated under a lock, so several threads (e.g. aggregator nodes)
    may share one ``Chain``.
    """

    def __init__(
        self,
        w3: Web3,
        accounts: Sequence[LocalAccount],
        *,
        tester: Any | None = None,
        poll_latency: float = 0.02,
        receipt_timeout: float = 120.0,
    ) -> None:
        self.w3 = w3
        self.accounts: list[LocalAccount] = list(accounts)
        self.gas = GasLedger()
        self._tester = tester
        self._anvil_mine = True
        self._call_from = self.accounts[0].address if self.accounts else _ZERO_ADDRESS
        #: Per-block cache of view outcomes (see :meth:`call`); False disables it.
        self.view_cache = True
        self._views = ViewCache()
        self.tx = TxSender(
            w3,
            embedded=tester is not None,
            poll_latency=poll_latency,
            receipt_timeout=receipt_timeout,
            on_mined=self.invalidate_views,
        )
        self.chain_id: int = self.tx.chain_id

    @property
    def view_cache_hits(self) -> int:
        return self._views.hits

    @property
    def view_cache_misses(self) -> int:
        return self._views.misses

    # -- construction ---------------------------------------------------------------------

    @classmethod
    def embedded(
        cls,
        num_accounts: int = 10,
        seed: int = 0,
        *,
        balance_wei: int = DEFAULT_BALANCE_WEI,
    ) -> Chain:
        """An in-process eth-tester (py-evm) chain with ``num_accounts`` funded local accounts.

        The accounts are funded in the genesis state next to eth-tester's own pre-funded
        accounts, which is equivalent to funding them by transfer but costs no transactions
        (a fresh chain takes ~10 ms). Every transaction is mined in its own block.
        """
        from eth_tester import EthereumTester, PyEVMBackend
        from web3.providers.eth_tester import EthereumTesterProvider

        accounts = derive_accounts(num_accounts, seed)
        genesis = dict(PyEVMBackend.generate_genesis_state(num_accounts=10))
        for acct in accounts:
            genesis[bytes(HexBytes(acct.address))] = {
                "balance": balance_wei,
                "nonce": 0,
                "code": b"",
                "storage": {},
            }
        tester = EthereumTester(PyEVMBackend(genesis_state=genesis))
        w3 = Web3(EthereumTesterProvider(tester))
        return cls(w3, accounts, tester=tester, poll_latency=0.0)

    @classmethod
    def connect(
        cls,
        rpc_url: str,
        funding_key: str | None = None,
        num_accounts: int = 10,
        seed: int = 0,
        *,
        balance_wei: int = CONNECT_BALANCE_WEI,
        timeout: float = 30.0,
    ) -> Chain:
        """Connect to an HTTP(S) JSON-RPC node (e.g. anvil at http://127.0.0.1:8545).

        If ``funding_key`` is given (anvil: one of its dev keys), every derived account whose
        balance is below ``balance_wei`` is topped up to it from that key.
        """
        if not rpc_url.startswith(("http://", "https://")):
            raise ChainError(f"unsupported RPC URL {rpc_url!r}: use http(s)://")
        w3 = Web3(Web3.HTTPProvider(rpc_url, request_kwargs={"timeout": timeout}))
        try:
            w3.eth.chain_id  # noqa: B018 - connectivity probe
        except Exception as exc:
            raise ChainError(f"cannot reach JSON-RPC node at {rpc_url}: {exc}") from exc
        chain = cls(w3, derive_accounts(num_accounts, seed))
        if funding_key is not None:
            chain.fund(Account.from_key(funding_key), chain.accounts, balance_wei)
        return chain

    def fund(
        self, funder: LocalAccount, accounts: Iterable[LocalAccount | str], balance_wei: int
    ) -> None:
        """Top every account up to ``balance_wei`` from ``funder`` (transfers sent in a batch)."""
        pending: list[HexBytes] = []
        for acct in accounts:
            address = acct if isinstance(acct, str) else acct.address
            missing = balance_wei - self.balance(address)
            if missing > 0:
                pending.append(self.tx.send(funder, {"to": address, "value": missing}, gas=21_000))
        for tx_hash in pending:
            receipt = self.tx.wait(tx_hash)
            if receipt["status"] != 1:
                raise ChainError(f"funding transfer {tx_hash.hex()} failed")

    # -- basic queries --------------------------------------------------------------------

    @property
    def is_embedded(self) -> bool:
        return self._tester is not None

    def block_number(self) -> int:
        """Number of the latest mined block (what views are evaluated at)."""
        if self._tester is not None:
            # eth-tester serialises the whole latest block to answer eth_blockNumber; its
            # py-evm backend keeps the pending block as the head, so latest = head - 1.
            try:
                return max(0, int(self._tester.backend.chain.header.block_number) - 1)
            except AttributeError:  # pragma: no cover - another eth-tester backend
                pass
        return int(self.w3.eth.block_number)

    def balance(self, address: str) -> int:
        return int(self.w3.eth.get_balance(to_checksum_address(address)))

    def logs(
        self, address: str, topics: Sequence[bytes | None], from_block: int, to_block: int
    ) -> list[LogEntry]:
        """The logs ``address`` emitted in blocks ``from_block..to_block`` whose first topics
        equal ``topics`` (None matches any), in chain order.

        On the embedded chain they are read from py-evm's receipts block by block: eth-tester's
        own ``eth_getLogs`` looks every transaction up by scanning back from the head, which is
        quadratic in the chain length (30 s for 300 blocks). Elsewhere: ``eth_getLogs``."""
        if from_block > to_block:
            return []
        want = bytes.fromhex(to_checksum_address(address)[2:])
        if self._tester is not None:
            chain = self._tester.backend.chain
            out: list[LogEntry] = []
            for number in range(from_block, to_block + 1):
                block = chain.get_canonical_block_by_number(number)
                index = 0
                for receipt in block.get_receipts(chain.chaindb):
                    for log in receipt.logs:
                        found = tuple(t.to_bytes(32, "big") for t in log.topics)
                        if bytes(log.address) == want and _topics_match(found, topics):
                            out.append(LogEntry(number, index, found, bytes(log.data)))
                        index += 1
            return out
        raw = self.w3.eth.get_logs(
            {
                "address": to_checksum_address(address),
                "topics": [None if t is None else "0x" + t.hex() for t in topics],
                "fromBlock": from_block,
                "toBlock": to_block,
            }
        )
        entries = [
            LogEntry(
                int(item["blockNumber"]),
                int(item["logIndex"]),
                tuple(bytes(t) for t in item["topics"]),
                bytes(item["data"]),
            )
            for item in raw
        ]
        return sorted(entries, key=lambda e: (e.block_number, e.log_index))

    def mine(self, n: int = 1) -> None:
        """Mine ``n`` empty blocks (eth-tester ``mine_blocks``; RPC ``anvil_mine``/``evm_mine``)."""
        if n <= 0:
            return
        self.invalidate_views()
        if self._tester is not None:
            self._tester.mine_blocks(n)
            return
        if self._anvil_mine:
            try:
                response = rpc(self.w3, "anvil_mine", [hex(n)])
            except Exception:  # transport-level refusal: treat as unsupported
                response = {"error": {"message": "anvil_mine unavailable"}}
            if "error" not in response:
                return
            self._anvil_mine = False  # not anvil: fall back to evm_mine from now on
        for _ in range(n):
            response = rpc(self.w3, "evm_mine", [])
            if "error" in response:
                raise ChainError(f"node cannot mine on demand: {response['error']}")

    def mine_to(self, block: int) -> None:
        """Mine until the latest block number equals ``block`` (no-op if already past)."""
        self.mine(block - self.block_number())

    def snapshot(self) -> Any:
        """Snapshot the chain state (eth-tester snapshot / ``evm_snapshot``)."""
        if self._tester is not None:
            return self._tester.take_snapshot()
        response = rpc(self.w3, "evm_snapshot", [])
        if "error" in response:
            raise ChainError(f"node cannot snapshot: {response['error']}")
        return response["result"]

    def revert(self, snapshot_id: Any) -> None:
        """Return to a :meth:`snapshot`; forgets cached nonces."""
        with self.tx.lock:
            if self._tester is not None:
                self._tester.revert_to_snapshot(snapshot_id)
            else:
                response = rpc(self.w3, "evm_revert", [snapshot_id])
                if "error" in response or response.get("result") is False:
                    raise ChainError(f"cannot revert to snapshot {snapshot_id!r}")
            self.tx.nonces.clear()
            self.invalidate_views()  # block numbers are reused after a revert

    # -- contract calls -------------------------------------------------------------------

    def call(self, contract_fn: Any, block_identifier: Any = None) -> Any:
        """Run a view/pure ``contract_fn`` and return its decoded result; reverts are typed.

        Without ``block_identifier`` the call is evaluated at the latest block number ``b`` and
        its outcome (result or typed revert) is cached under ``(b, contract address, calldata)``
        until the chain moves on: a hit costs one ``eth_blockNumber`` instead of an
        ``eth_call`` plus ABI encoding/decoding. The call is pinned to block ``b`` so a block
        mined in between cannot put a newer state under an older key. Every receipt this
        :class:`Chain` waits for, :meth:`mine` and :meth:`revert` drop the cache; set
        :attr:`view_cache` to False to disable it (see :mod:`adapters.view_cache`).
        """
        encode = getattr(contract_fn, "_encode_transaction_data", None)  # web3 v7/v8
        if block_identifier is None and self.view_cache and encode is not None:
            calldata = bytes(HexBytes(encode()))
            return self.cached_call((str(contract_fn.address), calldata), lambda: contract_fn)
        try:
            # an explicit sender spares eth-tester's default-account lookup on every call
            return contract_fn.call({"from": self._call_from}, block_identifier=block_identifier)
        except Exception as exc:
            if is_revert(exc):
                raise typed_revert(exc, abi_of(contract_fn), fn_name(contract_fn)) from exc
            raise

    def invalidate_views(self) -> None:
        """Forget every cached view result."""
        self._views.clear()

    def cached_call(self, key: Hashable, make_fn: Callable[[], Any]) -> Any:
        """:meth:`call` through the per-block view cache under a caller-chosen ``key``.

        ``key`` must identify the contract and calldata exactly (e.g. ``(address, function
        name, args)``); ``make_fn`` builds the bound contract function only on a miss, which
        spares the ABI encoding of a hit. Honours :attr:`view_cache` (off: plain call).
        """
        if not self.view_cache:
            return self.call(make_fn(), "latest")
        block = self.block_number()

        def compute() -> tuple[bool, Any]:
            contract_fn = make_fn()
            try:
                return (True, contract_fn.call({"from": self._call_from}, block_identifier=block))
            except Exception as exc:
                if not is_revert(exc):
                    raise
                return (False, typed_revert(exc, abi_of(contract_fn), fn_name(contract_fn)))

        return self._views.lookup(block, key, compute)

    def transact(
        self,
        account: LocalAccount,
        contract_fn: Any,
        op: str,
        value: int = 0,
        *,
        gas: int | None = None,
    ) -> Any:
        """Sign and send ``contract_fn`` (a bound web3 contract function or constructor).

        Unless ``gas`` is given, the transaction is first checked in the context of the block
        it will be mined in (``eth_estimateGas`` on JSON-RPC nodes, a single dry-run
        ``eth_call`` on eth-tester); a revert there raises the typed error and sends nothing.
        Waits for the receipt; a mined receipt with status 0 is explained (debug trace or
        replay) and raised as the typed error. On success the gas used is recorded in
        :attr:`gas` under ``op`` and the receipt is returned.
        """
        abi = abi_of(contract_fn)
        tx = self.tx.build(contract_fn, account, value, gas)
        if gas is None:
            try:
                tx["gas"] = self.tx.gas_limit(tx)
            except Exception as exc:
                if is_revert(exc):
                    raise typed_revert(exc, abi, op) from exc
                raise ChainError(f"{op}: gas estimation failed: {exc}") from exc
        receipt = self.tx.wait(self.tx.send(account, tx, gas=int(tx["gas"])))
        if receipt["status"] != 1:
            raise self.tx.explain_failure(tx, receipt, abi, op)
        self.gas.record(op, int(receipt["gasUsed"]))
        return receipt

    def deploy(
        self,
        account: LocalAccount,
        abi: Sequence[Mapping[str, Any]],
        bytecode: str,
        *args: Any,
        op: str = "deploy",
        value: int = 0,
    ) -> tuple[str, Any]:
        """Deploy a contract; returns ``(address, receipt)``."""
        factory = self.w3.eth.contract(abi=list(abi), bytecode=bytecode)
        receipt = self.transact(account, factory.constructor(*args), op, value)
        address = receipt["contractAddress"]
        if not address:
            raise ChainError(f"{op}: receipt has no contract address")
        return to_checksum_address(address), receipt

    def send_value(self, account: LocalAccount, to: str, value: int) -> Any:
        """Plain ether transfer (recorded in the gas ledger as ``transfer``)."""
        receipt = self.tx.wait(self.tx.send(account, {"to": to, "value": value}, gas=21_000))
        if receipt["status"] != 1:
            raise ChainError(f"transfer to {to} failed")
        self.gas.record("transfer", int(receipt["gasUsed"]))
        return receipt
