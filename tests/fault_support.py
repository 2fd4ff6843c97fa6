"""Shared set-up of the fault-proof game tests (tests/test_fault_games.py and
tests/attacks/test_fault_proof.py): a round's data, the deployed contracts, claim posting."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from web3.logs import DISCARD

from adapters.chain import Chain
from adapters.faultproof import FaultGamesContract, OneStepContract
from aggregators.base import AggregationInput
from aggregators.faultproof import StepRule, excluded_words, step_args
from aggregators.registry import make_rule
from protocol.merkle import CHUNK, ChunkTree, chunk_bytes, chunk_values

CLOCK = 4
WINDOW = 6
BOND = 10**17  # challenge bond
CLAIM_BOND = 10**18
VB = 2**16
D = 3 * CHUNK + 10  # four chunks, the last partial: depth 2


@dataclass
class Round:
    """One round's data: previous state, updates, weights, excluded rows, honest new state."""

    rule: StepRule
    prev: Any
    ups: list[Any]
    weights: list[int]
    excluded: list[int] = field(default_factory=list)
    clients: list[str] = field(default_factory=list)  # the records' signers, when registered
    digests: list[bytes] = field(default_factory=list)
    not_included: list[int] = field(default_factory=list)  # the task did not include them

    @property
    def included(self) -> list[int]:
        return [i for i in range(len(self.ups)) if i not in self.excluded]

    def honest(self) -> Any:
        inc = self.included
        return (
            make_rule(self.rule.name, self.rule.params)
            .aggregate(
                AggregationInput(
                    self.prev,
                    np.stack([self.ups[i] for i in inc]),
                    np.array([self.weights[i] for i in inc], np.int64),
                    value_bound=2**30,
                )
            )
            .params
        )

    def records(self) -> tuple[list[bytes], list[int], list[int]]:
        roots = [ChunkTree(u).root for u in self.ups]
        return roots, self.weights, excluded_words(self.excluded, len(self.ups))

    def roots(self) -> list[bytes]:
        """U_i of every update (what its client signs)."""
        return [ChunkTree(u).root for u in self.ups]

    def unincluded(self) -> list[int]:
        """The claim's ``unincluded`` bitmap (the records the task did not include)."""
        return excluded_words(self.not_included, len(self.ups))

    def signers(self) -> tuple[list[str], list[bytes]]:
        """The claim's ``Signers`` (client and digest of each record; zero for a round not
        registered on a task)."""
        n = len(self.ups)
        return (
            self.clients or ["0x" + "00" * 20] * n,
            self.digests or [bytes(32)] * n,
        )

    def step(self, j: int) -> tuple[Any, ...]:
        inc = self.included
        return step_args(
            self.rule, j, self.prev, [self.ups[i] for i in inc], [self.weights[i] for i in inc]
        )


def make_round(rule: StepRule, seed: int = 1, k: int = 5, d: int = D) -> Round:
    rng = np.random.default_rng(seed)
    prev = rng.integers(-(2**20), 2**20, size=d).astype(np.int64)
    ups = [rng.integers(-VB, VB + 1, size=d).astype(np.int32) for _ in range(k)]
    return Round(rule, prev, ups, [int(v) for v in rng.integers(1, 500, size=k)])


@dataclass
class Setup:
    chain: Chain
    games: FaultGamesContract
    submitter: Any
    challengers: list[Any]


@pytest.fixture
def s(chain: Chain) -> Iterator[Setup]:
    one = OneStepContract.deploy(chain, chain.accounts[0])
    games = FaultGamesContract.deploy(chain, chain.accounts[0], one.address, CLOCK, BOND)
    yield Setup(chain, games, chain.accounts[1], chain.accounts[2:6])


