"""An aggregator node's side of the fault-proof games across rounds (``--dispute fault-proof``
or ``both``, docs/fault-proof.md).

:class:`FaultAgent` sits beside an :class:`~aggregators.node.AggregatorNode` and keeps one
:class:`~aggregators.fault_player.FaultPlayer` per submission it takes part in:

* as the chosen aggregator, :meth:`FaultAgent.claim` posts a claim for the state it publishes
  (a Byzantine aggregator claims the state its behaviour published: it can only reveal the
  tree of what it claimed, so a lie is refuted or loses on its clock);
* as a committee member, :meth:`FaultAgent.watch` checks another member's claim against its
  own re-execution and, if they differ, opens a game (a leaf game on the first differing chunk
  when the published state can be fetched, else a descent) - unless its behaviour spares the
  submitter (a colluding partner) or never challenges; a frivolous member opens a leaf game
  on an honest claim;
* :meth:`FaultAgent.play` makes every move due on every game it is in (reveal, pick, prove,
  defend, post, timeout) and withdraws what a settled game credited it.

The round a step replays is built by :func:`round_view` from the inputs every honest member
holds: the previous state, every registered update in registration order (an update the task
did not include, or that is invalid, is excluded, its row the zero vector) and the registered
weights. The not-included set is the TASK's (``includedUpdates``), never a node's own view:
the claim declares it and the task checks the declaration, so no exclusion game can be opened
on it. An honest member attests only a payload that decodes to the vector its client signed
(:func:`matches_commitment`), so an included update is excluded only when it is provably bad.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np
from eth_account.signers.local import LocalAccount

from adapters.contract import TaskContract
from adapters.faultproof import FaultGamesContract
from adapters.records import UpdateEntry
from aggregators.execution import privacy_of
from aggregators.fault_player import FaultPlayer, RoundView
from aggregators.faultproof import StepRule, excluded_hash, fault_params_hash, norm_tree
from protocol.errors import CodecError, ConfigError, FedchainError
from protocol.manifest import TaskManifest
from protocol.merkle import ChunkTree, vector_root
from protocol.payloads import decode_global_state, decode_update_bit

__all__ = [
    "FaultAgent",
    "GameMove",
    "check_fault_params",
    "fault_params_hash_of",
    "matches_commitment",
    "round_view",
]

_CHALLENGER_MOVES = (
    "openLeaf",
    "openDescent",
    "openNormLeaf",
    "openNormDescent",
    "pickNode",
    "prove",
    "proveNorm",
)
_SUBMITTER_MOVES = (
    "postClaim",
    "commitNorm",
    "revealLeaf",
    "revealNormLeaf",
    "revealNodes",
    "defendExclusion",
    "postChunk",
)


@dataclass(frozen=True)
class GameMove:
    """One transaction an agent sent in a game (for the event log and the dashboard)."""

    round: int
    attempt: int
    move: str
    ref: int  # the game id (the claim id for postClaim / openLeaf / openDescent)
    gas: int
    role: str  # "submitter" | "challenger"


def _decode_row(manifest: TaskManifest, round_: int, payload: bytes) -> np.ndarray | None:
    """The update vector ``payload`` carries (None: undecodable)."""
    try:
        row = decode_update_bit(
            manifest.layout, manifest.numeric, round_, payload, privacy_of(manifest).adaptive_clip
        )[0]
    except CodecError:
        return None
    return np.asarray(row, np.int32)


def matches_commitment(
    manifest: TaskManifest, round_: int, payload: bytes, chunk_root: bytes
) -> bool:
    """Whether ``payload`` decodes to the vector whose chunk root its client signed (U_i):
    what an honest member of a fault-proof task checks before attesting it. A payload that
    does not is never included (fewer than f + 1 attestations), so the submitter excludes it
    as the task's decision, which no exclusion game can overturn."""
    row = _decode_row(manifest, round_, payload)
    return row is not None and vector_root(row) == bytes(chunk_root)


def fault_params_hash_of(manifest: TaskManifest) -> bytes:
    """The step parameters' hash a task running ``manifest`` binds its claims to (the rule
    and its beta, the model dimension, the value bound; ``setFaultGames``)."""
    rule = StepRule.of(manifest.rule, dict(manifest.rule_params))
    return fault_params_hash(rule, manifest.layout.size, int(manifest.numeric.value_bound))


