"""Thin chain access layer: one code path for the embedded eth-tester chain and any JSON-RPC node.

Every transaction is built, signed locally with an ``eth_account`` key and sent raw, so exactly
the same code runs against the in-process eth-tester (py-evm) chain and against anvil, geth or
a public testnet. Reverts are decoded from the contract ABI into typed
:class:`~protocol.errors.ContractRevert` subclasses (one per Solidity custom error), whether the
revert shows up while estimating gas, in a view call, or as a mined receipt with status 0.

Typical use::

    chain = Chain.embedded(num_accounts=8)
    receipt = chain.transact(chain.accounts[0], contract.functions.start(), "start")
    chain.mine(5)
    print(chain.gas.summary())

View calls are cached per block (see :meth:`Chain.call`): nodes poll the same views many times
while the chain sits at one block, and state only changes with a new block.
"""

from __future__ import annotations

import ast
import copy
import json
import statistics
import threading
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from eth_abi.abi import decode as abi_decode
from eth_account import Account
from eth_account.signers.local import LocalAccount
from eth_utils.address import to_checksum_address
from eth_utils.crypto import keccak
from hexbytes import HexBytes
from web3 import Web3
from web3.exceptions import ContractLogicError, TimeExhausted, Web3RPCError
from web3.types import RPCEndpoint

from protocol.errors import ChainError, ContractRevert

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

#: Balance given to every derived account (1000 ether).
DEFAULT_BALANCE_WEI = 1000 * 10**18  # embedded chain: genesis balances cost nothing
#: What ``Chain.connect`` tops accounts up to from the funding key: stakes and bonds are at
#: most ~1 ether, so a shared node is not drained by a few runs.
CONNECT_BALANCE_WEI = 10 * 10**18

_ZERO_ADDRESS = "0x0000000000000000000000000000000000000000"
_ERROR_STRING_SELECTOR = bytes.fromhex("08c379a0")  # Error(string)
_PANIC_SELECTOR = bytes.fromhex("4e487b71")  # Panic(uint256)
_GAS_MARGIN_NUM, _GAS_MARGIN_DEN = 6, 5  # send estimate * 1.2 (+ a small constant)
_GAS_MARGIN_ADD = 10_000
#: Upper bound on cached view results per block (distinct contract + calldata pairs).
_VIEW_CACHE_MAX = 4096


# ----------------------------------------------------------------------------------------
# Typed reverts
# ----------------------------------------------------------------------------------------


class ReasonRevert(ContractRevert):
    """The call reverted with ``Error(string)`` (``require(cond, "reason")``); see ``reason``."""

    error_name = "Error"

    @property
    def reason(self) -> str:
        return str(self.error_args.get("reason", ""))


class PanicRevert(ContractRevert):
    """The call hit a Solidity ``Panic(uint256)`` (assert, overflow, bad index, ...)."""

    error_name = "Panic"


_ERROR_CLASSES: dict[str, type[ContractRevert]] = {}
_ERROR_CLASSES_LOCK = threading.Lock()


def register_error_class(cls: type[ContractRevert]) -> type[ContractRevert]:
    """Map Solidity custom errors named ``cls.error_name`` to ``cls`` (usable as a decorator)."""
    with _ERROR_CLASSES_LOCK:
        _ERROR_CLASSES[cls.error_name] = cls
    return cls


def error_class(name: str) -> type[ContractRevert]:
    """The exception class for Solidity error ``name``; created (and cached) if unregistered."""
    with _ERROR_CLASSES_LOCK:
        cls = _ERROR_CLASSES.get(name)
        if cls is None:
            cls = type(name, (ContractRevert,), {"error_name": name, "__module__": __name__})
            _ERROR_CLASSES[name] = cls
        return cls


def _abi_type(param: Mapping[str, Any]) -> str:
    """Canonical ABI type string of one parameter (tuples expanded)."""
    typ = str(param["type"])
    if typ.startswith("tuple"):
        inner = ",".join(_abi_type(c) for c in param.get("components", []))
        return f"({inner}){typ[len('tuple') :]}"
    return typ


@dataclass(frozen=True)
class _ErrorSpec:
    name: str
    arg_names: tuple[str, ...]
    arg_types: tuple[str, ...]


_SPEC_CACHE: dict[str, dict[bytes, _ErrorSpec]] = {}