def post(s: Setup, r: Round, state: Any, window: int = WINDOW) -> int:
    """Post a claim of ``state`` for round ``r``; returns its id (claims are numbered)."""
    params = (
        r.rule.rule_id,
        r.rule.beta_num,
        r.rule.beta_den,
        len(r.prev),
        window,
        VB,
        ChunkTree(r.prev).root,
        ChunkTree(state).root,
    )
    receipt = s.games.tx(
        s.submitter, "postClaim", params, r.records(), r.signers(), r.unincluded(), value=CLAIM_BOND
    )
    ev = s.games.contract.events.ClaimPosted().process_receipt(receipt, errors=DISCARD)
    return int(ev[0]["args"]["claimId"])


def open_game(s: Setup, who: Any, fn: str, *args: Any) -> int:
    receipt = s.games.tx(who, fn, *args, value=BOND)
    return int(
        s.games.contract.events.GameOpened().process_receipt(receipt, errors=DISCARD)[0]["args"][
            "gameId"
        ]
    )


def reveal(s: Setup, game: int, state: Any, j: int) -> None:
    t = ChunkTree(state)
    s.games.tx(s.submitter, "revealLeaf", game, t.leaves[j], t.proof(j))


def faulty(r: Round, j: int = 2, delta: int = 1) -> Any:
    bad = r.honest().copy()
    bad[j * CHUNK + 3] += delta
    return bad


def bad_update(r: Round, i: int, j: int = 1, lane: int = 5) -> None:
    r.ups[i] = r.ups[i].copy()
    r.ups[i][j * CHUNK + lane] = VB + 1


def opening(u: Any, j: int, lane: int) -> tuple[int, bytes, list[bytes], int]:
    return (j, chunk_bytes(chunk_values(u, j)), ChunkTree(u).proof(j), lane)


def started_fault_round(
    chain: Chain,
    config: dict[str, Any],
    *,
    step: StepRule | None = None,
    dim: int = 0,
    stop: tuple[int, int] | None = None,
    fault_proof: bool = True,
) -> tuple[Any, FaultGamesContract, Round]:
    """A started task (``DEFAULT_TASK_CONFIG`` with ``config`` on top) whose K clients
    registered round 1 of a FedAvg :func:`make_round` with their U_i, collection closed by
    ``maxUpdates`` and nobody attested yet; unless ``fault_proof`` is false it is bound to a
    fresh FaultGames first, with the step parameters of ``step`` (default the round's rule)
    and ``dim`` (default the round's d), and ``stop`` = (T**2, patience) if given. Returns
    the ``TaskSetup`` (aggregators: accounts 1-4, clients: the next K), the games and the
    round."""
    from adapters.contract import TaskConfig, TaskContract
    from aggregators.faultproof import fault_params_hash
    from tests.conftest import DEFAULT_TASK_CONFIG, TaskSetup
    from tests.test_contract import dg

    r = make_round(StepRule.of("fedavg"))
    k = len(r.ups)
    owner, rest = chain.accounts[0], chain.accounts[1:]
    aggregators, clients = rest[:4], rest[4 : 4 + k]
    settings = {**DEFAULT_TASK_CONFIG, "min_updates": k, "max_updates": k, "submit_timeout": 10}
    task = TaskContract.deploy(chain, owner, TaskConfig(**{**settings, **config}))
    one = OneStepContract.deploy(chain, owner)
    games = FaultGamesContract.deploy(chain, owner, one.address, CLOCK, BOND)
    if fault_proof:  # fixed before anyone stakes on the task
        params = fault_params_hash(step or r.rule, dim or len(r.prev), VB)
        task.set_fault_games(owner, games.address, ChunkTree(r.prev).root, params)
        if stop is not None:
            task.set_stop_rule(owner, *stop)
    for a in aggregators:
        task.register_aggregator(a)
    for c in clients:
        task.register_client(c)
    task.start(owner)
    # each client signs its update's digest, weight and U_i (chunk root)
    for i, c in enumerate(clients):
        task.submit_update(c, 1, dg(("u", i)), r.weights[i], ChunkTree(r.ups[i]).root)
    r.clients = [c.address for c in clients]
    r.digests = [dg(("u", i)) for i in range(k)]
    return TaskSetup(chain, task, owner, aggregators, clients, rest[4 + k :]), games, r
