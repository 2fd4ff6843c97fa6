"""Rule registry: select a rule by name and parameters; identify it on-chain.

On-chain a task records ``rule_id(name)`` (sha256 of the UTF-8 name) and
``params_hash(rule)`` (sha256 of the canonical JSON of *all* parameters, defaults included):
keys sorted, no whitespace, ints as JSON integers, strings as JSON strings and floats as JSON
strings holding Python's shortest round-trip ``repr`` (e.g. ``{"beta":"0.1"}``), so the hash
never depends on a JSON library's float formatting.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping

from aggregators.base import AggregationRule, ParamValue
from protocol.errors import RuleParameterError

__all__ = [
    "available_rules",
    "canonical_params_json",
    "get_rule_class",
    "make_rule",
    "params_hash",
    "parse_rule_params",
    "register_rule",
    "rule_id",
]

_RULES: dict[str, type[AggregationRule]] = {}


def register_rule(cls: type[AggregationRule]) -> type[AggregationRule]:
    """Class decorator: make ``cls`` selectable by ``cls.name``."""
    name = cls.name
    if not name or name != name.strip().lower():
        raise ValueError(f"rule name must be non-empty lowercase, got {name!r}")
    if name in _RULES and _RULES[name] is not cls:
        raise ValueError(f"rule {name!r} is already registered")
    _RULES[name] = cls
    return cls


_RULE_MODULES = (
    "aggregators.fedavg",
    "aggregators.robust",
    "aggregators.server_opt",
    "aggregators.geomedian",
    "aggregators.centered_clip",
)


def _ensure_loaded() -> None:
    # Importing the rule modules registers them (kept lazy to avoid import cycles).
    import importlib

    for mod in _RULE_MODULES:
        importlib.import_module(mod)


def available_rules() -> list[str]:
    """Names of all registered rules, sorted."""
    _ensure_loaded()
    return sorted(_RULES)


def get_rule_class(name: str) -> type[AggregationRule]:
    """The class of rule ``name``; ``PRE+...+RULE`` composes pre-aggregators with a rule
    (``aggregators.preaggregation``: ``nnm``, ``bucketing``, ``clip``, ``arc``)."""
    _ensure_loaded()
    key = name.strip().lower()
    if "+" in key:
        from aggregators.preaggregation import composite_rule_class

        return composite_rule_class(key, get_rule_class)
    try:
        return _RULES[key]
    except KeyError:
        raise RuleParameterError(
            f"unknown aggregation rule {name!r} (available: {', '.join(sorted(_RULES))})"
        ) from None


def make_rule(name: str, params: Mapping[str, object] | None = None) -> AggregationRule:
    """Instantiate rule ``name`` with ``params`` (values may be CLI strings such as ``"1"``;
    they are converted by the declared parameter type). Raises ``RuleParameterError``."""
    cls = get_rule_class(name)
    return cls(**dict(params or {}))


def rule_id(name: str) -> bytes:
    """32-byte on-chain rule identifier: ``sha256(name.encode("utf-8"))``."""
    return hashlib.sha256(name.encode("utf-8")).digest()


def _canonical_value(v: ParamValue) -> int | str:
    if isinstance(v, bool):  # pragma: no cover - ParamSpec never produces bools
        raise TypeError("bool parameters are not supported")
    if isinstance(v, float):
        return repr(v + 0.0)
    if isinstance(v, int | str):
        return v
    raise TypeError(f"unsupported parameter value {v!r}")


def canonical_params_json(rule: AggregationRule | Mapping[str, ParamValue]) -> bytes:
    """Canonical JSON bytes of a rule's parameters (see module docstring)."""
    params = rule.params if isinstance(rule, AggregationRule) else dict(rule)
    obj = {k: _canonical_value(v) for k, v in params.items()}
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8"
    )


def params_hash(rule: AggregationRule | Mapping[str, ParamValue]) -> bytes:
    """32-byte ``sha256`` of :func:`canonical_params_json`."""
    return hashlib.sha256(canonical_params_json(rule)).digest()


def parse_rule_params(items: Iterable[str]) -> dict[str, str]:
    """Parse CLI ``["f=1", "m=3"]`` into ``{"f": "1", "m": "3"}`` (values stay strings;
    :func:`make_rule` converts them by declared type). Duplicate keys are an error."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise RuleParameterError(f"rule parameter must look like name=value, got {item!r}")
        if key in out:
            raise RuleParameterError(f"rule parameter {key!r} given twice")
        out[key] = value.strip()
    return out