def _error_specs(abi: Sequence[Mapping[str, Any]]) -> dict[bytes, _ErrorSpec]:
    key = json.dumps([e for e in abi if e.get("type") == "error"], sort_keys=True)
    specs = _SPEC_CACHE.get(key)
    if specs is None:
        specs = {}
        for entry in abi:
            if entry.get("type") != "error":
                continue
            inputs = entry.get("inputs", [])
            types = tuple(_abi_type(p) for p in inputs)
            names = tuple(str(p.get("name") or f"arg{i}") for i, p in enumerate(inputs))
            selector = keccak(text=f"{entry['name']}({','.join(types)})")[:4]
            specs[selector] = _ErrorSpec(str(entry["name"]), names, types)
        _SPEC_CACHE[key] = specs
    return specs


def _fmt(value: object) -> str:
    if isinstance(value, bytes):
        return "0x" + value.hex()
    return repr(value)


def decode_revert(
    abi: Sequence[Mapping[str, Any]], data: bytes | None, context: str = ""
) -> ContractRevert:
    """Turn raw revert ``data`` into the matching typed exception (not raised).

    Custom errors found in ``abi`` become their registered class (see
    :func:`register_error_class`) with ``error_args`` decoded by parameter name;
    ``Error(string)`` becomes :class:`ReasonRevert`, ``Panic(uint256)`` :class:`PanicRevert`,
    anything else a plain :class:`ContractRevert`.
    """
    prefix = f"{context}: " if context else ""
    if data is None or len(data) < 4:
        return ContractRevert(f"{prefix}reverted without data", {"data": data or b""})
    selector, payload = bytes(data[:4]), bytes(data[4:])
    if selector == _ERROR_STRING_SELECTOR:
        try:
            (reason,) = abi_decode(["string"], payload)
        except Exception:  # malformed reason: keep the raw bytes
            reason = payload.hex()
        return ReasonRevert(f"{prefix}reverted: {reason}", {"reason": reason})
    if selector == _PANIC_SELECTOR:
        try:
            (code,) = abi_decode(["uint256"], payload)
        except Exception:
            code = -1
        return PanicRevert(f"{prefix}panic 0x{code:02x}", {"code": code})
    spec = _error_specs(abi).get(selector)
    if spec is None:
        return ContractRevert(
            f"{prefix}reverted with unknown error 0x{bytes(data).hex()}", {"data": bytes(data)}
        )
    try:
        values = abi_decode(list(spec.arg_types), payload)
    except Exception:
        return ContractRevert(
            f"{prefix}reverted with undecodable {spec.name} 0x{bytes(data).hex()}",
            {"data": bytes(data)},
        )
    args: dict[str, object] = {}
    for name, typ, value in zip(spec.arg_names, spec.arg_types, values, strict=True):
        args[name] = to_checksum_address(value) if typ == "address" else value
    shown = ", ".join(f"{k}={_fmt(v)}" for k, v in args.items())
    return error_class(spec.name)(f"{prefix}{spec.name}({shown})", args)


def _revert_data(exc: BaseException) -> bytes | None:
    """Best-effort extraction of raw revert data from whatever web3/eth-tester raised."""
    data: Any = getattr(exc, "data", None)
    if isinstance(data, Mapping):
        data = data.get("data")
    if isinstance(data, str) and data.startswith("0x"):
        try:
            return bytes.fromhex(data[2:])
        except ValueError:
            pass
    if isinstance(data, bytes | bytearray):
        return bytes(data)
    if isinstance(exc, Web3RPCError) and isinstance(exc.rpc_response, Mapping):
        error = exc.rpc_response.get("error")
        if isinstance(error, Mapping) and isinstance(error.get("data"), str):
            try:
                return bytes.fromhex(str(error["data"]).removeprefix("0x"))
            except ValueError:
                pass
    # eth-tester: TransactionFailed("execution reverted: b'\\x11\\x8c...'")
    if exc.args:
        first = exc.args[0]
        if isinstance(first, bytes | bytearray):
            return bytes(first)
        text = str(first)
        text = text.removeprefix("execution reverted: ")
        if text.startswith(("b'", 'b"')):
            try:
                value = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                return None
            if isinstance(value, bytes):
                return value
    return None


def _is_revert(exc: BaseException) -> bool:
    if isinstance(exc, ContractLogicError):
        return True
    if type(exc).__name__ == "TransactionFailed":  # eth_tester.exceptions.TransactionFailed
        return True
    if isinstance(exc, Web3RPCError):
        return "revert" in str(exc).lower()
    return False


def _reason_text(exc: BaseException) -> str:
    text = str(exc.args[0]) if exc.args else str(exc)
    return text.removeprefix("execution reverted: ").removeprefix("execution reverted")