def check_fault_params(task: TaskContract, manifest: TaskManifest) -> None:
    """Refuse to join a fault-proof task whose claims are bound to other step parameters
    than ``manifest``'s (``FedChainTask.faultParamsHash``): every claim this node posted
    would be refused, and games would replay a rule other than the one it runs."""
    on_chain = task.fault_params_hash()
    mine = fault_params_hash_of(manifest)
    if on_chain != mine:
        raise ConfigError(
            f"task {task.address} binds fault-proof claims to step parameters "
            f"0x{on_chain.hex()}, not this manifest's 0x{mine.hex()} (rule, beta, dimension "
            "or value bound differ): refusing to join"
        )


def round_view(
    manifest: TaskManifest,
    round_: int,
    global_payload: bytes,
    payloads: Sequence[bytes | None],
    records: Sequence[UpdateEntry],
    included: Sequence[bool] | None = None,
) -> RoundView:
    """The round as an honest member replays it: every registered record (client, digest,
    weight, signed U_i) in registration order, with its decoded payload; an update the task
    did not include (``included``: the task's ``includedUpdates``), or that is unavailable,
    undecodable or not the vector its U_i commits to, is excluded (its row is the zero
    vector; :meth:`RoundView.from_records`)."""
    prev = decode_global_state(manifest.layout, global_payload).params.astype(np.int64)
    decoded = [None if p is None else _decode_row(manifest, round_, p) for p in payloads]
    rule = StepRule.of(manifest.rule, dict(manifest.rule_params))
    bound = int(manifest.numeric.value_bound)
    return RoundView.from_records(rule, prev, records, decoded, bound, included)


