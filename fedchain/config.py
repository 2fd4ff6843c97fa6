"""Run configuration shared by ``fedchain demo`` and ``fedchain run`` (every knob, validated)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aggregators.registry import make_rule
from protocol.errors import ConfigError

ROTATIONS = {"round-robin": 0, "random": 1}
WEI_PER_ETH = 10**18


@dataclass
class DemoConfig:
    """Every knob of a demo run (see ``fedchain demo --help``)."""

    clients: int = 10
    aggregators: int = 4
    rounds: int = 5
    dataset: str = "digits"
    partition: str = "iid"
    alpha: float = 0.5
    model: str = "mlp"
    epochs: int = 10
    batch_size: int = 16
    lr: float = 0.1
    momentum: float = 0.9
    prox_mu: float = 0.0
    rule: str = "fedavg"
    rule_params: dict[str, Any] = field(default_factory=dict)
    frac_bits: int = 16
    clip: float = 4.0
    min_updates: int | None = None
    collect_window: int = 50
    submit_timeout: int = 10
    challenge_window: int = 5
    rotation: str = "round-robin"
    seed: int = 0
    out: str = "runs"
    name: str = "demo"
    rpc_url: str | None = None
    funding_key: str | None = None
    store: str | None = None
    max_blocks: int = 100_000

    def validate(self) -> None:
        """Refuse bad values before any work, with the option's name in the message."""
        positive = (
            "clients",
            "aggregators",
            "rounds",
            "epochs",
            "batch_size",
            "collect_window",
            "submit_timeout",
            "challenge_window",
        )
        for name in positive:
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be at least 1")
        if self.rotation not in ROTATIONS:
            raise ConfigError(f"--rotation must be one of {sorted(ROTATIONS)}")
        if self.min_updates is not None and not 1 <= self.min_updates <= self.clients:
            raise ConfigError("--min-updates must be between 1 and --clients")
        if not self.clip > 0:
            raise ConfigError("--clip must be positive")
        if self.clip * 2**self.frac_bits > 2**30:
            raise ConfigError("--clip * 2**frac_bits must not exceed 2**30")
        # Unknown rule, bad parameters, or too few clients for them: fail now, not mid-run.
        rule = make_rule(self.rule, self.rule_params)
        rule.check_num_updates(self.min_updates or self.clients)
