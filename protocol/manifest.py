"""The task manifest: everything a node needs to re-execute a round, bound on-chain.

The manifest is canonical JSON (sorted keys, no spaces). It is stored in content storage
and its content digest (:func:`protocol.cid.content_digest`: its SHA-256, for a manifest
of at most 256 KiB) is the contract's ``ruleParamsHash``, so any node that knows only the
contract address can fetch it (``get_by_digest(store, config.ruleParamsHash)``) and check that
it runs the same rule, parameters, numeric format and model as everybody else.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from protocol.cid import content_digest
from protocol.errors import ConfigError
from protocol.fixedpoint import NumericFormat
from protocol.payloads import ModelLayout

MANIFEST_VERSION = 1

#: Default bound on one update's ``numSamples`` (the contract's ``maxSamples``): 10**9, so
#: max_samples * max_updates fits an int64 for every uint32 max_updates.
DEFAULT_MAX_SAMPLES = 10**9


def canonical_json(obj: Any) -> bytes:
    """Canonical JSON bytes: sorted keys, no whitespace, UTF-8, no NaN."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


@dataclass(frozen=True)
class TaskManifest:
    """Rule, numeric format and model of a task (what re-execution depends on)."""

    rule: str
    rule_params: dict[str, Any]
    numeric: NumericFormat
    model: str
    input_shape: tuple[int, ...]
    num_classes: int
    layout: ModelLayout
    client_training: dict[str, Any] = field(default_factory=dict)
    #: the task's privacy parameters (``privacy.spec.PrivacySpec.to_manifest``); a task
    #: without privacy omits the key, so its manifest hash is unchanged
    privacy: dict[str, Any] = field(default_factory=lambda: {"mode": "none"})
    #: largest numSamples (client weight) an update may claim; the contract's ``maxSamples``
    #: refuses more at registration and execution excludes more as invalid. The default is
    #: omitted from the JSON, so manifests that keep it hash as before.
    max_samples: int = DEFAULT_MAX_SAMPLES
    #: the stopping rule (``aggregators.stopping``): stop once the global model's delta
    #: norm stays below ``stop_norm`` for ``stop_patience`` rounds; None (the default) is
    #: off and omitted from the JSON, so manifests without it hash as before
    stop_norm: float | None = None
    stop_patience: int = 1

    def to_json(self) -> dict[str, Any]:
        out = {
            "version": MANIFEST_VERSION,
            "rule": self.rule,
            "rule_params": dict(self.rule_params),
            "frac_bits": self.numeric.frac_bits,
            "value_bound": self.numeric.value_bound,
            "model": self.model,
            "input_shape": list(self.input_shape),
            "num_classes": self.num_classes,
            "layout": self.layout.to_json(),
            "client_training": dict(self.client_training),
        }
        if self.privacy.get("mode", "none") != "none":
            out["privacy"] = dict(self.privacy)
        if self.max_samples != DEFAULT_MAX_SAMPLES:
            out["max_samples"] = self.max_samples
        if self.stop_norm is not None:
            out["stop"] = {"norm": float(self.stop_norm), "patience": int(self.stop_patience)}
        return out

    def to_bytes(self) -> bytes:
        return canonical_json(self.to_json())

    @property
    def digest(self) -> bytes:
        return content_digest(self.to_bytes())

    @classmethod
    def from_bytes(cls, data: bytes) -> TaskManifest:
        try:
            obj = json.loads(data)
            if obj.get("version") != MANIFEST_VERSION:
                raise ConfigError(f"unsupported manifest version {obj.get('version')!r}")
            return cls(
                rule=str(obj["rule"]),
                rule_params=dict(obj["rule_params"]),
                numeric=NumericFormat(int(obj["frac_bits"]), int(obj["value_bound"])),
                model=str(obj["model"]),
                input_shape=tuple(int(x) for x in obj["input_shape"]),
                num_classes=int(obj["num_classes"]),
                layout=ModelLayout.from_spec(obj["layout"]),
                client_training=dict(obj.get("client_training", {})),
                privacy=dict(obj.get("privacy", {"mode": "none"})),
                max_samples=int(obj.get("max_samples", DEFAULT_MAX_SAMPLES)),
                stop_norm=float(obj["stop"]["norm"]) if "stop" in obj else None,
                stop_patience=int(obj["stop"]["patience"]) if "stop" in obj else 1,
            )
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, ConfigError):
                raise
            raise ConfigError(f"invalid task manifest: {exc}") from exc
