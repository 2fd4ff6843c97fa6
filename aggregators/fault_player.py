"""An aggregator that plays the fault-proof games unattended (``contracts/FaultGames.sol``).

:class:`FaultPlayer` holds what an honest node knows about a round (:class:`RoundView`: the
previous state, the included updates, their weights and the excluded set) and, on each
:meth:`FaultPlayer.play` pass, makes every move that is due for its account:

* as a challenger: :meth:`watch` a claim - if its new root is not the honest state's root,
  open a leaf game on the first differing chunk (when the claimed state is public) or a
  16-ary descent (when it is not); then pick differing nodes, run the one-step check
  (``prove``) once a leaf is agreed, and claim a timeout when the submitter's clock is spent;
* as a submitter (:meth:`post_claim`): reveal leaves and descent nodes of its own tree, show an
  excluded update bad, post requested chunks, claim timeouts of silent challengers;
* refunds and winnings are pulled with :meth:`withdraw`.

The moves themselves are the pure functions of :mod:`aggregators.faultproof`; this module is
the loop around them (no threads: call :meth:`play` from the node's poll loop).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Final

import numpy as np
from eth_abi.abi import decode as abi_decode
from eth_account.signers.local import LocalAccount
from eth_utils.crypto import keccak
from numpy.typing import NDArray
from web3.logs import DISCARD

from adapters.faultproof import FaultGamesContract
from adapters.records import UpdateEntry
from adapters.reverts import error_class
from aggregators.base import AggregationInput
from aggregators.faultproof import (
    StepRule,
    descent_nodes,
    descent_pick,
    differing_chunks,
    excluded_words,
    norm_step_args,
    norm_sums,
    step_args,
)
from aggregators.registry import make_rule
from protocol.merkle import (
    CHUNK,
    ChunkTree,
    chunk_bytes,
    chunk_values,
    norm_leaf,
    vector_root,
)

__all__ = ["FaultPlayer", "RoundView"]

# Kind / Turn of FaultGames.Game
LEAF: Final = 1
EXCLUSION: Final = 2
AVAILABILITY: Final = 3
DESCENT: Final = 4
NORM_LEAF: Final = 5
NORM_DESCENT: Final = 6
#: what an omitted stop adds to a quiet round's committed norm (above any T**2 a task sets)
NOT_QUIET: Final = 2**200
SUBMITTER: Final = 0
CHALLENGER: Final = 1
OVER: Final = 2
# fields of FaultGames.claim(...)
_REFUTED: Final = 8
_NEW_ROOT: Final = 13
_NODES_TOPIC: Final = keccak(text="NodesRevealed(uint256,uint256,uint256,uint256,bytes32[])")
_NORM_TOPIC: Final = keccak(text="NormLeavesRevealed(uint256,bytes32,bytes32,bytes32[])")


_NO_CLIENT: Final = "0x" + "00" * 20


@dataclass
class RoundView:
    """One round as an honest node sees it: every registered update in registration order.

    ``clients``, ``digests`` and ``roots`` are the signed records (who, the payload's
    SHA-256, U_i), read from the chain by :meth:`from_records`; a claim lists them so that
    the task binds it to the round (``submitAggregateWithClaim``). A view built from vectors
    alone (games without a task) leaves them empty: its roots are the vectors' own, its
    clients and digests zero, and its claims bind to no task round.

    ``unincluded`` lists the records the TASK did not include (``includedUpdates``: fewer
    than f + 1 members attested them); they are excluded too, and the claim declares them so
    (``postClaim``'s ``unincluded``): the task binds only a claim whose declaration is the
    complement of its included set, and no exclusion game can be opened on them."""

    rule: StepRule
    prev: NDArray[np.int64]
    updates: list[NDArray[np.int32]]
    weights: list[int]
    excluded: list[int] = field(default_factory=list)
    value_bound: int = 2**30
    clients: list[str] = field(default_factory=list)
    digests: list[bytes] = field(default_factory=list)
    roots: list[bytes] = field(default_factory=list)
    unincluded: list[int] = field(default_factory=list)

    @classmethod
    def from_records(
        cls,
        rule: StepRule,
        prev: NDArray[np.int64],
        records: Sequence[UpdateEntry],
        updates: Sequence[NDArray[np.int32] | None],
        value_bound: int = 2**30,
        included: Sequence[bool] | None = None,
    ) -> RoundView:
        """The view of a round's registered ``records`` (``TaskContract.updates``) and the
        decoded ``updates`` (None: unavailable or undecodable). An update is excluded when the
        task did not include it (``included``, the task's ``includedUpdates``; None: every
        update was), or it is missing, exceeds ``value_bound``, or its vector's chunk root is
        not the U_i its client signed: the games open an update's chunks against the signed
        U_i only."""
        size = int(prev.size)
        taken = [True] * len(records) if included is None else list(included)
        unincluded = [i for i, take in enumerate(taken) if not take]
        vectors: list[NDArray[np.int32]] = []
        excluded: list[int] = []
        for i, (rec, u) in enumerate(zip(records, updates, strict=True)):
            ok = (
                taken[i]
                and u is not None
                and int(np.abs(u.astype(np.int64)).max(initial=0)) <= value_bound
                and vector_root(u) == bytes(rec.chunk_root)
            )
            vectors.append(u if ok and u is not None else np.zeros(size, np.int32))
            if not ok:
                excluded.append(i)
        return cls(
            rule,
            prev,
            vectors,
            [r.num_samples for r in records],
            excluded,
            value_bound,
            [r.client for r in records],
            [bytes(r.digest) for r in records],
            [bytes(r.chunk_root) for r in records],
            unincluded,
        )

    @property
    def included(self) -> list[int]:
        return [i for i in range(len(self.updates)) if i not in self.excluded]

    @cached_property
    def honest_state(self) -> NDArray[np.int64]:
        inc = self.included
        out = make_rule(self.rule.name, self.rule.params).aggregate(
            AggregationInput(
                self.prev,
                np.stack([self.updates[i] for i in inc]),
                np.array([self.weights[i] for i in inc], np.int64),
                value_bound=2**30,
            )
        )
        return out.params

    @cached_property
    def trees(self) -> list[ChunkTree]:
        return [ChunkTree(u) for u in self.updates]

    @cached_property
    def prev_tree(self) -> ChunkTree:
        return ChunkTree(self.prev)

    @cached_property
    def honest_tree(self) -> ChunkTree:
        return ChunkTree(self.honest_state)

    @cached_property
    def honest_norm(self) -> list[int]:
        """The honest round's prefix sums S_j (the stopping rule's commitment)."""
        return norm_sums(self.prev, self.honest_state)

    @cached_property
    def honest_norm_tree(self) -> ChunkTree:
        return ChunkTree.of_leaves(int(self.prev.size), [norm_leaf(v) for v in self.honest_norm])

    def records(self) -> tuple[list[bytes], list[int], list[int]]:
        """The claim's records: every U_i (the signed ones when known), the weights, the
        excluded bitmap."""
        return (
            list(self.roots) if self.roots else [t.root for t in self.trees],
            list(self.weights),
            excluded_words(self.excluded, len(self.updates)),
        )

    def unincluded_words(self) -> list[int]:
        """The claim's ``unincluded`` bitmap: the records the task did not include."""
        return excluded_words(self.unincluded, len(self.updates))

    def signers(self) -> tuple[list[str], list[bytes]]:
        """The claim's ``Signers``: each record's client and digest (zero when unknown)."""
        n = len(self.updates)
        return (
            list(self.clients) if self.clients else [_NO_CLIENT] * n,
            list(self.digests) if self.digests else [bytes(32)] * n,
        )

    def step(self, j: int) -> tuple[Any, ...]:
        inc = self.included
        return step_args(
            self.rule,
            j,
            self.prev,
            [self.updates[i] for i in inc],
            [self.weights[i] for i in inc],
            prev_tree=self.prev_tree,
            trees=[self.trees[i] for i in inc],
        )

    def opening(self, i: int, j: int, lane: int = 0) -> tuple[int, bytes, list[bytes], int]:
        return (j, chunk_bytes(chunk_values(self.updates[i], j)), self.trees[i].proof(j), lane)


