"""Typed reverts: raw revert data from any backend becomes one exception class per error.

Solidity custom errors found in a contract's ABI become their registered
:class:`~protocol.errors.ContractRevert` subclass (see :func:`register_error_class`) with
``error_args`` decoded by parameter name; ``Error(string)`` becomes :class:`ReasonRevert`,
``Panic(uint256)`` :class:`PanicRevert`. :func:`typed_revert` extracts the revert data from
whatever web3, eth-tester or a JSON-RPC node raised, whether the revert showed up while
estimating gas, in a view call, or in the replay of a mined receipt with status 0.
"""

from __future__ import annotations

import ast
import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from eth_abi.abi import decode as abi_decode
from eth_utils.address import to_checksum_address
from eth_utils.crypto import keccak
from web3.exceptions import ContractLogicError, Web3RPCError

from protocol.errors import ContractRevert

__all__ = [
    "PanicRevert",
    "ReasonRevert",
    "abi_of",
    "decode_revert",
    "error_class",
    "fn_name",
    "is_revert",
    "register_error_class",
    "typed_revert",
]

_ERROR_STRING_SELECTOR = bytes.fromhex("08c379a0")  # Error(string)
_PANIC_SELECTOR = bytes.fromhex("4e487b71")  # Panic(uint256)


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


def revert_data(exc: BaseException) -> bytes | None:
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


def is_revert(exc: BaseException) -> bool:
    if isinstance(exc, ContractLogicError):
        return True
    if type(exc).__name__ == "TransactionFailed":  # eth_tester.exceptions.TransactionFailed
        return True
    if isinstance(exc, Web3RPCError):
        return "revert" in str(exc).lower()
    return False


def reason_text(exc: BaseException) -> str:
    text = str(exc.args[0]) if exc.args else str(exc)
    return text.removeprefix("execution reverted: ").removeprefix("execution reverted")


def typed_revert(exc: BaseException, abi: Sequence[Mapping[str, Any]], op: str) -> ContractRevert:
    """The typed exception (not raised) for a revert ``exc`` raised by web3 or eth-tester."""
    data = revert_data(exc)
    if data is None:
        reason = reason_text(exc).strip()
        if reason:
            return ReasonRevert(f"{op}: reverted: {reason}", {"reason": reason})
        return ContractRevert(f"{op}: reverted without data")
    return decode_revert(abi, data, op)


def abi_of(contract_fn: Any) -> list[Mapping[str, Any]]:
    """The ABI entries a bound web3 contract function (or constructor) was built from."""
    abi = getattr(contract_fn, "contract_abi", None)
    if abi is None:
        abi = getattr(contract_fn, "abi", None)
    if isinstance(abi, Mapping):
        abi = [abi]
    return list(abi or [])


def fn_name(contract_fn: Any) -> str:
    """The Solidity name of a bound web3 contract function (``call`` if it has none)."""
    return str(getattr(contract_fn, "fn_name", None) or getattr(contract_fn, "name", "call"))