class FaultAgent:
    """One aggregator's claims and challenges (see the module docstring)."""

    def __init__(
        self,
        games: FaultGamesContract,
        account: LocalAccount,
        *,
        window: int,
        claim_bond: int,
        challenger: str = "honest",
        spare: frozenset[str] = frozenset(),
    ) -> None:
        self.games = games
        self.account = account
        self.window = window
        self.claim_bond = claim_bond
        #: honest | never | frivolous (aggregators.behaviours.Behaviour.challenger)
        self.challenger = challenger
        #: submitters this agent never challenges (its colluding partners)
        self.spare = spare
        self.players: dict[tuple[int, int], FaultPlayer] = {}
        self.claims: dict[tuple[int, int], int] = {}
        self.watched: set[tuple[int, int]] = set()
        self.moves: list[GameMove] = []
        self._logged: dict[tuple[int, int], int] = {}
        self._returned = 0

    # -- submitter -------------------------------------------------------------------------

    def claim(
        self,
        round_: int,
        attempt: int,
        view: RoundView,
        state: np.ndarray,
        norm: bool = False,
        lie: str | None = None,
    ) -> int:
        """Post the claim for the state this aggregator publishes in (round, attempt); on a
        task with a stopping rule (``norm``) also commit its norm tree (``lie``: a
        ``false_stop`` / ``omit_stop`` behaviour's wrong total, FaultPlayer.commit_norm)."""
        key = (round_, attempt)
        player = self.players.setdefault(key, FaultPlayer(self.games, self.account, view))
        new = np.asarray(state, np.int64)
        cid = player.post_claim(new, self.window, self.claim_bond)
        if norm:
            player.commit_norm(cid, new, lie)
        self.claims[key] = cid
        self._drain(key)
        return cid

    # -- committee member ------------------------------------------------------------------

    def claimed_root(self, claim_id: int) -> bytes:
        """The new state root claim ``claim_id`` commits to."""
        return bytes(self.games.view("claim", claim_id)[13])

    def vouches_for(self, claim_id: int, view: RoundView) -> bool:
        """Whether this member may certify the submission bound to claim ``claim_id`` "not
        faulty". On a fault-proof task that verdict vouches for the whole submission, the
        digest AND its claim (docs/fault-proof.md, "Certificates and refutations"): a proof
        refuting the claim slashes every signer. The task fixes the claim's records,
        previous root and step parameters, so the claim is this member's own exactly when its
        new root and excluded set are those of this member's re-execution (``view``), and so
        is its norm tree when it committed one (a norm game refutes it by proof too)."""
        c = self.games.view("claim", claim_id)
        if bytes(c[13]) != view.honest_tree.root or bytes(c[15]) != excluded_hash(
            view.records()[2]
        ):
            return False
        committed = self.games.view("norm", claim_id)
        if not committed[2]:  # no norm commitment
            return True
        return bytes(committed[0]) == norm_tree(view.prev, view.honest_state).root

    def watch(
        self,
        round_: int,
        attempt: int,
        view: RoundView,
        claim_id: int,
        submitter: str,
        claimed: np.ndarray | None,
    ) -> bool:
        """Check another member's claim; open a game if this member's behaviour says so.
        ``claimed`` is the published state if it could be fetched. True if a game opened."""
        key = (round_, attempt)
        if key in self.watched or key in self.claims or self.challenger == "never":
            return False
        self.watched.add(key)
        if submitter in self.spare:
            return False
        player = self.players.setdefault(key, FaultPlayer(self.games, self.account, view))
        honest = bytes(self.games.view("claim", claim_id)[13]) == view.honest_tree.root
        if self.challenger == "frivolous":
            if not honest:
                return False  # it challenges only what it agrees with
            player._tx("openLeaf", claim_id, 0, value=int(self.games.view("challengeBond")))
            player.watched.add(claim_id)
            self._drain(key)
            return True
        if claimed is not None and ChunkTree(claimed).root != bytes(
            self.games.view("claim", claim_id)[13]
        ):
            claimed = None  # the fetched bytes are not what was claimed: descend
        opened = player.watch(claim_id, claimed) is not None
        self._drain(key)
        return opened

    # -- the loop --------------------------------------------------------------------------

    def play(self, limit: int | None = None) -> list[GameMove]:
        """Every move due now on every game of this agent (at most ``limit`` transactions:
        on a chain that mines a block per transaction, each one spends a block of everyone's
        windows); returns the moves made since the last call (claims and openings included)."""
        budget = limit
        for key, player in list(self.players.items()):
            if budget is not None and budget <= 0:
                break
            start = len(player.log)

            room = partial(_room, player, start, budget)
            done = False
            try:
                player.play(budget)
                if room():
                    done = self._settle(player, room)
                if room():
                    player.withdraw()
                done = done and int(self.games.view("credits", self.account.address)) == 0
            except FedchainError as exc:  # a move refused (e.g. raced): try next block
                self.moves.append(GameMove(key[0], key[1], f"refused:{exc}", -1, 0, "-"))
            if budget is not None:
                budget -= len(player.log) - start
            self._drain(key)
            if done:  # nothing can change on its claims any more: stop polling them
                del self.players[key]
        new, self._returned = self.moves[self._returned :], len(self.moves)
        return new

    def _settle(self, player: FaultPlayer, room: Callable[[], bool]) -> bool:
        """Release this agent's settled, unrefuted claims (the bond comes back as credit);
        True once nothing can change on the player's claims any more."""
        block = self.games.chain.block_number() + 1  # the block a transaction lands in
        done = True
        for cid in sorted(set(player.claimed) | player.watched):
            c = self.games.view("claim", cid)
            window_end, open_games, refuted, released = int(c[5]), int(c[6]), c[8], c[9]
            closed = open_games == 0 and (refuted or block > window_end)
            if closed and cid in player.claimed and not refuted and not released and room():
                player._tx("release", cid)
                released = True
            done &= closed and (refuted or released or cid not in player.claimed)
        return done

    def refuted(self, claim_id: int) -> bool:
        return bool(self.games.view("refuted", claim_id))

    def settled(self, claim_id: int) -> bool:
        return bool(self.games.view("settled", claim_id))

    def _drain(self, key: tuple[int, int]) -> None:
        player = self.players[key]
        start = self._logged.get(key, 0)
        for name, ref, gas in player.log[start:]:
            role = "-"
            if name in _CHALLENGER_MOVES:
                role = "challenger"
            elif name in _SUBMITTER_MOVES:
                role = "submitter"
            if name == "postClaim":
                ref = self.claims.get(key, ref)
            self.moves.append(GameMove(key[0], key[1], name, ref, gas, role))
        self._logged[key] = len(player.log)


def _room(player: FaultPlayer, start: int, budget: int | None) -> bool:
    """May ``player`` send one more transaction within ``budget`` (counted from ``start``)?"""
    return budget is None or len(player.log) - start < budget