# ----------------------------------------------------------------------------------------
# Gas ledger
# ----------------------------------------------------------------------------------------


@dataclass
class GasLedger:
    """Gas used per operation name (only successful transactions are recorded)."""

    _records: dict[str, list[int]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, op: str, gas_used: int) -> None:
        with self._lock:
            self._records.setdefault(op, []).append(int(gas_used))

    def values(self, op: str) -> list[int]:
        """Gas of every recorded ``op`` transaction, in order."""
        with self._lock:
            return list(self._records.get(op, []))

    def count(self, op: str) -> int:
        return len(self.values(op))

    def total(self, op: str) -> int:
        return sum(self.values(op))

    @property
    def ops(self) -> list[str]:
        with self._lock:
            return sorted(self._records)

    def reset(self) -> None:
        with self._lock:
            self._records.clear()

    def summary(self) -> dict[str, dict[str, int | float]]:
        """``{op: {count, total, mean, min, max}}``; JSON-serialisable."""
        with self._lock:
            return {
                op: {
                    "count": len(vals),
                    "total": sum(vals),
                    "mean": float(statistics.fmean(vals)),
                    "min": min(vals),
                    "max": max(vals),
                }
                for op, vals in sorted(self._records.items())
                if vals
            }


# ----------------------------------------------------------------------------------------
# Accounts
# ----------------------------------------------------------------------------------------

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


