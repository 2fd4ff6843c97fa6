"""Shared chain fixtures: a fresh embedded chain per test and a FedChainTask factory."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from eth_account.signers.local import LocalAccount

from adapters.chain import Chain
from adapters.contract import TaskConfig, TaskContract

ETHER = 10**18

#: Small windows (blocks) so edge tests stay fast; override per test via task_factory(**kw).
DEFAULT_TASK_CONFIG: dict[str, Any] = {
    "initial_model_digest": b"\x11" * 32,
    "rule_id": b"fedavg".ljust(32, b"\x00"),
    "rule_params_hash": b"\x22" * 32,
    "num_rounds": 3,
    "min_updates": 2,
    "max_updates": 4,
    "collect_window": 5,
    "submit_timeout": 2,
    "challenge_window": 2,
    "rotation_policy": 0,
    "rotation_seed": b"\x33" * 32,
    "aggregator_stake": 1 * ETHER,
    "aggregate_bond": ETHER // 10,
    "challenge_bond": ETHER // 10,
    "timeout_penalty": ETHER // 4,
}


@dataclass
class TaskSetup:
    """A deployed task plus the accounts playing each role."""

    chain: Chain
    task: TaskContract
    owner: LocalAccount
    aggregators: list[LocalAccount]
    clients: list[LocalAccount]
    spare: list[LocalAccount] = field(default_factory=list)  # unregistered accounts

    def account(self, address: str | None) -> LocalAccount:
        """The local account with ``address``."""
        for acct in self.chain.accounts:
            if acct.address == address:
                return acct
        raise KeyError(address)


@pytest.fixture
def default_config() -> dict[str, Any]:
    """Keyword arguments of the default test TaskConfig (a fresh copy)."""
    return dict(DEFAULT_TASK_CONFIG)


@pytest.fixture
def chain() -> Chain:
    """A fresh in-process eth-tester chain with 16 funded local accounts (~60 ms)."""
    return Chain.embedded(num_accounts=16)


@pytest.fixture
def task_factory(chain: Chain) -> Callable[..., TaskSetup]:
    """``task_factory(n_aggregators=4, n_clients=4, start=True, **config_overrides)``.

    Deploys a FedChainTask from ``accounts[0]``, registers aggregators and clients from the
    following accounts (in that order) and optionally starts it.
    """

    def make(
        *, n_aggregators: int = 4, n_clients: int = 4, start: bool = True, **overrides: Any
    ) -> TaskSetup:
        if 1 + n_aggregators + n_clients > len(chain.accounts):
            raise ValueError("not enough accounts on the fixture chain")
        config = TaskConfig(**{**DEFAULT_TASK_CONFIG, **overrides})
        owner, rest = chain.accounts[0], chain.accounts[1:]
        aggregators = rest[:n_aggregators]
        clients = rest[n_aggregators : n_aggregators + n_clients]
        task = TaskContract.deploy(chain, owner, config)
        for acct in aggregators:
            task.register_aggregator(acct)
        for acct in clients:
            task.register_client(acct)
        if start and aggregators:
            task.start(owner)
        return TaskSetup(
            chain, task, owner, aggregators, clients, rest[n_aggregators + n_clients :]
        )

    return make
