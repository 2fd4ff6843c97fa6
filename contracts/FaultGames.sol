// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ReentrancyGuardTransient} from "@openzeppelin/contracts/utils/ReentrancyGuardTransient.sol";
import {ChunkMerkle} from "./lib/ChunkMerkle.sol";
import {ClientRecords} from "./lib/ClientRecords.sol";
import {OneStep} from "./OneStep.sol";
import {OneStepMath} from "./lib/OneStepMath.sol";

/// @title FaultGames
/// @notice fedchain's fault-proof games beside PBFT: ONE honest party defeats a faulty
///         aggregate however many committee members sign for it. A submitter posts a claim
///         (previous and new state chunk roots, the round's update roots U_i and weights, the
///         excluded set) with a bond; while the claim's challenge window is open anyone may
///         open games against it, each with a challenger bond:
///         - leaf game: the challenger names chunk j; the submitter (or anyone holding its
///           tree) reveals its leaf j with a Merkle proof against the new root; the
///           challenger then runs the one-step check (OneStep.step), which recomputes chunk j
///           from the inputs. A different leaf refutes the claim; the same leaf reverts
///           (ChunkCorrect), so a false challenger can only let its clock run out;
///         - exclusion game: an update the claim excluded although the task included it
///           must be shown bad (a coordinate beyond the value bound, opened against its U_i)
///           by the submitter on its clock; an update the task did not include (declared
///           in the claim's `unincluded` bitmap, which the task checks against its own
///           included set) cannot be challenged; an included bad update refutes the claim
///           at once (refuteInclusion, no game needed);
///         - data-availability game: the submitter must post chunk j of an included update
///           (opened against its U_i, emitted in full) on its clock.
///         Every game runs on chess clocks (a budget of blocks per side, spent while it is
///         that side's turn); a side whose budget is spent loses via `timeout`. Payments are
///         pulled (`withdraw`). A refuted claim pays its whole bond to the first refuter and
///         refunds every other challenger; a claim whose window closed with no game open and
///         no refutation is upheld and its bond released.
/// @dev FedChainTask hooks (docs/fault-proof.md, "Hooks"): submitAggregate posts the claim
///      (its records list comes from the task's update records carrying U_i); finalize
///      requires `settled(claimId)` and refuses a refuted claim; a PBFT certificate that
///      called a refuted aggregate "not faulty" slashes its signers.
contract FaultGames is ReentrancyGuardTransient {
    /// @notice What a game is about.
    enum Kind {
        None,
        Leaf,
        Exclusion,
        Availability,
        Descent,
        NormLeaf,
        NormDescent
    }

    /// @notice Whose move it is (or that the game is over).
    enum Turn {
        Submitter,
        Challenger,
        Over
    }

    /// @notice A submitter's claim about one aggregate.
    struct Claim {
        address submitter;
        uint8 rule;
        uint64 dim;
        uint64 betaNum;
        uint64 betaDen;
        uint64 windowEnd;
        uint32 openGames;
        uint32 numRecords;
        bool refuted;
        bool released;
        uint256 bond;
        uint256 valueBound;
        bytes32 prevRoot;
        bytes32 newRoot;
        bytes32 recordsHash;
        bytes32 excludedHash;
        bytes32 inputsHash;
        uint256 accumulator;
    }

    /// @notice One game against a claim.
    struct Game {
        uint256 claimId;
        address challenger;
        Kind kind;
        Turn turn;
        uint64 turnStart;
        uint64 submitterClock;
        uint64 challengerClock;
        uint256 index;
        uint256 j;
        bytes32 leaf;
        uint256 level;
    }

    /// @notice A claim's stopping-rule commitment (docs/fault-proof.md): the root of its norm
    ///         tree over the prefix sums S_j of sum (new - prev)**2 and the total S_{n-1}.
    struct Norm {
        bytes32 root;
        uint256 sq;
        bool set;
        bool empty; // the claim includes no update (written at postClaim)
    }

    /// @notice The public parameters of a claim.
    /// @param rule OneStepMath rule id; betaNum / betaDen the trimmed-mean beta.
    /// @param dim Coordinates of the model.
    /// @param window Blocks during which games may be opened.
    /// @param valueBound Largest |q| of a valid update coordinate.
    /// @param prevRoot Chunk root of the previous state; newRoot that of the new state.
    struct ClaimParams {
        uint8 rule;
        uint64 betaNum;
        uint64 betaDen;
        uint64 dim;
        uint64 window;
        uint256 valueBound;
        bytes32 prevRoot;
        bytes32 newRoot;
    }

    /// @notice A round's update records as a claim commits to them.
    /// @param roots U_i of every registered update, in registration order.
    /// @param weights Their weights (num_samples).
    /// @param excluded Bitmap words of the updates excluded as invalid (bit i%256 of word i/256).
    struct Records {
        bytes32[] roots;
        uint256[] weights;
        uint256[] excluded;
    }

    /// @notice Who signed each of a claim's records and the digest they signed (with the
    ///         record's weight and U_i from `Records`): what the task's accumulator hashes.
    struct Signers {
        address[] clients;
        bytes32[] digests;
    }

    /// @notice Chunk `j` of one update, opened against its U_i; `lane` names a coordinate.
    struct Opening {
        uint256 j;
        bytes chunk;
        bytes32[] proof;
        uint256 lane;
    }

    /// @notice Levels of the tree a descent move covers: the submitter reveals up to
    ///         2**DESCENT_STRIDE nodes per move (a 16-ary descent).
    uint256 public constant DESCENT_STRIDE = 4;

    /// @notice The one-step checker.
    OneStep public immutable oneStep;
    /// @notice Chess-clock budget of each side of a game, in blocks.
    uint64 public immutable clockBlocks;
    /// @notice Bond of every challenge (covers the submitter's gas to answer it).
    uint256 public immutable challengeBond;

    Claim[] private _claims;
    Game[] private _games;
    /// @dev The non-zero words of each claim's `unincluded` bitmap (the records the task did
    ///      not include): a zero word is not stored, so a round the committee attested in
    ///      full costs no storage.
    mapping(uint256 claimId => mapping(uint256 word => uint256)) private _unincluded;
    mapping(address => uint256) private _credits;
    mapping(uint256 => Norm) private _norms;
    /// @dev Claims refuted BY PROOF (`prove`, `refuteInclusion`, the descent's non-empty
    ///      empty slot): their aggregate is shown wrong. A claim refuted by `timeout` (its
    ///      submitter missed a move) is refuted but not proven wrong.
    mapping(uint256 claimId => bool) private _provenFaulty;

    /// @notice A claim was posted.
    event ClaimPosted(uint256 indexed claimId, address indexed submitter, bytes32 newRoot, uint256 bond);
    /// @notice The submitter of `claimId` committed its round's squared update norm.
    event NormCommitted(uint256 indexed claimId, bytes32 normRoot, uint256 normSq);
    /// @notice Norm leaf game: the submitter revealed leaf j (`leaf`) and leaf j - 1
    ///         (`prevLeaf`, with its proof: what the challenger's norm step opens).
    event NormLeavesRevealed(uint256 indexed gameId, bytes32 leaf, bytes32 prevLeaf, bytes32[] prevProof);
    /// @notice The norm step recomputed S_j (leaf `leaf`), unlike the submitter's leaf.
    event NormProven(uint256 indexed gameId, uint256 j, uint256 sum, bytes32 leaf);
    /// @notice A game was opened against `claimId`.
    event GameOpened(uint256 indexed gameId, uint256 indexed claimId, address challenger, Kind kind, uint256 index, uint256 j);
    /// @notice Descent: the submitter revealed `nodes`, the children `levels` levels below
    ///         node `index` of level `level` (the bytes to pick from).
    event NodesRevealed(uint256 indexed gameId, uint256 level, uint256 index, uint256 levels, bytes32[] nodes);
    /// @notice Descent: the challenger picked node `index` of level `level`.
    event NodePicked(uint256 indexed gameId, uint256 level, uint256 index, bytes32 node);
    /// @notice The submitter's leaf j was revealed.
    event LeafRevealed(uint256 indexed gameId, bytes32 leaf);
    /// @notice The one-step check recomputed chunk `j` as `chunk` (leaf `leaf`), unlike the
    ///         submitter's leaf.
    event StepProven(uint256 indexed gameId, uint256 j, bytes32 leaf, bytes chunk);
    /// @notice An excluded update was shown bad at `j`, lane `lane`.
    event ExclusionDefended(uint256 indexed gameId, uint256 j, uint256 lane);
    /// @notice Chunk `j` of included update `index` was made available (bytes in full).
    event ChunkPosted(uint256 indexed gameId, uint256 index, uint256 j, bytes chunk);
    /// @notice A game ended; `challengerWon` says who won.
    event GameResolved(uint256 indexed gameId, bool challengerWon);
    /// @notice `claimId` was refuted by `by` (game `gameId`, or type(uint256).max for an
    ///         inclusion refutation); `byProof`: by a proof (one-step, a bad included update,
    ///         a non-empty empty slot), not by the submitter's timeout.
    event ClaimRefuted(uint256 indexed claimId, address indexed by, uint256 gameId, bool byProof);
    /// @notice An upheld claim's bond was released to its submitter.
    event ClaimReleased(uint256 indexed claimId);
    /// @notice `account` pulled `amount` wei.
    event Withdrawal(address indexed account, uint256 amount);

    /// @notice No claim or game with this id.
    error UnknownId(uint256 id);
    /// @notice The claim's parameters are malformed.
    error BadClaim(uint256 roots, uint256 weights);
    /// @notice A claim the one-step check could not replay (`why`: 0 rule, 1 beta,
    ///         2 too many records, 3 a weight above 2**64 - 1).
    error UnprovableClaim(uint256 why);
    /// @notice Word `word` of a claim's `unincluded` bitmap declares records (`bits`) the
    ///         claim does not exclude: an update the task did not include is never an input.
    error UnincludedNotExcluded(uint256 word, uint256 bits);
    /// @notice The bond sent is not the one required.
    error WrongBond(uint256 sent, uint256 required);
    /// @notice A challenge naming a chunk or an update that does not exist.
    error BadChallenge(Kind kind, uint256 index, uint256 j);
    /// @notice The claim's challenge window closed at `windowEnd`.
    error WindowClosed(uint256 claimId, uint256 windowEnd);
    /// @notice The claim is already refuted (or released).
    error ClaimClosed(uint256 claimId);
    /// @notice It is not `caller`'s move in `gameId` (or the game is over).
    error NotYourMove(uint256 gameId, address caller);
    /// @notice The side to move spent its budget; only `timeout` remains.
    error ClockExpired(uint256 gameId, uint256 elapsed, uint256 budget);
    /// @notice `timeout` while the side to move still has budget.
    error ClockRunning(uint256 gameId, uint256 elapsed, uint256 budget);
    /// @notice A move of the wrong kind for the game.
    error WrongGame(uint256 gameId, Kind kind);
    /// @notice A leaf opening that does not verify against the claim's new root.
    error BadLeafProof(uint256 gameId, uint256 j);
    /// @notice The records list does not match the claim.
    error RecordsMismatch(uint256 claimId);
    /// @notice The step's public parameters are not the claim's.
    error StepMismatch(uint256 gameId);
    /// @notice The one-step check agrees with the submitter's leaf: the chunk is correct.
    error ChunkCorrect(uint256 gameId, uint256 j);
    /// @notice Update `index` is not excluded (exclusion games) or is excluded (others).
    error WrongMembership(uint256 index, bool excluded);
    /// @notice The chunk opening of update `index` fails.
    error BadUpdateProof(uint256 index, uint256 j);
    /// @notice Lane `lane` of the opened chunk is within the value bound (or is padding).
    error NotBad(uint256 index, uint256 j, uint256 lane);
    /// @notice Descent: `nodes` has the wrong length or does not hash to the current node.
    error BadNodes(uint256 gameId, uint256 length, uint256 expected);
    /// @notice Descent: a pick outside the revealed nodes.
    error BadPick(uint256 gameId, uint256 pick);
    /// @notice The claim cannot be released yet (window open, games open) or was refuted.
    error NotReleasable(uint256 claimId);
    /// @notice The claim has no norm commitment (norm games), or already has one.
    error NormCommitment(uint256 claimId, bool set);
    /// @notice Nothing to withdraw.
    error NothingToWithdraw(address account);
    /// @notice The transfer of a withdrawal failed.
    error TransferFailed(address account, uint256 amount);

    /// @param oneStep_ The one-step checker.
    /// @param clockBlocks_ Chess-clock budget per side, in blocks (at least 1).
    /// @param challengeBond_ Bond of every challenge.
    constructor(OneStep oneStep_, uint64 clockBlocks_, uint256 challengeBond_) {
        oneStep = oneStep_;
        clockBlocks = clockBlocks_ == 0 ? 1 : clockBlocks_;
        challengeBond = challengeBond_;
    }

    // ------------------------------------------------------------------------------------
    // Claims

    /// @notice Post a claim (the submitter's bond is msg.value, at least `challengeBond`: it
    ///         pays the first refuter). `s` names the client and
    ///         digest of every record; the claim keeps the `ClientRecords.extendUpdates`
    ///         accumulator over (client, digest, weight, U_i), which FedChainTask's
    ///         `submitAggregateWithClaim` requires to equal the round's own. `unincluded`
    ///         (bitmap words like `r.excluded`, a subset of them) declares the records the
    ///         task did not include (attested by fewer than f + 1 members): the task requires
    ///         it to be exactly the complement of its included set, and no exclusion game can
    ///         be opened on them.
    function postClaim(
        ClaimParams calldata p,
        Records calldata r,
        Signers calldata s,
        uint256[] calldata unincluded
    ) external payable returns (uint256 claimId) {
        uint256 n = r.roots.length;
        uint256 words = (n + 255) / 256;
        // INVARIANT: one weight, client and digest per root and bitmaps covering every record.
        if (
            r.weights.length != n || r.excluded.length != words || s.clients.length != n
                || s.digests.length != n || unincluded.length != words
        ) {
            revert BadClaim(n, r.weights.length);
        }
        _checkProvable(p, r);
        // INVARIANT: a claim's bond pays its refuter at least one challenge bond (a zero-bond
        // claim would let a refuter spend up to ~12 M gas of moves for nothing).
        if (msg.value < challengeBond) revert WrongBond(msg.value, challengeBond);
        claimId = _claims.length;
        for (uint256 w = 0; w < words; ++w) {
            uint256 bits = unincluded[w];
            // INVARIANT: a record the task did not include is excluded (never a step input).
            if (bits & ~r.excluded[w] != 0) revert UnincludedNotExcluded(w, bits & ~r.excluded[w]);
            if (bits != 0) _unincluded[claimId][w] = bits;
        }
        Claim storage c = _claims.push();
        c.submitter = msg.sender;
        c.rule = p.rule;
        c.dim = p.dim;
        c.betaNum = p.betaNum;
        c.betaDen = p.betaDen;
        c.windowEnd = uint64(block.number) + p.window;
        c.numRecords = uint32(n);
        c.bond = msg.value;
        c.valueBound = p.valueBound;
        c.prevRoot = p.prevRoot;
        c.newRoot = p.newRoot;
        c.recordsHash = keccak256(abi.encode(r.roots, r.weights));
        c.excludedHash = keccak256(abi.encode(r.excluded));
        uint256 included;
        (c.inputsHash, included) = _inputsHash(r);
        if (included == 0) _norms[claimId].empty = true;
        c.accumulator = _accumulator(r, s);
        emit ClaimPosted(claimId, msg.sender, p.newRoot, msg.value);
    }

    /// @dev A claim every step would reject (unknown rule, beta outside [0, 1/2), a weight
    ///      above 2**64 - 1, more than 65,535 records) could never be refuted: refuse it.
    function _checkProvable(ClaimParams calldata p, Records calldata r) private pure {
        // INVARIANT: every claim is one the one-step check can replay.
        if (p.rule > OneStepMath.TRIMMED_MEAN) revert UnprovableClaim(0);
        if (p.rule == OneStepMath.TRIMMED_MEAN && (p.betaDen == 0 || 2 * uint256(p.betaNum) >= p.betaDen)) {
            revert UnprovableClaim(1);
        }
        if (r.roots.length > OneStepMath.MAX_INPUTS) revert UnprovableClaim(2);
        for (uint256 i = 0; i < r.weights.length; ++i) {
            if (r.weights[i] > OneStepMath.MAX_WEIGHT) revert UnprovableClaim(3);
        }
    }

    /// @notice keccak256(abi.encode(includedRoots, includedWeights)): the step's inputs.
    function _inputsHash(Records calldata rec) private pure returns (bytes32, uint256) {
        uint256 n = rec.roots.length;
        uint256 m = 0;
        bytes32[] memory r = new bytes32[](n);
        uint256[] memory w = new uint256[](n);
        for (uint256 i = 0; i < n; ++i) {
            if (!_isExcluded(rec.excluded, i)) {
                r[m] = rec.roots[i];
                w[m] = rec.weights[i];
                ++m;
            }
        }
        assembly ("memory-safe") {
            mstore(r, m)
            mstore(w, m)
        }
        return (keccak256(abi.encode(r, w)), m);
    }

    /// @dev The records' accumulator and count, as `claimHook` returns them: weights were
    ///      checked to fit 64 bits (`_checkProvable`), so the uint64 cast is exact.
    function _accumulator(Records calldata r, Signers calldata s) private pure returns (uint256) {
        uint224 acc = 0;
        uint256 n = r.roots.length;
        for (uint256 i = 0; i < n; ++i) {
            acc = ClientRecords.extendUpdates(acc, s.clients[i], s.digests[i], uint64(r.weights[i]), r.roots[i]);
        }
        return (uint256(acc) << 32) | n;
    }

    function _isExcluded(uint256[] calldata excluded, uint256 i) private pure returns (bool) {
        return (excluded[i / 256] >> (i % 256)) & 1 == 1;
    }

    /// @notice Release an upheld claim's bond to its submitter (pull payment).
    function release(uint256 claimId) external {
        Claim storage c = _claim(claimId);
        // INVARIANT: only a settled, unrefuted claim is released, once.
        if (c.refuted || c.released || c.openGames != 0 || block.number <= c.windowEnd) {
            revert NotReleasable(claimId);
        }
        c.released = true;
        _credits[c.submitter] += c.bond;
        emit ClaimReleased(claimId);
    }

    /// @notice Whether the claim can no longer change: refuted, or its window closed with
    ///         no game open (the hook FedChainTask.finalize reads).
    function settled(uint256 claimId) external view returns (bool) {
        Claim storage c = _claim(claimId);
        return c.refuted || (block.number > c.windowEnd && c.openGames == 0);
    }

    /// @notice What FedChainTask's hooks read of claim `claimId` (`IFaultGamesHook`), in one
    ///         call: its submitter, previous and new state roots, its update records as
    ///         `(accumulator << 32) | numRecords`, last block of its game window, and whether
    ///         it is settled / refuted.
    function claimHook(uint256 claimId)
        external
        view
        returns (
            address submitter,
            bytes32 prevRoot,
            bytes32 newRoot,
            uint256 records,
            uint256 windowEnd,
            bool isSettled,
            bool isRefuted
        )
    {
        Claim storage c = _claim(claimId);
        isRefuted = c.refuted;
        isSettled = isRefuted || (block.number > c.windowEnd && c.openGames == 0);
        return (c.submitter, c.prevRoot, c.newRoot, c.accumulator, c.windowEnd, isSettled, isRefuted);
    }

    /// @notice The claim's `OneStepMath` rule id (FedChainTask checks it against its rule).
    function claimRule(uint256 claimId) external view returns (uint8) {
        return _claim(claimId).rule;
    }

    /// @notice What binds claim `claimId` to a task beyond `claimHook` (`IFaultGamesHook`):
    ///         its `OneStepMath` rule id, the hash of the step parameters it is replayed
    ///         under, keccak256(abi.encode(uint8 rule, uint64 betaNum, uint64 betaDen,
    ///         uint64 dim, uint256 valueBound)) (the task's `faultParamsHash`), and its
    ///         `unincluded` bitmap (the records it declares the task did not include).
    function claimBinding(uint256 claimId)
        external
        view
        returns (uint8 rule, bytes32 paramsHash, uint256[] memory unincluded)
    {
        Claim storage c = _claim(claimId);
        rule = c.rule;
        paramsHash = keccak256(abi.encode(c.rule, c.betaNum, c.betaDen, c.dim, c.valueBound));
        unincluded = new uint256[]((uint256(c.numRecords) + 255) / 256);
        for (uint256 w = 0; w < unincluded.length; ++w) {
            unincluded[w] = _unincluded[claimId][w];
        }
    }

    /// @notice Commit the claim's norm root and total squared norm (its submitter, once,
    ///         while the claim is live and its window open): what the stopping rule reads.
    function commitNorm(uint256 claimId, bytes32 normRoot, uint256 normSq) external {
        Claim storage c = _claim(claimId);
        // INVARIANT: only the submitter commits, once, on a live claim inside its window.
        if (msg.sender != c.submitter) revert NotYourMove(type(uint256).max, msg.sender);
        if (c.refuted || c.released) revert ClaimClosed(claimId);
        if (block.number > c.windowEnd) revert WindowClosed(claimId, c.windowEnd);
        if (_norms[claimId].set) revert NormCommitment(claimId, true);
        _norms[claimId] = Norm(normRoot, normSq, true, _norms[claimId].empty);
        emit NormCommitted(claimId, normRoot, normSq);
    }

    /// @notice The claim's norm commitment for the task's stopping rule (`IFaultGamesHook`).
    function claimNorm(uint256 claimId) external view returns (bool set, uint256 normSq, bool empty) {
        _claim(claimId);
        Norm storage nm = _norms[claimId];
        return (nm.set, nm.sq, nm.empty);
    }

    /// @notice The claim's norm commitment (`set` false: none).
    function norm(uint256 claimId) external view returns (Norm memory) {
        _claim(claimId);
        return _norms[claimId];
    }

    /// @notice Whether the claim was refuted (by proof or by its submitter's timeout).
    function refuted(uint256 claimId) external view returns (bool) {
        return _claim(claimId).refuted;
    }

    /// @notice Whether the claim was refuted BY PROOF: a one-step check (`prove`), a bad
    ///         included update (`refuteInclusion`) or a non-empty empty slot (descent); not by
    ///         a timeout, which shows only that the submitter missed a move. The hook
    ///         `slashRefutedCertificate` reads (`IFaultGamesHook`).
    function refutedByProof(uint256 claimId) external view returns (bool) {
        _claim(claimId);
        return _provenFaulty[claimId];
    }

    /// @notice The claim `claimId`.
    function claim(uint256 claimId) external view returns (Claim memory) {
        return _claim(claimId);
    }

    /// @notice The game `gameId`.
    function game(uint256 gameId) external view returns (Game memory) {
        return _game(gameId);
    }

    // ------------------------------------------------------------------------------------
    // Opening games

    /// @notice Open a leaf game on chunk `j` (bond: challengeBond). The submitter moves.
    function openLeaf(uint256 claimId, uint256 j) external payable returns (uint256) {
        return _open(claimId, Kind.Leaf, 0, j);
    }

    /// @notice Open a leaf game without naming the chunk (the submitter's tree is not public):
    ///         a 16-ary descent from the root - the submitter reveals 16 nodes below the
    ///         current one, the challenger picks one that differs from its own tree - until a
    ///         leaf is reached; then the game continues as a leaf game (prove).
    function openDescent(uint256 claimId) external payable returns (uint256 gameId) {
        gameId = _open(claimId, Kind.Descent, 0, 0);
        Claim storage c = _claims[claimId];
        _games[gameId].level = ChunkMerkle.depth(c.dim);
        _games[gameId].leaf = c.newRoot;
    }

    /// @notice Open a norm leaf game on leaf `j` of the claim's norm tree (bond:
    ///         challengeBond). The submitter reveals it; the challenger proves (proveNorm).
    function openNormLeaf(uint256 claimId, uint256 j) external payable returns (uint256) {
        _requireNorm(claimId);
        return _open(claimId, Kind.NormLeaf, 0, j);
    }

    /// @notice A descent (as openDescent) over the claim's norm tree.
    function openNormDescent(uint256 claimId) external payable returns (uint256 gameId) {
        bytes32 root = _requireNorm(claimId);
        gameId = _open(claimId, Kind.NormDescent, 0, 0);
        _games[gameId].level = ChunkMerkle.depth(_claims[claimId].dim);
        _games[gameId].leaf = root;
    }

    function _requireNorm(uint256 claimId) private view returns (bytes32) {
        Norm storage nm = _norms[claimId];
        // INVARIANT: norm games need the claim's norm commitment.
        if (!nm.set) revert NormCommitment(claimId, false);
        return nm.root;
    }

    /// @notice Accuse the claim of excluding update `index` without reason. The submitter
    ///         must show it bad (defendExclusion) on its clock. Refused on an update the claim
    ///         declares the task did not include (`unincluded`): that is the task's decision
    ///         (fewer than f + 1 members attested it), not the submitter's, and the task
    ///         binds only a claim whose declaration is the complement of its included set.
    function openExclusion(uint256 claimId, uint256 index) external payable returns (uint256) {
        // INVARIANT: an update the task did not include cannot be held against the claim.
        if ((_unincluded[claimId][index / 256] >> (index % 256)) & 1 == 1) {
            revert BadChallenge(Kind.Exclusion, index, 0);
        }
        return _open(claimId, Kind.Exclusion, index, 0);
    }

    /// @notice Ask for chunk `j` of included update `index`. The submitter must post it
    ///         (postChunk) on its clock.
    function openAvailability(uint256 claimId, uint256 index, uint256 j) external payable returns (uint256) {
        return _open(claimId, Kind.Availability, index, j);
    }

    function _open(uint256 claimId, Kind kind, uint256 index, uint256 j) private returns (uint256 gameId) {
        Claim storage c = _claim(claimId);
        // INVARIANT: games open only on a live claim, inside its window, with the exact bond.
        if (c.refuted || c.released) revert ClaimClosed(claimId);
        if (block.number > c.windowEnd) revert WindowClosed(claimId, c.windowEnd);
        if (msg.value != challengeBond) revert WrongBond(msg.value, challengeBond);
        // INVARIANT: a challenge the submitter could not answer is refused: the named chunk
        // exists, the named update exists (an honest submitter never loses on its clock).
        if (
            kind != Kind.Descent && kind != Kind.NormDescent && kind != Kind.Exclusion
                && j >= ChunkMerkle.chunkCount(c.dim)
        ) {
            revert BadChallenge(kind, index, j);
        }
        if ((kind == Kind.Exclusion || kind == Kind.Availability) && index >= c.numRecords) {
            revert BadChallenge(kind, index, j);
        }
        gameId = _games.length;
        _games.push(
            Game({
                claimId: claimId,
                challenger: msg.sender,
                kind: kind,
                turn: Turn.Submitter,
                turnStart: uint64(block.number),
                submitterClock: clockBlocks,
                challengerClock: clockBlocks,
                index: index,
                j: j,
                leaf: bytes32(0),
                level: 0
            })
        );
        c.openGames += 1;
        emit GameOpened(gameId, claimId, msg.sender, kind, index, j);
    }

    // ------------------------------------------------------------------------------------
    // Moves

    /// @notice Leaf game, submitter's move: reveal leaf j of the new state with its proof
    ///         (anyone holding the tree may make it: the proof is what counts).
    function revealLeaf(uint256 gameId, bytes32 leaf, bytes32[] calldata proof) external {
        Game storage g = _game(gameId);
        _move(gameId, g, Kind.Leaf, Turn.Submitter, false);
        Claim storage c = _claims[g.claimId];
        // INVARIANT: the revealed leaf is the submitter's committed chunk j.
        if (!ChunkMerkle.verify(c.newRoot, c.dim, g.j, leaf, proof)) revert BadLeafProof(gameId, g.j);
        g.leaf = leaf;
        g.turn = Turn.Challenger;
        emit LeafRevealed(gameId, leaf);
    }

    /// @notice Norm leaf game, submitter's move: reveal leaves j and j - 1 (none for j = 0)
    ///         of the claim's norm tree with their proofs. The challenger, who knows only the
    ///         honest tree, takes S_{j-1}'s proof from NormLeavesRevealed for its norm step.
    function revealNormLeaf(
        uint256 gameId,
        bytes32 leaf,
        bytes32[] calldata proof,
        bytes32 prevLeaf,
        bytes32[] calldata prevProof
    ) external {
        Game storage g = _game(gameId);
        _move(gameId, g, Kind.NormLeaf, Turn.Submitter, false);
        Claim storage c = _claims[g.claimId];
        bytes32 root = _norms[g.claimId].root;
        // INVARIANT: the revealed leaves are the submitter's committed S_j and S_{j-1}.
        if (
            !ChunkMerkle.verify(root, c.dim, g.j, leaf, proof)
                || (g.j != 0 && !ChunkMerkle.verify(root, c.dim, g.j - 1, prevLeaf, prevProof))
        ) revert BadLeafProof(gameId, g.j);
        g.leaf = leaf;
        g.turn = Turn.Challenger;
        emit NormLeavesRevealed(gameId, leaf, prevLeaf, prevProof);
        _checkLastNormLeaf(gameId, g, c);
    }

    /// @dev A norm tree whose last leaf is not the committed total refutes the claim at once.
    function _checkLastNormLeaf(uint256 gameId, Game storage g, Claim storage c) private {
        // INVARIANT: S_{n-1} is the committed normSq.
        if (g.j + 1 == ChunkMerkle.chunkCount(c.dim) && g.leaf != ChunkMerkle.normLeaf(_norms[g.claimId].sq)) {
            _challengerWins(gameId, g, true);
        }
    }

    /// @notice Descent, submitter's move: reveal the 2**m nodes (m = min(DESCENT_STRIDE,
    ///         level)) m levels below the current node, left to right.
    function revealNodes(uint256 gameId, bytes32[] calldata nodes) external {
        Game storage g = _game(gameId);
        bool isNorm = g.kind == Kind.NormDescent;
        _move(gameId, g, isNorm ? Kind.NormDescent : Kind.Descent, Turn.Submitter, false);
        Claim storage c = _claims[g.claimId];
        uint256 m = g.level < DESCENT_STRIDE ? g.level : DESCENT_STRIDE;
        // INVARIANT: the revealed nodes hash up to the node both sides agreed on.
        if (nodes.length != 1 << m) revert BadNodes(gameId, nodes.length, 1 << m);
        bytes32 top = _hashUp(nodes);
        bool atRoot = g.level == ChunkMerkle.depth(c.dim) && g.index == 0 && g.j == 0;
        bytes32 root = isNorm ? _norms[g.claimId].root : c.newRoot;
        if (atRoot ? ChunkMerkle.rootOf(c.dim, top) != root : top != g.leaf) {
            revert BadNodes(gameId, nodes.length, 1 << m);
        }
        g.j = 1; // the root has been opened
        g.leaf = keccak256(abi.encode(nodes));
        g.turn = Turn.Challenger;
        emit NodesRevealed(gameId, g.level, g.index, m, nodes);
    }

    /// @notice Descent, challenger's move: pick revealed node `pick` (one that differs from
    ///         the challenger's own tree). At the leaves the game becomes a leaf game at chunk
    ///         `index` (a non-empty node in an empty leaf slot refutes the claim at once).
    function pickNode(uint256 gameId, bytes32[] calldata nodes, uint256 pick) external {
        Game storage g = _game(gameId);
        bool isNorm = g.kind == Kind.NormDescent;
        _move(gameId, g, isNorm ? Kind.NormDescent : Kind.Descent, Turn.Challenger, true);
        // INVARIANT: the challenger picks among exactly the nodes the submitter revealed.
        if (keccak256(abi.encode(nodes)) != g.leaf) revert BadNodes(gameId, nodes.length, 0);
        if (pick >= nodes.length) revert BadPick(gameId, pick);
        uint256 m = g.level < DESCENT_STRIDE ? g.level : DESCENT_STRIDE;
        g.level -= m;
        g.index = (g.index << m) | pick;
        g.leaf = nodes[pick];
        emit NodePicked(gameId, g.level, g.index, nodes[pick]);
        if (g.level != 0) {
            g.turn = Turn.Submitter;
            return;
        }
        Claim storage c = _claims[g.claimId];
        if (g.index >= ChunkMerkle.chunkCount(c.dim)) {
            // INVARIANT: an empty leaf slot holds bytes32(0); anything else is a fault.
            if (g.leaf == bytes32(0)) revert BadPick(gameId, pick);
            _challengerWins(gameId, g, true);
            return;
        }
        g.kind = isNorm ? Kind.NormLeaf : Kind.Leaf;
        g.j = g.index;
        g.index = 0;
        // a norm leaf needs S_{j-1}'s opening too: the submitter reveals both (revealNormLeaf)
        g.turn = isNorm ? Turn.Submitter : Turn.Challenger;
        emit LeafRevealed(gameId, g.leaf);
    }

    function _hashUp(bytes32[] calldata nodes) private pure returns (bytes32) {
        uint256 width = nodes.length;
        bytes32[] memory level = new bytes32[](width);
        for (uint256 i = 0; i < width; ++i) {
            level[i] = nodes[i];
        }
        while (width > 1) {
            width >>= 1;
            for (uint256 i = 0; i < width; ++i) {
                level[i] = ChunkMerkle.nodeHash(level[2 * i], level[2 * i + 1]);
            }
        }
        return level[0];
    }

    /// @notice Leaf game, challenger's move: the one-step check. Reverts with ChunkCorrect
    ///         when the recomputed chunk equals the submitter's; otherwise refutes the claim.
    function prove(uint256 gameId, OneStep.Step calldata s) external {
        Game storage g = _game(gameId);
        _move(gameId, g, Kind.Leaf, Turn.Challenger, true);
        Claim storage c = _claims[g.claimId];
        // INVARIANT: the step replays exactly the claim's rule, chunk, previous state and inputs.
        if (
            s.rule != c.rule || s.dim != c.dim || s.betaNum != c.betaNum || s.betaDen != c.betaDen
                || s.j != g.j || s.prevRoot != c.prevRoot
                || keccak256(abi.encode(s.roots, s.weights)) != c.inputsHash
        ) revert StepMismatch(gameId);
        (bytes memory chunk, bytes32 leaf) = oneStep.step(s);
        // INVARIANT: a step on a correct chunk reverts; only a wrong chunk refutes.
        if (leaf == g.leaf) revert ChunkCorrect(gameId, g.j);
        emit StepProven(gameId, g.j, leaf, chunk);
        _challengerWins(gameId, g, true);
    }

    /// @notice Norm leaf game, challenger's move: the norm step. Reverts with ChunkCorrect
    ///         when the recomputed S_j's leaf equals the submitter's; otherwise refutes.
    function proveNorm(uint256 gameId, OneStep.NormStep calldata s) external {
        Game storage g = _game(gameId);
        _move(gameId, g, Kind.NormLeaf, Turn.Challenger, true);
        Claim storage c = _claims[g.claimId];
        // INVARIANT: the norm step reads the claim's chunk j, previous and new state, norm root.
        if (
            s.dim != c.dim || s.j != g.j || s.prevRoot != c.prevRoot || s.newRoot != c.newRoot
                || s.normRoot != _norms[g.claimId].root
        ) revert StepMismatch(gameId);
        (uint256 sum, bytes32 leaf) = oneStep.normStep(s);
        // INVARIANT: a norm step on a correct leaf reverts; only a wrong S_j refutes.
        if (leaf == g.leaf) revert ChunkCorrect(gameId, g.j);
        emit NormProven(gameId, g.j, sum, leaf);
        _challengerWins(gameId, g, true);
    }

    /// @notice Exclusion game, submitter's move: show excluded update `g.index` bad - lane
    ///         `lane` of its chunk `j` (opened against its U_i) exceeds the value bound.
    function defendExclusion(uint256 gameId, Records calldata r, Opening calldata o) external {
        Game storage g = _game(gameId);
        _move(gameId, g, Kind.Exclusion, Turn.Submitter, true);
        Claim storage c = _claims[g.claimId];
        _checkRecords(c, g.claimId, r);
        // INVARIANT: an excluded update is defended by showing it bad; a challenge on an
        // update the claim included is answered by the records alone.
        if (_isExcluded(r.excluded, g.index)) _requireBad(c, r.roots[g.index], g.index, o);
        g.turn = Turn.Over;
        c.openGames -= 1;
        _credits[c.submitter] += challengeBond;
        emit ExclusionDefended(gameId, o.j, o.lane);
        emit GameResolved(gameId, false);
    }

    /// @notice Refute a claim that included a bad update: lane `lane` of chunk `j` of
    ///         included update `index` exceeds the value bound. No bond: it is a proof.
    function refuteInclusion(uint256 claimId, Records calldata r, uint256 index, Opening calldata o) external {
        Claim storage c = _claim(claimId);
        // INVARIANT: a refutation needs a live claim (within its window or with games open).
        if (c.refuted || c.released) revert ClaimClosed(claimId);
        if (block.number > c.windowEnd && c.openGames == 0) revert WindowClosed(claimId, c.windowEnd);
        _checkRecords(c, claimId, r);
        // INVARIANT: only an included update counts against the claim.
        if (index >= r.roots.length || _isExcluded(r.excluded, index)) revert WrongMembership(index, true);
        _requireBad(c, r.roots[index], index, o);
        c.refuted = true;
        _provenFaulty[claimId] = true;
        _credits[msg.sender] += c.bond;
        emit ClaimRefuted(claimId, msg.sender, type(uint256).max, true);
    }

    /// @notice Availability game, submitter's move: post chunk `g.j` of included update
    ///         `g.index`, opened against its U_i; the bytes go out in ChunkPosted.
    function postChunk(uint256 gameId, Records calldata r, Opening calldata o) external {
        Game storage g = _game(gameId);
        _move(gameId, g, Kind.Availability, Turn.Submitter, true);
        Claim storage c = _claims[g.claimId];
        _checkRecords(c, g.claimId, r);
        // INVARIANT: the posted bytes are chunk j of an included update's committed U_i; an
        // excluded update need not be available (the records alone answer the challenge).
        bool included = !_isExcluded(r.excluded, g.index);
        if (
            included
                && (o.j != g.j || !ChunkMerkle.verify(r.roots[g.index], c.dim, g.j, ChunkMerkle.leafHash(o.chunk), o.proof))
        ) revert BadUpdateProof(g.index, g.j);
        g.turn = Turn.Over;
        c.openGames -= 1;
        _credits[c.submitter] += challengeBond;
        emit ChunkPosted(gameId, g.index, g.j, o.chunk);
        emit GameResolved(gameId, false);
    }

    /// @notice Whether `chunk` is chunk `j mod ceil(dim / 256)` of the `dim`-coordinate vector
    ///         committed by `root` (a U_i), `proof` its Merkle proof, with
    ///         `dimAndJ` = j << 64 | dim: what FedChainTask's task-level availability game
    ///         (`answerAvailability`) asks, kept here with the other ChunkMerkle checks.
    function verifyChunk(bytes32 root, uint256 dimAndJ, bytes calldata chunk, bytes32[] calldata proof)
        external
        pure
        returns (bool)
    {
        uint64 dim = uint64(dimAndJ);
        uint256 chunks = ChunkMerkle.chunkCount(dim);
        return chunks != 0 && ChunkMerkle.verify(root, dim, (dimAndJ >> 64) % chunks, ChunkMerkle.leafHash(chunk), proof);
    }

    /// @notice The `ClientRecords.extendUpdates` accumulator over `entries` (92-byte records
    ///         client || digest || numSamples || chunkRoot, as FedChainTask's
    ///         `UpdatesRegistered` events carry them, concatenated) and the chunk root (U_i)
    ///         of record `index` (zero past the last): what FedChainTask's
    ///         `challengeAvailability` checks its records with. Takes that call's arguments
    ///         (`round` and `j` are not read).
    function entriesRoot(uint256 round, uint256 index, uint256 j, bytes calldata entries)
        external
        pure
        returns (uint256 accumulator, bytes32 root)
    {
        (round, j);
        uint224 acc = 0;
        // INVARIANT: whole records only.
        if (entries.length % 92 != 0) revert BadClaim(entries.length, 92);
        uint256 n = entries.length / 92;
        for (uint256 i = 0; i < n; ++i) {
            bytes calldata e = entries[i * 92:(i + 1) * 92];
            acc = ClientRecords.extendUpdates(
                acc, address(bytes20(e[0:20])), bytes32(e[20:52]), uint64(bytes8(e[52:60])), bytes32(e[60:92])
            );
            if (i == index) root = bytes32(e[60:92]);
        }
        accumulator = acc;
    }

    /// @notice End a game whose side to move spent its clock: the other side wins. On a
    ///         claim refuted meanwhile, the challenger's bond is refunded instead.
    function timeout(uint256 gameId) external {
        Game storage g = _game(gameId);
        // INVARIANT: a finished game cannot time out again.
        if (g.turn == Turn.Over) revert NotYourMove(gameId, msg.sender);
        Claim storage c = _claims[g.claimId];
        if (c.refuted) {
            g.turn = Turn.Over;
            c.openGames -= 1;
            _credits[g.challenger] += challengeBond;
            emit GameResolved(gameId, true);
            return;
        }
        uint256 budget = g.turn == Turn.Submitter ? g.submitterClock : g.challengerClock;
        uint256 elapsed = block.number - g.turnStart;
        // INVARIANT: timeout only once the side to move has spent its whole budget.
        if (elapsed <= budget) revert ClockRunning(gameId, elapsed, budget);
        if (g.turn == Turn.Submitter) {
            // a missed move refutes the claim without proving its aggregate wrong
            _challengerWins(gameId, g, false);
        } else {
            g.turn = Turn.Over;
            c.openGames -= 1;
            _credits[c.submitter] += challengeBond;
            emit GameResolved(gameId, false);
        }
    }

    /// @notice Pull the wei credited to the caller.
    function withdraw() external nonReentrant {
        uint256 amount = _credits[msg.sender];
        // INVARIANT: a withdrawal moves a positive amount.
        if (amount == 0) revert NothingToWithdraw(msg.sender);
        _credits[msg.sender] = 0;
        emit Withdrawal(msg.sender, amount);
        (bool ok,) = payable(msg.sender).call{value: amount}("");
        // INVARIANT: a failed transfer leaves the credits in place (the whole call reverts).
        if (!ok) revert TransferFailed(msg.sender, amount);
    }

    /// @notice Wei `account` can pull with `withdraw`.
    function credits(address account) external view returns (uint256) {
        return _credits[account];
    }

    // ------------------------------------------------------------------------------------
    // Internals

    function _claim(uint256 claimId) private view returns (Claim storage) {
        // INVARIANT: ids name existing claims.
        if (claimId >= _claims.length) revert UnknownId(claimId);
        return _claims[claimId];
    }

    function _game(uint256 gameId) private view returns (Game storage) {
        // INVARIANT: ids name existing games.
        if (gameId >= _games.length) revert UnknownId(gameId);
        return _games[gameId];
    }

    /// @dev Check that it is `side`'s move in a game of `kind` by its player (`bySide`:
    ///      only that side's account may make it) within its clock, and charge the clock.
    function _move(uint256 gameId, Game storage g, Kind kind, Turn side, bool bySide) private {
        // INVARIANT: moves of the right kind, on the right turn, by the right player.
        if (g.kind != kind) revert WrongGame(gameId, g.kind);
        if (g.turn != side) revert NotYourMove(gameId, msg.sender);
        if (_claims[g.claimId].refuted) revert ClaimClosed(g.claimId);
        if (bySide) {
            address player = side == Turn.Submitter ? _claims[g.claimId].submitter : g.challenger;
            if (msg.sender != player) revert NotYourMove(gameId, msg.sender);
        }
        uint256 elapsed = block.number - g.turnStart;
        uint64 budget = side == Turn.Submitter ? g.submitterClock : g.challengerClock;
        // INVARIANT: a side moves only while its chess clock has time left.
        if (elapsed > budget) revert ClockExpired(gameId, elapsed, budget);
        if (side == Turn.Submitter) g.submitterClock = budget - uint64(elapsed);
        else g.challengerClock = budget - uint64(elapsed);
        g.turnStart = uint64(block.number);
    }

    /// @dev The challenger won game `gameId`: the claim is refuted (`byProof`: by a proof,
    ///      not by the submitter's timeout) and its bond goes to the challenger.
    function _challengerWins(uint256 gameId, Game storage g, bool byProof) private {
        Claim storage c = _claims[g.claimId];
        g.turn = Turn.Over;
        c.openGames -= 1;
        c.refuted = true;
        if (byProof) _provenFaulty[g.claimId] = true;
        _credits[g.challenger] += challengeBond + c.bond;
        emit GameResolved(gameId, true);
        emit ClaimRefuted(g.claimId, g.challenger, gameId, byProof);
    }

    function _checkRecords(Claim storage c, uint256 claimId, Records calldata r) private view {
        // INVARIANT: the records list and excluded set are the claim's.
        if (
            keccak256(abi.encode(r.roots, r.weights)) != c.recordsHash
                || keccak256(abi.encode(r.excluded)) != c.excludedHash
        ) revert RecordsMismatch(claimId);
    }

    /// @dev Revert unless lane `lane` of chunk `j` of the update committed by `root` lies
    ///      inside the vector and exceeds the claim's value bound.
    function _requireBad(Claim storage c, bytes32 root, uint256 index, Opening calldata o) private view {
        if (!ChunkMerkle.verify(root, c.dim, o.j, ChunkMerkle.leafHash(o.chunk), o.proof)) {
            revert BadUpdateProof(index, o.j);
        }
        // INVARIANT: only a coordinate inside the vector beyond the value bound is bad.
        if (o.lane >= ChunkMerkle.validLanes(c.dim, o.j)) revert NotBad(index, o.j, o.lane);
        int256 x = _lane(o.chunk, o.lane);
        uint256 mag = uint256(x < 0 ? -x : x);
        if (mag <= c.valueBound) revert NotBad(index, o.j, o.lane);
    }

    function _lane(bytes calldata chunk, uint256 lane) private pure returns (int256 x) {
        assembly ("memory-safe") {
            x := signextend(3, shr(224, calldataload(add(chunk.offset, shl(2, lane)))))
        }
    }
}
