// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";
import {Quorums} from "./lib/Quorums.sol";
import {Availability} from "./lib/Availability.sol";
import {EquivocationEvidence} from "./lib/EquivocationEvidence.sol";
import {FedChainTaskStorage, IFaultGamesHook} from "./FedChainTaskStorage.sol";

/// @title TaskDisputes
/// @notice The dispute path of a FedChainTask (`challenge`, `resolveDispute`,
///         `expireDispute`, `slashEquivocation`), in a contract of its own so that the task
///         stays under the EIP-170 code size limit. Each task creates one in its constructor
///         and runs these functions in it by DELEGATECALL (`FedChainTask._delegateToDisputes`):
///         the code below reads and writes the task's storage (the layout both inherit from
///         `FedChainTaskStorage`), emits its events from the task's address, and credits and
///         holds value in the task's balance. Its functions have the task's signatures, so the
///         task forwards its calldata unchanged.
/// @dev    Called directly, each function reverts with `NotDelegated`: the module's own
///         storage is never used (it would be an unstarted task's anyway).
// Slither's locked-ether: `challenge` is payable because the task forwards its msg.value
// (the challenge bond) with the DELEGATECALL; that value is the task's balance (and its
// `credits`), never this contract's: called directly, `onlyDelegated` reverts, so no ether
// can reach this contract.
// slither-disable-next-line locked-ether
contract TaskDisputes is FedChainTaskStorage {
    /// @notice A TaskDisputes function was called other than by DELEGATECALL from its task.
    error NotDelegated();

    /// @dev The task that created this module: the only context its functions run in.
    address private immutable _task;

    /// @param cfg The creating task's parameters (the same immutables as the task's).
    /// @param evidence The creating task's equivocation-evidence checker.
    constructor(TaskConfig memory cfg, EquivocationEvidence evidence) FedChainTaskStorage(cfg, evidence) {
        _task = msg.sender;
    }

    /// @dev Reverts unless this code runs in its task's context (DELEGATECALL from the task).
    modifier onlyDelegated() {
        // INVARIANT: the dispute path only ever acts on its task's storage.
        if (address(this) != _task) revert NotDelegated();
        _;
    }

    /// @notice Body of `FedChainTask.challenge` (see its NatSpec), run by DELEGATECALL.
    function challenge(uint256 round) external payable onlyDelegated {
        // INVARIANT: a finalized round is immutable.
        if (_rounds[round].status == Phase.Finalized) revert RoundAlreadyFinalized(round);
        RoundState storage rs = _currentRoundState(round);
        Phase status = rs.status;
        // INVARIANT: at most one open dispute per submission.
        if (status == Phase.Disputed) revert DisputeOpen(round, rs.challenger);
        // INVARIANT: only a submitted aggregate can be challenged.
        if (status != Phase.Submitted) revert NoAggregateSubmitted(round);
        uint256 challengeDeadline = uint256(rs.submitBlock) + _challengeWindow;
        // INVARIANT: challenges are allowed iff block.number <= challengeDeadline (finalize
        // needs block.number > challengeDeadline), so the two never overlap.
        if (block.number > challengeDeadline) revert ChallengeWindowClosed(round, challengeDeadline);
        AggregatorState storage info = _aggregatorState[msg.sender];
        // INVARIANT: only committee members challenge (they are the PBFT replicas).
        if (!info.registered) revert NotAggregator(msg.sender);
        // INVARIANT: a slashed member has no say in disputes any more.
        if (info.slashed) revert AggregatorIsSlashed(msg.sender);
        // INVARIANT: nobody disputes its own aggregate.
        if (info.index == rs.aggregatorIndex) revert ChallengerIsSubmitter(msg.sender);
        uint256 bit = 1 << info.index;
        // INVARIANT: one challenge per member per submission (a frivolous challenger cannot
        // hold a good aggregate up again and again).
        if (rs.challengerMask & bit != 0) revert AlreadyChallenged(round, msg.sender);
        // INVARIANT: every challenge is backed by exactly the configured bond.
        if (msg.value != _challengeBond) revert WrongValue(_challengeBond, msg.value);

        rs.status = Phase.Disputed;
        rs.challengerMask |= bit;
        rs.challenger = msg.sender;
        rs.challengeBlock = _blockNow();
        emit Challenged(round, rs.attempt, msg.sender, rs.aggregateDigest);
    }

    /// @notice Body of `FedChainTask.resolveDispute` (see its NatSpec), run by DELEGATECALL.
    function resolveDispute(
        uint256 round,
        uint256 attempt,
        bool faulty,
        uint256 viewNumber,
        bytes[] calldata signatures
    ) external onlyDelegated {
        RoundState storage rs = _currentRoundState(round);
        // INVARIANT: a verdict needs an open dispute.
        if (rs.status != Phase.Disputed) revert NoOpenDispute(round);
        // INVARIANT: a certificate only settles the submission it was made for.
        if (attempt != rs.attempt) revert AttemptMismatch(round, rs.attempt, attempt);
        uint256 disputeDeadline = uint256(rs.challengeBlock) + _disputeTimeout;
        // INVARIANT: resolveDispute is allowed iff block.number <= disputeDeadline and
        // expireDispute iff block.number > disputeDeadline, so the two never overlap.
        if (block.number > disputeDeadline) revert DisputeTimedOut(round, disputeDeadline);
        _verifyCertificate(_verdictDigest(round, attempt, rs.aggregateDigest, faulty, viewNumber), signatures);

        address challenger = rs.challenger;
        rs.challenger = address(0);
        rs.challengeBlock = 0;
        if (faulty) {
            _rejectAggregate(round, rs, challenger, viewNumber);
        } else {
            _upholdAggregate(round, rs, challenger, viewNumber);
        }
    }

    /// @notice Body of `FedChainTask.expireDispute` (see its NatSpec), run by DELEGATECALL.
    function expireDispute(uint256 round) external onlyDelegated {
        RoundState storage rs = _currentRoundState(round);
        // INVARIANT: only an open dispute can expire.
        if (rs.status != Phase.Disputed) revert NoOpenDispute(round);
        uint256 disputeDeadline = uint256(rs.challengeBlock) + _disputeTimeout;
        // INVARIANT: expiry needs block.number > disputeDeadline (see resolveDispute).
        if (block.number <= disputeDeadline) revert DisputeNotTimedOut(round, disputeDeadline);

        address submitter = _aggregators[rs.aggregatorIndex];
        address challenger = rs.challenger;
        uint32 attempt = rs.attempt;
        uint256 burned = _challengeBond;
        rs.challenger = address(0);
        rs.challengeBlock = 0;
        // INVARIANT: an aggregate whose dispute expired is never finalized.
        _reopen(rs);
        // Nothing was proven: the submitter's bond comes back; the challenge bond is burned
        // (never paid to anyone, so neither side can profit from stalling the committee).
        _credit(submitter, _aggregateBond);
        _credit(_BURN, burned);
        emit DisputeExpired(round, attempt, submitter, challenger, burned);
    }

    /// @notice Body of `FedChainTask.slashEquivocation` (see its NatSpec), run by DELEGATECALL.
    function slashEquivocation(
        uint8 kind,
        uint256 viewNumber,
        uint256 seq,
        SignedVote calldata a,
        SignedVote calldata b
    ) external onlyDelegated {
        // The evidence checks (kind, conflict, both signatures, one signer, the caller's
        // commitment at least one block old) run in `_evidence`, which takes this call's
        // arguments as they are (same signature) with the caller appended.
        (seq, a, b); // forwarded in msg.data
        // slither-disable-next-line low-level-calls
        (bool ok, bytes memory ret) = address(_evidence).staticcall(abi.encodePacked(msg.data, msg.sender));
        if (!ok) {
            assembly ("memory-safe") {
                revert(add(ret, 32), mload(ret))
            }
        }
        address signer = abi.decode(ret, (address));
        // INVARIANT: only committee members can be slashed.
        if (!_aggregatorState[signer].registered) revert SignerNotMember(0, signer);
        AggregatorState storage info = _aggregatorState[signer];
        // INVARIANT: a member is slashed at most once.
        if (info.slashed) revert AggregatorIsSlashed(signer);

        _restartAttemptOf(signer);
        uint256 amount = info.stake;
        uint256 reward = amount / 2;
        info.stake = 0;
        info.slashed = true;
        _credit(msg.sender, reward);
        _credit(_BURN, amount - reward);
        emit Slashed(signer, amount);
        emit EquivocationSlashed(signer, kind, viewNumber, msg.sender, reward, amount - reward);
    }

    // ------------------------------------------------------------------------------------
    // Fault-proof hooks (issue 22)
    // ------------------------------------------------------------------------------------

    /// @notice Body of `FedChainTask.setFaultGames` (see its NatSpec), run by DELEGATECALL.
    function setFaultGames(address games, bytes32 initialStateRoot, bytes32 paramsHash)
        external
        onlyOwner
        onlyDelegated
    {
        // INVARIANT: the dispute mode is fixed before anyone stakes on the task and never
        // changes: a member joins knowing which games contract can get it slashed.
        if (_aggregators.length != 0 || address(_faultGames) != address(0)) revert FaultGamesFixed();
        // INVARIANT: a fault-proof task names a games contract.
        if (games == address(0)) revert NoFaultGames();
        // INVARIANT: a fault-proof task has an included set (f + 1 attestations), so every
        // update an honest submitter excludes is either not included or provably bad.
        if (_attestWindow == 0) revert AttestWindowRequired(0);
        _faultGames = IFaultGamesHook(games);
        _faultProof = true;
        _stateRoots[0] = initialStateRoot;
        _faultParamsHash = paramsHash;
        emit FaultGamesSet(games, initialStateRoot, paramsHash);
    }

    /// @notice Body of `FedChainTask.setStopRule` (see its NatSpec), run by DELEGATECALL.
    function setStopRule(uint256 thresholdSq, uint256 patience) external onlyOwner onlyDelegated {
        // INVARIANT: fixed on a fault-proof task before anyone stakes, once, and non-zero.
        if (!_faultProof) revert NoFaultGames();
        if (_aggregators.length != 0 || _stopPatience != 0 || thresholdSq == 0 || patience == 0) {
            revert BadStopRule(thresholdSq, patience);
        }
        _stopThresholdSq = thresholdSq;
        _stopPatience = patience;
        emit StopRuleSet(thresholdSq, patience);
    }

    /// @notice Body of `FedChainTask.submitAggregateWithClaim` (see its NatSpec), run by
    ///         DELEGATECALL.
    function submitAggregateWithClaim(uint256 round, bytes32 digest, uint256 claimId)
        external
        payable
        onlyDelegated
    {
        IFaultGamesHook games = _faultGames;
        // INVARIANT: claims are bound on fault-proof tasks only.
        if (address(games) == address(0)) revert NoFaultGames();
        RoundState storage rs = _currentRoundState(round);
        // One view answers every hook; binding needs all but the new root and `settled`.
        // slither-disable-next-line unused-return
        (address submitter, bytes32 prevRoot,, uint256 records, uint256 windowEnd,, bool isRefuted) =
            games.claimHook(claimId);
        // INVARIANT: a claim binds its own submitter only.
        if (submitter != msg.sender) revert ClaimMismatch(claimId, 1);
        // INVARIANT: a claim starts from the last finalized state.
        if (prevRoot != _stateRoots[round - 1]) revert ClaimMismatch(claimId, 2);
        // INVARIANT: a claim lists exactly the round's registered updates, in order, with the
        // digests, weights and U_i their clients signed (same accumulator, same count).
        if (records != (((_liveAccumulators[round % 2] ^ _ACCUMULATOR_MARK) << 32) | rs.updateCount)) {
            revert ClaimMismatch(claimId, 3);
        }
        // INVARIANT: games on the claim can be opened at least until the challenge deadline.
        if (windowEnd < block.number + _challengeWindow) revert ClaimMismatch(claimId, 4);
        // INVARIANT: a refuted claim backs no aggregate.
        if (isRefuted) revert ClaimMismatch(claimId, 5);
        uint256[] memory unincluded = _checkParams(games, claimId);
        bool stop = _stopPatience != 0 && _stopOf(round, rs.attempt, claimId, games);
        rs = _submitAggregate(round, digest, stop);
        // INVARIANT: the claim declares not included exactly the updates outside the round's
        // included set (fixed now: `_submitAggregate` runs only once availability is fixed).
        if (!_isUnincludedSet(round, rs, unincluded)) revert ClaimMismatch(claimId, 8);
        uint256 attempt = rs.attempt;
        _boundClaims[round][attempt] = ((claimId + 1) << 192) | uint192(uint256(digest));
        emit AggregateClaimed(round, attempt, claimId);
    }

    /// @dev Checks claim `claimId`'s step parameters against the task's; returns the records
    ///      it declares not included.
    function _checkParams(IFaultGamesHook games, uint256 claimId) private view returns (uint256[] memory) {
        (uint8 rule, bytes32 paramsHash, uint256[] memory unincluded) = games.claimBinding(claimId);
        // INVARIANT: a claim is replayed under the task's own rule (when the task names one).
        if (_ruleId != bytes32(0) && _ruleId != _stepRuleName(rule)) revert ClaimMismatch(claimId, 6);
        // INVARIANT: a claim is replayed under the task's own beta, dimension and value bound.
        if (paramsHash != _faultParamsHash) revert ClaimMismatch(claimId, 7);
        return unincluded;
    }

    /// @dev Whether `declared` (bitmap words) is exactly the complement, within the round's
    ///      `updateCount` records, of its included set: the updates attested by at least
    ///      f + 1 of the n members (as `FedChainTask.includedUpdates`, here from the task's
    ///      own storage; a member that did not attest has no bits).
    function _isUnincludedSet(uint256 round, RoundState storage rs, uint256[] memory declared)
        private
        view
        returns (bool)
    {
        uint256 count = rs.updateCount;
        uint256 words = (count + 255) >> 8;
        if (declared.length != words) return false;
        uint256 n = _committeeSize;
        uint256 threshold = Quorums.maxFaulty(n) + 1;
        uint256 attested = rs.attestMask;
        for (uint256 w = 0; w < words; ++w) {
            // memory arrays start zeroed: the count of every update starts at 0
            // slither-disable-next-line uninitialized-local
            uint256[9] memory counter;
            for (uint256 m = 0; m < n; ++m) {
                if ((attested >> m) & 1 == 1) Availability.add(counter, _attestations[round][m][w]);
            }
            uint256 bits = count - 256 * w;
            uint256 valid = bits >= 256 ? type(uint256).max : (uint256(1) << bits) - 1;
            if (declared[w] != (~Availability.atLeast(counter, threshold) & valid)) return false;
        }
        return true;
    }

    /// @dev The stop counter after `round` from the claim's committed norm (the games make it
    ///      the honest one): unchanged for a carried round (nothing included), +1 when quiet,
    ///      else 0; the round stops the task when the counter reaches the patience.
    function _stopOf(uint256 round, uint256 attempt, uint256 claimId, IFaultGamesHook games)
        private
        returns (bool stop)
    {
        (bool set, uint256 normSq, bool empty) = games.claimNorm(claimId);
        // INVARIANT: a stop task's claim commits the round's squared update norm.
        if (!set) revert ClaimMismatch(claimId, 9);
        uint256 count = _stopCounts[round - 1];
        if (!empty) count = normSq < _stopThresholdSq ? count + 1 : 0;
        _stopCounts[round] = count;
        stop = !empty && count >= _stopPatience;
        emit StopCounted(round, attempt, count, stop);
    }

    /// @dev The task-level rule id (sha256 of the rule's name, `aggregators.registry.rule_id`)
    ///      of `OneStepMath` rule `rule`; zero for none.
    function _stepRuleName(uint8 rule) private pure returns (bytes32) {
        if (rule == 0) return 0x093126d47a689c67dc5e5900a47bb7f340fec65d080441f5c612283f72954b23; // "fedavg"
        if (rule == 1) return 0xe84ce8dc672d4f8e9a894073a3e8eb44081675eacfcdeab3f346efa82d25806c; // "fedprox"
        if (rule == 2) return 0x7896a617a785dd968b580c61a2b418ae7ea28ecb713a3650178971519c566c4e; // "median"
        if (rule == 3) return 0x523bc08b0951406df53bccf6d2066dc6c94b47953acb21d358185887a2afa92f; // "trimmed_mean"
        return bytes32(0);
    }

    /// @notice Body of `FedChainTask.rejectRefuted` (see its NatSpec), run by DELEGATECALL.
    function rejectRefuted(uint256 round) external onlyDelegated {
        RoundState storage rs = _currentRoundState(round);
        Phase status = rs.status;
        // INVARIANT: only a standing submission can be discarded.
        if (status != Phase.Submitted && status != Phase.Disputed) revert NoAggregateSubmitted(round);
        uint32 attempt = rs.attempt;
        uint256 claimId = _boundClaimId(round, attempt);
        // One view answers every hook; only `refuted` matters here.
        // slither-disable-next-line unused-return
        (,,,,,, bool isRefuted) = _faultGames.claimHook(claimId);
        // INVARIANT: only a refuted claim discards its aggregate here.
        if (!isRefuted) revert ClaimNotRefuted(round, claimId);

        address challenger = rs.challenger;
        address submitter = _aggregators[rs.aggregatorIndex];
        AggregatorState storage sub = _aggregatorState[submitter];
        uint256 slashedAmount = sub.stake + _aggregateBond;
        sub.stake = 0;
        sub.slashed = true;
        rs.challenger = address(0);
        rs.challengeBlock = 0;
        // INVARIANT: a refuted aggregate never counts; the next attempt starts now.
        _reopen(rs);
        // an open PBFT challenge was right: its bond comes back
        if (status == Phase.Disputed) _credit(challenger, _challengeBond);
        // INVARIANT: the caller gains nothing: the slashed submitter could call this itself.
        // The refuter is paid by FaultGames (the claim's bond); the whole stake is burned.
        _credit(_BURN, slashedAmount);
        emit Slashed(submitter, slashedAmount);
        emit RefutedAggregateRejected(round, attempt, claimId, msg.sender, slashedAmount, 0, slashedAmount);
    }

    /// @notice Body of `FedChainTask.slashRefutedCertificate` (see its NatSpec), run by
    ///         DELEGATECALL.
    function slashRefutedCertificate(
        uint256 round,
        uint256 attempt,
        bytes32 aggregateDigest,
        uint256 viewNumber,
        bytes[] calldata signatures
    ) external onlyDelegated {
        uint256 packed = _boundClaims[round][attempt];
        // INVARIANT: only a certificate about a claimed submission, naming its digest, counts.
        if (packed == 0 || uint192(packed) != uint192(uint256(aggregateDigest))) {
            revert ClaimNotBound(round, attempt);
        }
        uint256 claimId = (packed >> 192) - 1;
        IFaultGamesHook games = _faultGames;
        // One view answers every hook; only `refuted` matters here.
        // slither-disable-next-line unused-return
        (,,,,,, bool isRefuted) = games.claimHook(claimId);
        // INVARIANT: signers are slashed only when the claim is refuted ...
        if (!isRefuted) revert ClaimNotRefuted(round, claimId);
        // INVARIANT: ... BY PROOF: a timeout (the submitter missed a move) shows nothing
        // about the aggregate, so it never contradicts a "not faulty" certificate.
        if (!games.refutedByProof(claimId)) revert ClaimNotProvenFaulty(round, claimId);
        (uint256 total, uint256 slashedSigners) =
            _slashSigners(_verdictDigest(round, attempt, aggregateDigest, false, viewNumber), signatures);
        // INVARIANT: a certificate slashes once.
        if (slashedSigners == 0) revert CertificateAlreadySlashed(round, attempt);
        // INVARIANT: the caller gains nothing: a slashed signer could report its own
        // certificate. Every slashed stake is burned.
        _credit(_BURN, total);
        emit RefutedCertificateSlashed(round, attempt, claimId, viewNumber, msg.sender, slashedSigners, 0, total);
    }

    // ------------------------------------------------------------------------------------
    // Task-level data-availability game (issue 22)
    // ------------------------------------------------------------------------------------

    /// @dev Bytes of one registered update record in `UpdatesRegistered.entries`: client (20)
    ///      || digest (32) || numSamples (8, big-endian) || chunkRoot (32, U_i).
    uint256 private constant _ENTRY_BYTES = 92;

    /// @notice Task-level data-availability game (issue 22), reached through the task's
    ///         fallback: says included update `index` of `round` is unavailable to the caller,
    ///         a committee member that did not attest it, bonding exactly `challengeBond`.
    ///         Allowed once the included set is fixed, while the round has no submission or
    ///         its challenge window is open, one open challenge per round; `finalize` waits
    ///         until it is answered or expired. Anyone holding the update then has
    ///         `disputeTimeout` blocks to post chunk `j` (`answerAvailability`), else
    ///         `expireAvailability` drops it.
    /// @param entries The round's registered records as its `UpdatesRegistered` events carry
    ///        them (92 bytes each, concatenated, in order): checked against the round's
    ///        accumulator, they give the update's U_i.
    /// @dev No `onlyDelegated` (code size): called directly, it reads the module's own storage,
    ///      which no constructor wrote, so `_faultProof` is false and it reverts NoFaultGames;
    ///      `answerAvailability` and `expireAvailability` revert TaskNotStarted likewise.
    function challengeAvailability(uint256 round, uint256 index, uint256 j, bytes calldata entries)
        external
        payable
    {
        // INVARIANT: the game runs on fault-proof tasks only: under PBFT at most f members are
        // faulty, so f + 1 attesters include a correct one that serves the update.
        if (!_faultProof) revert NoFaultGames();
        RoundState storage rs = _currentRoundState(round);
        // INVARIANT: the included set is challenged only once it is fixed.
        _requireAggregating(round, rs);
        uint256 submitBlock = rs.submitBlock; // 0 unless a submission stands
        uint256 challengeDeadline = submitBlock + _challengeWindow;
        // INVARIANT: a standing submission is challenged iff block.number <= challengeDeadline
        // (finalize needs block.number > challengeDeadline).
        if (submitBlock != 0 && block.number > challengeDeadline) revert ChallengeWindowClosed(round, challengeDeadline);
        AvailabilityChallenge storage open = _availability[round];
        // INVARIANT: one open availability challenge per round.
        if (open.challenger != address(0)) revert AvailabilityChallengeOpen(round, open.index);
        AggregatorState storage info = _aggregatorState[msg.sender];
        // INVARIANT: only unslashed committee members challenge (they are the ones who must
        // fetch; a slashed member has no say in what is included).
        if (!info.registered || info.slashed) revert NotAggregator(msg.sender);
        // INVARIANT: every challenge is backed by exactly the configured bond.
        if (msg.value != _challengeBond) revert WrongValue(_challengeBond, msg.value);
        // INVARIANT: only an update in the included set (>= f + 1 attesters; bits past the
        // update count are never set, so an index past it has none) with a U_i to open
        // against (a hidden update's is zero) is challenged, never by one of its attesters
        // (each claims to hold it).
        (uint256 attesters,) = _attesters(round, index, false);
        (entries); // read by FaultGames.entriesRoot from this call's calldata
        bytes32 root = _chunkRootOf(round);
        if (attesters <= Quorums.maxFaulty(_committeeSize) || root == bytes32(0)) revert NotIncluded(round, index);
        if (_attestations[round][info.index][index >> 8] & (1 << (index & 255)) != 0) {
            revert ChallengerAttested(round, index, msg.sender);
        }

        // the struct's first slot in one write (its packing: challenger | openBlock << 160 |
        // index << 200 | j << 232); index < updateCount < 2**32 (it has attesters), and a j
        // past the vector is answered modulo its chunk count, so j mod 2**24 asks alike
        uint256 packed = uint256(uint160(msg.sender)) | (uint256(_blockNow()) << 160) | (index << 200)
            | ((j & 0xffffff) << 232);
        assembly ("memory-safe") {
            sstore(open.slot, packed)
        }
        open.chunkRoot = root;
        emit AvailabilityChallenged(round, index, j, msg.sender);
    }

    /// @notice Answers the open availability challenge of `round` (anyone, within
    ///         `disputeTimeout` blocks of it): `chunk` is chunk j (1,024 bytes) of the update's
    ///         `dim`-coordinate vector and `proof` its Merkle proof against U_i (for a j past
    ///         the last chunk: `chunk` empty and `proof` the tree's top node). The chunk is
    ///         emitted in full (`ChunkAvailable`) and the challenge bond credited to the caller.
    function answerAvailability(uint256 round, uint64 dim, bytes calldata chunk, bytes32[] calldata proof) external {
        (proof); // read by FaultGames.verifyChunk from this call's calldata
        AvailabilityChallenge storage open = _openAvailability(round, false);
        uint256 index = open.index;
        uint256 j = open.j;
        bytes32 root = open.chunkRoot;
        // INVARIANT: the answer is chunk j (j mod the vector's chunk count: a j past the last
        // chunk asks for chunk j mod ceil(dim / 256)) opened against the update's U_i, which
        // commits to `dim` as well. Checked by the task's FaultGames (`verifyChunk`, pure),
        // which holds the ChunkMerkle code (this module is at the init code size limit): this
        // call's arguments are forwarded with the round's word replaced by U_i and dim's by
        // j << 64 | dim.
        address games = address(_faultGames);
        bool ok;
        assembly ("memory-safe") {
            let p := mload(0x40)
            calldatacopy(p, 0, calldatasize())
            mstore(p, shl(224, 0xda59db3b)) // verifyChunk(bytes32,uint256,bytes,bytes32[])
            mstore(add(p, 4), root)
            mstore(add(p, 36), or(shl(64, j), dim))
            mstore(0, 0)
            ok := staticcall(gas(), games, p, calldatasize(), 0, 32)
            ok := and(ok, eq(mload(0), 1)) // read after the call (Yul evaluates right to left)
        }
        if (!ok) revert BadChunkOpening(round, index);

        delete _availability[round];
        // INVARIANT: a frivolous challenger pays the poster (covers its gas to answer).
        _credit(msg.sender, _challengeBond);
        emit ChunkAvailable(round, index, msg.sender, chunk);
    }

    /// @notice Ends an availability challenge of `round` nobody answered in time (anyone):
    ///         the update leaves the included set, every member that attested it is slashed
    ///         (half to the challenger, the rest burned; the challenger's bond comes back), a
    ///         standing submission is discarded (bond refunded unless its submitter attested
    ///         the update; an open PBFT challenge's bond refunded) and the round re-opens at
    ///         attempt + 1, so the next aggregate is computed without the update.
    function expireAvailability(uint256 round) external {
        AvailabilityChallenge storage open = _openAvailability(round, true); // current round
        RoundState storage rs = _rounds[round];
        address challenger = open.challenger;
        uint256 index = open.index;
        delete _availability[round];

        // INVARIANT: an update nobody could post leaves the included set (no attestation of
        // it counts any more), and every member that attested it is slashed.
        (, uint256 total) = _attesters(round, index, true);
        _discardStanding(rs);
        // INVARIANT: the next attempt runs without the update, from this block.
        _reopen(rs);
        // INVARIANT: the challenger gets at most half of what is slashed (a colluder
        // reporting its partners loses the other half).
        uint256 reward = total / 2;
        _credit(challenger, _challengeBond + reward);
        _credit(_BURN, total - reward);
        emit UpdateDropped(round, index, challenger, total, reward);
    }

    /// @notice The open availability challenge of `round`, through the task's fallback:
    ///         `packed` is the challenger (low 160 bits; 0: none open) | openBlock << 160 |
    ///         index << 200 | j << 232 (answers until openBlock + disputeTimeout), `chunkRoot`
    ///         the update's U_i. (Called directly it reads the module's own, empty, storage.)
    function availabilityChallenge(uint256 round) external view returns (uint256 packed, bytes32 chunkRoot) {
        AvailabilityChallenge storage open = _availability[round];
        assembly ("memory-safe") {
            packed := sload(open.slot)
            chunkRoot := sload(add(open.slot, 1))
        }
    }

    /// @dev The open availability challenge of `round`, the current round of a running task;
    ///      reverts unless one is open and (`expired`) its answer window has passed, or
    ///      (not `expired`) it is still open.
    function _openAvailability(uint256 round, bool expired) private view returns (AvailabilityChallenge storage open) {
        _currentRoundState(round);
        open = _availability[round];
        // INVARIANT: only an open challenge is answered or expires.
        if (open.challenger == address(0)) revert NoAvailabilityChallenge(round);
        uint256 deadline = uint256(open.openBlock) + _disputeTimeout;
        // INVARIANT: answers are accepted iff block.number <= deadline and expiry iff
        // block.number > deadline, so the two never overlap.
        if (expired && block.number <= deadline) revert AvailabilityNotTimedOut(round, deadline);
        if (!expired && block.number > deadline) revert AvailabilityTimedOut(round, deadline);
    }

    /// @dev Counts the members that attested update `index` of `round`; with `drop`, also
    ///      clears that bit of their attestations and slashes each not yet slashed one, and
    ///      then counts only those, returning the stakes taken as `total`.
    function _attesters(uint256 round, uint256 index, bool drop) private returns (uint256 count, uint256 total) {
        uint256 word = index >> 8;
        uint256 bit = 1 << (index & 255);
        uint256 n = _committeeSize;
        for (uint256 m = 0; m < n; ++m) {
            mapping(uint256 => uint256) storage bits = _attestations[round][m];
            uint256 value = bits[word];
            if (value & bit == 0) continue;
            if (!drop) {
                ++count;
                continue;
            }
            bits[word] = value & ~bit;
            AggregatorState storage info = _aggregatorState[_aggregators[m]];
            // INVARIANT: a member is slashed at most once.
            if (info.slashed) continue;
            uint256 amount = info.stake;
            info.stake = 0;
            info.slashed = true;
            total += amount;
            ++count;
            emit Slashed(_aggregators[m], amount);
        }
    }

    /// @dev Discards `rs`'s standing submission, if any, before the round re-opens: the
    ///      submitter's aggregate bond is refunded unless it was slashed as an attester (then
    ///      burned), and an open PBFT challenge's bond comes back (its question is moot).
    function _discardStanding(RoundState storage rs) private {
        Phase status = rs.status;
        if (status != Phase.Submitted && status != Phase.Disputed) return;
        address submitter = _aggregators[rs.aggregatorIndex];
        _credit(_aggregatorState[submitter].slashed ? _BURN : submitter, _aggregateBond);
        if (status == Phase.Disputed) {
            _credit(rs.challenger, _challengeBond);
            rs.challenger = address(0);
            rs.challengeBlock = 0;
        }
    }

    /// @dev U_i of update `index`, read from this `challengeAvailability` call's `entries`
    ///      (the round's records as the `UpdatesRegistered` events carry them, concatenated)
    ///      after checking that they are the round's: the same `ClientRecords.extendUpdates`
    ///      accumulator as the task's
    ///      (which commits to their number too). The task's FaultGames computes both
    ///      (`entriesRoot`, pure: it holds the ClientRecords code; this module is at the init
    ///      code size limit) from this call's calldata, forwarded with its selector swapped.
    function _chunkRootOf(uint256 round) private view returns (bytes32 root) {
        address games = address(_faultGames);
        uint256 acc;
        bool ok;
        assembly ("memory-safe") {
            let p := mload(0x40)
            calldatacopy(p, 0, calldatasize())
            mstore(p, shl(224, 0xd87b7b8d)) // entriesRoot(uint256,uint256,uint256,bytes); round unread
            ok := staticcall(gas(), games, p, calldatasize(), 0, 64)
            acc := mload(0)
            root := mload(32)
        }
        // INVARIANT: the records are exactly the round's registered updates, in order.
        if (!ok || acc != _liveAccumulators[round % 2] ^ _ACCUMULATOR_MARK) {
            revert EntriesMismatch(round);
        }
    }

    /// @dev Slashes every not yet slashed signer of `signatures` over `digest` (at least
    ///      commitQuorum() valid signatures by committee members in increasing address order,
    ///      slashed ones included); returns the stakes taken and how many were slashed.
    function _slashSigners(bytes32 digest, bytes[] calldata signatures)
        private
        returns (uint256 total, uint256 slashedSigners)
    {
        uint256 count = signatures.length;
        uint256 quorum = Quorums.commitQuorum(_committeeSize);
        // INVARIANT: a certificate carries at least n - f member signatures (slashed signers
        // count here: they signed it).
        if (count < quorum) revert QuorumNotReached(count, quorum);
        address previous = address(0);
        for (uint256 i = 0; i < count; ++i) {
            address signer = _certificateSigner(digest, signatures, i, previous);
            AggregatorState storage info = _aggregatorState[signer];
            previous = signer;
            // INVARIANT: a member is slashed at most once.
            if (!info.slashed) {
                _restartAttemptOf(signer);
                uint256 amount = info.stake;
                info.stake = 0;
                info.slashed = true;
                total += amount;
                ++slashedSigners;
                emit Slashed(signer, amount);
            }
        }
    }

    /// @dev The claim bound to (`round`, `attempt`); reverts on a PBFT-only task.
    function _boundClaimId(uint256 round, uint256 attempt) private view returns (uint256) {
        uint256 packed = _boundClaims[round][attempt];
        // INVARIANT: only fault-proof submissions carry a claim.
        if (packed == 0) revert NoFaultGames();
        return (packed >> 192) - 1;
    }

    /// @dev If `member` is the aggregator chosen for the current attempt of a running round
    ///      with no submission, opens attempt + 1 at this block (call before slashing it), so
    ///      the next member in rotation gets a whole submitTimeout instead of its old deadline.
    function _restartAttemptOf(address member) private {
        uint256 round = _currentRound;
        if (!_started || _completed) return;
        RoundState storage rs = _rounds[round];
        if (rs.status != Phase.Pending || !_collectionClosed(rs) || !_availabilityFixed(rs)) return;
        (address chosen,,) = _chosen(round, rs);
        if (chosen != member) return;
        uint24 newAttempt = rs.attempt + 1;
        rs.attempt = newAttempt;
        rs.attemptStart = _blockNow();
        emit AttemptAdvanced(round, newAttempt, member, 0);
    }

    /// @dev Faulty verdict: slash the submitter, split the slashed amount, re-open the round.
    function _rejectAggregate(uint256 round, RoundState storage rs, address challenger, uint256 viewNumber) private {
        address submitter = _aggregators[rs.aggregatorIndex];
        uint32 attempt = rs.attempt;
        AggregatorState storage sub = _aggregatorState[submitter];
        uint256 slashedAmount = sub.stake + _aggregateBond;
        // INVARIANT: the challenger gets at most half of what is slashed, so challenging one's
        // own aggregate through a second identity loses the other half.
        uint256 reward = slashedAmount / 2;
        uint256 treasuryAmount = slashedAmount - reward;
        sub.stake = 0;
        sub.slashed = true;
        // INVARIANT: a rejected aggregate never counts; the next attempt starts now and the
        // rotation skips the slashed submitter.
        _reopen(rs);
        _credit(challenger, _challengeBond + reward);
        _credit(_BURN, treasuryAmount);
        emit Slashed(submitter, slashedAmount);
        emit DisputeResolved(round, attempt, true, viewNumber, challenger, slashedAmount, reward, treasuryAmount);
    }

    /// @dev Not-faulty verdict: the forfeited challenge bond is burned (paying it to the
    ///      submitter would let a colluding pair stall rounds for free), the aggregate stands.
    function _upholdAggregate(uint256 round, RoundState storage rs, address challenger, uint256 viewNumber) private {
        uint256 bond = _challengeBond;
        rs.status = Phase.Submitted;
        _credit(_BURN, bond);
        emit DisputeResolved(round, rs.attempt, false, viewNumber, challenger, 0, 0, bond);
    }

    /// @dev Reverts unless `signatures` certify `digest`: all valid (OpenZeppelin ECDSA: 65
    ///      bytes, low s, v in {27, 28}), recovered signers registered and not slashed, strictly
    ///      increasing, and at least commitQuorum(n) of them (n frozen at start).
    function _verifyCertificate(bytes32 digest, bytes[] calldata signatures) private view {
        uint256 quorum = Quorums.commitQuorum(_committeeSize);
        uint256 count = signatures.length;
        // INVARIANT: a certificate carries at least n - f distinct member signatures (checked
        // up front; every entry must then be valid, so count == distinct valid signers).
        if (count < quorum) revert QuorumNotReached(count, quorum);
        address previous = address(0);
        uint256 valid = 0;
        for (uint256 i = 0; i < count; ++i) {
            address signer = _certificateSigner(digest, signatures, i, previous);
            AggregatorState storage info = _aggregatorState[signer];
            previous = signer;
            // INVARIANT: a slashed member's vote no longer counts, but it does not void the
            // others' (a signer slashed after signing cannot sink a quorum).
            if (!info.slashed) ++valid;
        }
        if (valid < quorum) revert QuorumNotReached(valid, quorum);
    }

    /// @dev The signer of certificate entry `i` over `digest`: a well-formed, non-malleable
    ///      signature of a committee member whose address is above `previous` (the entry
    ///      before it), so each member counts once. Shared by `_verifyCertificate` and
    ///      `_slashSigners`, which read the same certificates.
    function _certificateSigner(bytes32 digest, bytes[] calldata signatures, uint256 i, address previous)
        private
        view
        returns (address signer)
    {
        ECDSA.RecoverError err;
        // The third return value (the error's argument) adds nothing to `err`.
        // slither-disable-next-line unused-return
        (signer, err,) = ECDSA.tryRecoverCalldata(digest, signatures[i]);
        // INVARIANT: only well-formed, non-malleable signatures count.
        if (err != ECDSA.RecoverError.NoError) revert InvalidSignature(i, uint8(err));
        // INVARIANT: only committee members sign (a signature over other data recovers a
        // stranger).
        if (!_aggregatorState[signer].registered) revert SignerNotMember(i, signer);
        // INVARIANT: signers are strictly increasing, so each member counts once.
        if (signer <= previous) {
            if (signer == previous) revert DuplicateSigner(i, signer);
            revert SignersNotSorted(i, previous, signer);
        }
    }
}