class FaultPlayer:
    """Plays one account's side of every game on the claims it posted or watches."""

    def __init__(self, games: FaultGamesContract, account: LocalAccount, view: RoundView) -> None:
        self.games = games
        self.account = account
        self.view = view
        self.claimed: dict[int, ChunkTree] = {}  # claims this player posted -> its tree
        self.norms: dict[int, ChunkTree] = {}  # claims this player committed a norm tree for
        self.watched: set[int] = set()  # claims this player challenges
        self.moves: list[str] = []
        #: every transaction this player sent: (function, game or claim id, gas used)
        self.log: list[tuple[str, int, int]] = []
        self._next_game = 0

    # -- submitter -------------------------------------------------------------------------

    def post_claim(self, state: NDArray[np.int64], window: int, bond: int) -> int:
        """Post a claim that the round's new state is ``state``; returns its id."""
        v = self.view
        tree = ChunkTree(state)
        params = (
            v.rule.rule_id,
            v.rule.beta_num,
            v.rule.beta_den,
            int(v.prev.size),
            window,
            v.value_bound,
            v.prev_tree.root,
            tree.root,
        )
        receipt = self._tx(
            "postClaim", params, v.records(), v.signers(), v.unincluded_words(), value=bond
        )
        ev = self.games.contract.events.ClaimPosted().process_receipt(receipt, errors=DISCARD)
        cid = int(ev[0]["args"]["claimId"])
        self.claimed[cid] = tree
        return cid

    def commit_norm(self, claim_id: int, state: NDArray[np.int64], lie: str | None = None) -> None:
        """Commit the norm tree of ``state`` (from the previous state) for a task with a
        stopping rule. ``lie``: ``false_stop`` commits 0 as the last prefix sum (quiet),
        ``omit_stop`` adds :data:`NOT_QUIET` to it - consistent trees whose first wrong leaf
        is the last one (a norm step there refutes them)."""
        sums = norm_sums(self.view.prev, state)
        if lie == "false_stop":
            sums[-1] = 0
        elif lie == "omit_stop":
            sums[-1] += NOT_QUIET
        tree = ChunkTree.of_leaves(int(self.view.prev.size), [norm_leaf(v) for v in sums])
        self._tx("commitNorm", claim_id, tree.root, sums[-1])
        self.norms[claim_id] = tree

    # -- challenger ------------------------------------------------------------------------

    def watch(self, claim_id: int, claimed: NDArray[np.int64] | None = None) -> int | None:
        """Check a claim against the honest state; if it differs, open a game and follow it.
        With the claimed state (public), a leaf game on the first differing chunk; without,
        a descent. Returns the game id, or None when the claim is honest."""
        c = self.games.view("claim", claim_id)
        if bytes(c[_NEW_ROOT]) == self.view.honest_tree.root:
            return self._watch_norm(claim_id)
        bond = int(self.games.view("challengeBond"))
        self.watched.add(claim_id)
        if claimed is not None:
            j = differing_chunks(self.view.honest_state, claimed)[0]
            receipt = self._tx("openLeaf", claim_id, j, value=bond)
        else:
            receipt = self._tx("openDescent", claim_id, value=bond)
        ev = self.games.contract.events.GameOpened().process_receipt(receipt, errors=DISCARD)
        return int(ev[0]["args"]["gameId"])

    def _watch_norm(self, claim_id: int) -> int | None:
        """An honest state's norm commitment: a wrong total (what the stop decision reads)
        is challenged - over an honest tree at the last leaf, else by a norm descent."""
        root, total, committed, _ = self.games.view("norm", claim_id)
        honest = self.view.honest_norm_tree
        if not committed or int(total) == self.view.honest_norm[-1]:
            return None
        bond = int(self.games.view("challengeBond"))
        self.watched.add(claim_id)
        if bytes(root) == honest.root:
            receipt = self._tx("openNormLeaf", claim_id, honest.num_chunks - 1, value=bond)
        else:
            receipt = self._tx("openNormDescent", claim_id, value=bond)
        ev = self.games.contract.events.GameOpened().process_receipt(receipt, errors=DISCARD)
        return int(ev[0]["args"]["gameId"])

    # -- the loop --------------------------------------------------------------------------

    def play(self, limit: int | None = None) -> int:
        """Make every move due now on this player's claims and games (at most ``limit``);
        returns how many."""
        made = 0
        gid = 0
        block = self.games.chain.block_number() + 1  # the block a transaction lands in
        while True:
            try:
                g = self.games.view("game", gid)
            except error_class("UnknownId"):
                break
            gid += 1
            if int(g[3]) == OVER:
                continue
            made += self._play_game(gid - 1, g, block)
            if limit is not None and made >= limit:
                break
        return made

    def _play_game(self, gid: int, g: Any, block: int) -> int:
        cid, challenger, kind, turn = int(g[0]), str(g[1]), int(g[2]), int(g[3])
        mine_submitter = cid in self.claimed
        # only the claims this player watches: one account may challenge in many rounds,
        # each with its own player and view
        mine_challenger = challenger == self.account.address and cid in self.watched
        if not (mine_submitter or mine_challenger):
            return 0
        c = self.games.view("claim", cid)
        budget = int(g[5]) if turn == SUBMITTER else int(g[6])
        expired = block - int(g[4]) > budget
        if bool(c[_REFUTED]) or (expired and (turn == SUBMITTER) == mine_challenger):
            self._tx("timeout", gid)  # refund on a refuted claim, or the other side is out
            self.moves.append("timeout")
            return 1
        if expired:
            return 0
        if turn == SUBMITTER and mine_submitter:
            if kind in (NORM_LEAF, NORM_DESCENT):
                return self._norm_submitter_move(gid, g, kind, self.norms[cid])
            return self._submitter_move(gid, g, kind, self.claimed[cid])
        if turn == CHALLENGER and mine_challenger:
            return self._challenger_move(gid, g, kind)
        return 0

    def _submitter_move(self, gid: int, g: Any, kind: int, tree: ChunkTree) -> int:
        index, j, level = int(g[7]), int(g[8]), int(g[10])
        v = self.view
        if kind == LEAF:
            self._tx("revealLeaf", gid, tree.leaves[j], tree.proof(j))
            self.moves.append("revealLeaf")
        elif kind == DESCENT:
            self._tx("revealNodes", gid, descent_nodes(tree, level, index))
            self.moves.append("revealNodes")
        elif kind == EXCLUSION:
            opening = v.opening(index, 0, 0)  # an included update: the records answer
            if index in v.excluded:
                bad = np.flatnonzero(np.abs(v.updates[index].astype(np.int64)) > v.value_bound)
                if bad.size == 0:
                    return 0  # cannot defend an unjustified exclusion: the clock decides
                coord = int(bad[0])
                opening = v.opening(index, coord // CHUNK, coord % CHUNK)
            self._tx("defendExclusion", gid, v.records(), opening)
            self.moves.append("defendExclusion")
        elif kind == AVAILABILITY:
            self._tx("postChunk", gid, v.records(), v.opening(index, j))
            self.moves.append("postChunk")
        else:
            return 0
        return 1

    def _norm_submitter_move(self, gid: int, g: Any, kind: int, tree: ChunkTree) -> int:
        index, j, level = int(g[7]), int(g[8]), int(g[10])
        if kind == NORM_DESCENT:
            self._tx("revealNodes", gid, descent_nodes(tree, level, index))
            self.moves.append("revealNodes")
            return 1
        prev = (tree.leaves[j - 1], tree.proof(j - 1)) if j else (bytes(32), [])
        self._tx("revealNormLeaf", gid, tree.leaves[j], tree.proof(j), *prev)
        self.moves.append("revealNormLeaf")
        return 1

    def _norm_challenger_move(self, gid: int, g: Any, kind: int) -> int:
        v = self.view
        if kind == NORM_DESCENT:
            level, index = int(g[10]), int(g[7])
            nodes = self._revealed_nodes(gid)
            pick = descent_pick(v.honest_norm_tree, level, index, nodes)
            self._tx("pickNode", gid, nodes, 0 if pick is None else pick)
            self.moves.append("pickNode")
            return 1
        j = int(g[8])
        if bytes(g[9]) == v.honest_norm_tree.leaves[j]:
            return 0  # S_j is right after all: let the clock settle it
        root = bytes(self.games.view("norm", int(g[0]))[0])
        args = norm_step_args(
            j,
            v.prev,
            v.honest_state,
            v.honest_norm[j - 1] if j else 0,
            root,
            self._revealed_prev_proof(gid),
            prev_tree=v.prev_tree,
            new_tree=v.honest_tree,
        )
        self._tx("proveNorm", gid, args)
        self.moves.append("proveNorm")
        return 1

    def _revealed_prev_proof(self, gid: int) -> list[bytes]:
        chain = self.games.chain
        logs = chain.logs(
            self.games.address, [_NORM_TOPIC, gid.to_bytes(32, "big")], 0, chain.block_number()
        )
        _, _, proof = abi_decode(["bytes32", "bytes32", "bytes32[]"], logs[-1].data)
        return [bytes(n) for n in proof]

    def _challenger_move(self, gid: int, g: Any, kind: int) -> int:
        if kind in (NORM_LEAF, NORM_DESCENT):
            return self._norm_challenger_move(gid, g, kind)
        if kind == LEAF:
            j = int(g[8])
            if bytes(g[9]) == self.view.honest_tree.leaves[j]:
                return 0  # the chunk is correct after all: let the clock settle it
            self._tx("prove", gid, self.view.step(j))
            self.moves.append("prove")
            return 1
        if kind == DESCENT:
            level, index = int(g[10]), int(g[7])
            nodes = self._revealed_nodes(gid)
            pick = descent_pick(self.view.honest_tree, level, index, nodes)
            self._tx("pickNode", gid, nodes, 0 if pick is None else pick)
            self.moves.append("pickNode")
            return 1
        return 0

    def _revealed_nodes(self, gid: int) -> list[bytes]:
        chain = self.games.chain
        logs = chain.logs(
            self.games.address, [_NODES_TOPIC, gid.to_bytes(32, "big")], 0, chain.block_number()
        )
        _, _, _, nodes = abi_decode(["uint256", "uint256", "uint256", "bytes32[]"], logs[-1].data)
        return [bytes(n) for n in nodes]

    def withdraw(self) -> int:
        """Pull this player's credits; returns the amount (0 if none)."""
        amount = int(self.games.view("credits", self.account.address))
        if amount:
            self._tx("withdraw")
        return amount

    def _tx(self, name: str, *args: Any, value: int = 0) -> Any:
        receipt = self.games.tx(self.account, name, *args, value=value)
        ref = args[0] if args and isinstance(args[0], int) else -1
        self.log.append((name, ref, int(receipt["gasUsed"])))
        return receipt