# ----------------------------------------------------------------------------------------
# Chain
# ----------------------------------------------------------------------------------------


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
        self.poll_latency = poll_latency
        self.receipt_timeout = receipt_timeout
        self._tester = tester
        self._nonces: dict[str, int] = {}
        self._lock = threading.RLock()
        self.chain_id: int = int(w3.eth.chain_id)
        latest = w3.eth.get_block("latest")
        self._eip1559 = latest.get("baseFeePerGas") is not None
        self._block_gas_limit = int(latest["gasLimit"])
        self._priority_fee = self._initial_priority_fee()
        self._estimate_pending = True
        self._anvil_mine = True
        self._embedded_gas_limit = min(self._block_gas_limit // 2, 15_000_000)
        self._call_from = self.accounts[0].address if self.accounts else _ZERO_ADDRESS
        #: Per-block cache of view results, keyed by (contract address, calldata); only
        #: entries of block ``_view_cache_block`` are kept (see :meth:`call`).
        self.view_cache = True
        self.view_cache_hits = 0
        self.view_cache_misses = 0
        self._view_cache: dict[Hashable, tuple[bool, Any]] = {}
        self._view_cache_block = -1
        self._view_cache_lock = threading.Lock()

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
                pending.append(self._send(funder, {"to": address, "value": missing}, gas=21_000))
        for tx_hash in pending:
            receipt = self._wait(tx_hash)
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
                response = self._rpc("anvil_mine", [hex(n)])
            except Exception:  # transport-level refusal: treat as unsupported
                response = {"error": {"message": "anvil_mine unavailable"}}
            if "error" not in response:
                return
            self._anvil_mine = False  # not anvil: fall back to evm_mine from now on
        for _ in range(n):
            response = self._rpc("evm_mine", [])
            if "error" in response:
                raise ChainError(f"node cannot mine on demand: {response['error']}")

    def mine_to(self, block: int) -> None:
        """Mine until the latest block number equals ``block`` (no-op if already past)."""
        self.mine(block - self.block_number())

    def snapshot(self) -> Any:
        """Snapshot the chain state (eth-tester snapshot / ``evm_snapshot``)."""
        if self._tester is not None:
            return self._tester.take_snapshot()
        response = self._rpc("evm_snapshot", [])
        if "error" in response:
            raise ChainError(f"node cannot snapshot: {response['error']}")
        return response["result"]

    def revert(self, snapshot_id: Any) -> None:
        """Return to a :meth:`snapshot`; forgets cached nonces."""
        with self._lock:
            if self._tester is not None:
                self._tester.revert_to_snapshot(snapshot_id)
            else:
                response = self._rpc("evm_revert", [snapshot_id])
                if "error" in response or response.get("result") is False:
                    raise ChainError(f"cannot revert to snapshot {snapshot_id!r}")
            self._nonces.clear()
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
        :attr:`view_cache` to False to disable it. Not detected: another process reverting
        the node to a snapshot and re-mining the same block numbers.
        """
        encode = getattr(contract_fn, "_encode_transaction_data", None)  # web3 v7/v8
        if block_identifier is None and self.view_cache and encode is not None:
            calldata = bytes(HexBytes(encode()))
            return self.cached_call((str(contract_fn.address), calldata), lambda: contract_fn)
        abi = _abi_of(contract_fn)
        try:
            # an explicit sender spares eth-tester's default-account lookup on every call
            return contract_fn.call({"from": self._call_from}, block_identifier=block_identifier)
        except Exception as exc:
            if _is_revert(exc):
                raise self._typed_revert(exc, abi, _fn_name(contract_fn)) from exc
            raise

    def invalidate_views(self) -> None:
        """Forget every cached view result."""
        with self._view_cache_lock:
            self._view_cache.clear()
            self._view_cache_block = -1

    def cached_call(self, key: Hashable, make_fn: Callable[[], Any]) -> Any:
        """:meth:`call` through the per-block view cache under a caller-chosen ``key``.

        ``key`` must identify the contract and calldata exactly (e.g. ``(address, function
        name, args)``); ``make_fn`` builds the bound contract function only on a miss, which
        spares the ABI encoding of a hit. Honours :attr:`view_cache` (off: plain call).
        """
        if not self.view_cache:
            return self.call(make_fn(), "latest")
        block = self.block_number()
        with self._view_cache_lock:
            if block != self._view_cache_block:
                self._view_cache.clear()
                self._view_cache_block = block
            entry = self._view_cache.get(key)
            if entry is not None:
                self.view_cache_hits += 1
        if entry is not None:
            return _replay(entry)
        contract_fn = make_fn()
        try:
            result = contract_fn.call({"from": self._call_from}, block_identifier=block)
            entry = (True, result)
        except Exception as exc:
            if not _is_revert(exc):
                raise
            abi = _abi_of(contract_fn)
            entry = (False, self._typed_revert(exc, abi, _fn_name(contract_fn)))
        with self._view_cache_lock:
            self.view_cache_misses += 1
            # stored only if nothing invalidated the cache or moved it to a newer block since
            if self._view_cache_block == block and len(self._view_cache) < _VIEW_CACHE_MAX:
                self._view_cache[key] = entry
        return _replay(entry)

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
        abi = _abi_of(contract_fn)
        tx: dict[str, Any] = contract_fn.build_transaction(
            {
                "from": account.address,
                "value": int(value),
                "chainId": self.chain_id,
                "nonce": 0,  # allocated in _send
                "gas": gas or 1,
                **self._fee_fields(),
            }
        )
        if gas is None:
            try:
                tx["gas"] = self._gas_limit(tx)
            except Exception as exc:
                if _is_revert(exc):
                    raise self._typed_revert(exc, abi, op) from exc
                raise ChainError(f"{op}: gas estimation failed: {exc}") from exc
        tx_hash = self._send(account, tx, gas=int(tx["gas"]))
        receipt = self._wait(tx_hash)
        if receipt["status"] != 1:
            raise self._explain_failure(tx, receipt, abi, op)
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
        receipt = self._wait(self._send(account, {"to": to, "value": value}, gas=21_000))
        if receipt["status"] != 1:
            raise ChainError(f"transfer to {to} failed")
        self.gas.record("transfer", int(receipt["gasUsed"]))
        return receipt

    # -- internals ------------------------------------------------------------------------

    def _rpc(self, method: str, params: list[Any]) -> dict[str, Any]:
        """Raw JSON-RPC request (node-specific methods web3 has no wrapper for)."""
        return dict(self.w3.provider.make_request(RPCEndpoint(method), params))

    def _initial_priority_fee(self) -> int:
        if not self._eip1559:
            return 0
        try:
            return int(self.w3.eth.max_priority_fee)
        except Exception:
            return 10**9

    def _gas_limit(self, tx: Mapping[str, Any]) -> int:
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
        if self._tester is not None:
            self.w3.eth.call(call, block_identifier="pending")  # type: ignore[arg-type]
            return self._embedded_gas_limit
        if self._estimate_pending:
            try:
                estimate = int(self.w3.eth.estimate_gas(call, "pending"))  # type: ignore[arg-type]
            except Exception as exc:
                if _is_revert(exc):
                    raise
                self._estimate_pending = False  # unsupported by this node: use latest
                estimate = int(self.w3.eth.estimate_gas(call))  # type: ignore[arg-type]
        else:
            estimate = int(self.w3.eth.estimate_gas(call))  # type: ignore[arg-type]
        return min(
            estimate * _GAS_MARGIN_NUM // _GAS_MARGIN_DEN + _GAS_MARGIN_ADD,
            self._block_gas_limit,
        )

    def _fee_fields(self) -> dict[str, int]:
        if not self._eip1559:
            return {"gasPrice": int(self.w3.eth.gas_price)}
        base = int(self.w3.eth.get_block("latest").get("baseFeePerGas") or 0)
        return {
            "maxFeePerGas": 2 * base + self._priority_fee,
            "maxPriorityFeePerGas": self._priority_fee,
        }

    def _send(self, account: LocalAccount, tx: Mapping[str, Any], *, gas: int) -> HexBytes:
        """Fill chain id, fees, gas and nonce; sign; send raw. Returns the tx hash."""
        full: dict[str, Any] = {"chainId": self.chain_id, **tx, "gas": gas}
        if "gasPrice" not in full and "maxFeePerGas" not in full:
            full.update(self._fee_fields())
        full.pop("from", None)
        address = account.address
        with self._lock:
            nonce = self._nonces.get(address)
            if nonce is None:
                nonce = int(self.w3.eth.get_transaction_count(address, "pending"))
            full["nonce"] = nonce
            signed = account.sign_transaction(full)
            try:
                tx_hash = self.w3.eth.send_raw_transaction(signed.raw_transaction)
            except Exception as exc:
                self._nonces.pop(address, None)  # resync from the node next time
                if _is_revert(exc):
                    raise self._typed_revert(exc, [], "send") from exc
                raise ChainError(f"sending transaction from {address} failed: {exc}") from exc
            self._nonces[address] = nonce + 1
        return HexBytes(tx_hash)

    def _wait(self, tx_hash: HexBytes) -> Any:
        try:
            receipt = self.w3.eth.wait_for_transaction_receipt(
                tx_hash, timeout=self.receipt_timeout, poll_latency=self.poll_latency or 0.01
            )
            self.invalidate_views()  # our own transaction changed state
            return receipt
        except TimeExhausted as exc:
            raise ChainError(
                f"transaction {tx_hash.hex()} not mined after {self.receipt_timeout}s"
            ) from exc

    def _typed_revert(
        self, exc: BaseException, abi: Sequence[Mapping[str, Any]], op: str
    ) -> ContractRevert:
        data = _revert_data(exc)
        if data is None:
            reason = _reason_text(exc).strip()
            if reason:
                return ReasonRevert(f"{op}: reverted: {reason}", {"reason": reason})
            return ContractRevert(f"{op}: reverted without data")
        return decode_revert(abi, data, op)

    def _trace_failure(
        self, receipt: Any, abi: Sequence[Mapping[str, Any]], op: str
    ) -> ChainError | None:
        """Recover revert data of a mined failed transaction via ``debug_traceTransaction``."""
        tx_hash = "0x" + HexBytes(receipt["transactionHash"]).hex().removeprefix("0x")
        try:
            response = self._rpc("debug_traceTransaction", [tx_hash, {"tracer": "callTracer"}])
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

    def _explain_failure(
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
        if self._tester is None:
            traced = self._trace_failure(receipt, abi, op)
            if traced is not None:
                return traced
        block = int(receipt["blockNumber"])
        for block_id in (block - 1, block):
            try:
                self.w3.eth.call(call, block_identifier=block_id)  # type: ignore[arg-type]
            except Exception as exc:
                if _is_revert(exc):
                    return self._typed_revert(exc, abi, op)
        return ChainError(
            f"{op}: transaction {HexBytes(receipt['transactionHash']).hex()} failed "
            f"(status 0, gas used {receipt['gasUsed']} of {tx.get('gas')}); the replay did not "
            "revert, so it most likely ran out of gas"
        )


def _replay(entry: tuple[bool, Any]) -> Any:
    """A cached view outcome: a private copy of the result, or a fresh typed revert raised."""
    ok, value = entry
    if ok:
        return copy.deepcopy(value) if isinstance(value, list | tuple | dict) else value
    raise type(value)(str(value), value.error_args)


def _abi_of(contract_fn: Any) -> list[Mapping[str, Any]]:
    abi = getattr(contract_fn, "contract_abi", None)
    if abi is None:
        abi = getattr(contract_fn, "abi", None)
    if isinstance(abi, Mapping):
        abi = [abi]
    return list(abi or [])


def _fn_name(contract_fn: Any) -> str:
    return str(getattr(contract_fn, "fn_name", None) or getattr(contract_fn, "name", "call"))
