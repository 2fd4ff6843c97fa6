// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";
import {Availability} from "./Availability.sol";
import {Quorums} from "./Quorums.sol";

/// @dev The FedChainTask views `includedUpdates` reads back.
interface ITaskAttestations {
    function updateCount(uint256 round) external view returns (uint256);
    function committeeSize() external view returns (uint256);
    function attestation(uint256 round, uint256 member) external view returns (uint256[] memory);
}

/// @title EquivocationEvidence
/// @notice Logic of FedChainTask in a contract of its own, so that FedChainTask stays under
///         the EIP-170 code size limit: the checking half of `slashEquivocation`, the
///         `includedUpdates` view, and the reporters' commitments. Each task deploys one in
///         its constructor and forwards those calls' calldata to it unchanged (same function
///         signatures, so the same selectors; `slashEquivocation` with the reporter's address
///         appended). It moves no value, so calling it directly is harmless (it answers about
///         the caller).
///
///         Commit-reveal for the equivocation reward: a reporter first calls
///         `commitEquivocation(commitment)` here, with commitment = keccak256(abi.encode(task, kind,
///         viewNumber, seq, keccak256(a.signature), keccak256(b.signature), reporter)), and
///         reveals (the task's `slashEquivocation`) at least one block later. The reveal is
///         accepted only from a reporter whose sealed commitment is older than the reveal's
///         block, so a watcher copying the reveal from the mempool (it cannot have committed
///         before seeing the evidence) gains nothing, and copying the commitment (from any
///         account) binds the reward to the original reporter again.
/// @dev Signatures are checked under the EIP-712 domain of the *caller* ({name
///      "FedChainTask", version "1", chainId, msg.sender}), which equals the task's own
///      domain when the task calls it.
contract EquivocationEvidence {
    /// @notice One signed PBFT vote (same layout as `FedChainTask.SignedVote`).
    struct SignedVote {
        uint256 round;
        uint256 attempt;
        bytes32 aggregateDigest;
        bool faulty;
        bytes signature;
    }

    /// @param reason 1 unknown message kind, 2 the two messages do not conflict, 3 they were
    ///        signed by different members (same error as FedChainTask's).
    error InvalidEvidence(uint8 reason);
    /// @param reason OpenZeppelin `ECDSA.RecoverError` (same error as FedChainTask's).
    error InvalidSignature(uint256 index, uint8 reason);
    /// @notice `reporter` revealed evidence it had not committed at least one block before
    ///         (same error as FedChainTask's).
    error EvidenceNotCommitted(address reporter);

    /// @notice A sealed commitment to equivocation evidence was recorded at `blockNumber`.
    event EquivocationCommitted(bytes32 indexed commitment, uint256 blockNumber);

    /// @dev sealed commitment -> block of its first commitment (0: never committed).
    mapping(bytes32 commitment => uint256 blockNumber) public equivocationCommittedAt;

    /// @dev The task's attestWindow (0: no attestation phase, every update is included).
    uint32 private immutable _attestWindow;

    /// @param attestWindow The creating task's `attestWindow`.
    constructor(uint32 attestWindow) {
        _attestWindow = attestWindow;
    }

    bytes32 private constant _DOMAIN_TYPEHASH =
        keccak256("EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)");
    bytes32 private constant _NAME_HASH = keccak256("FedChainTask");
    bytes32 private constant _VERSION_HASH = keccak256("1");
    bytes32 private constant _DISPUTE_VERDICT_TYPEHASH = keccak256(
        "DisputeVerdict(uint256 round,uint256 attempt,bytes32 aggregateDigest,bool faulty,uint256 view)"
    );
    bytes32 private constant _PRE_PREPARE_TYPEHASH = keccak256(
        "PrePrepare(uint256 view,uint256 seq,uint256 round,uint256 attempt,bytes32 aggregateDigest,bool faulty)"
    );
    bytes32 private constant _PREPARE_TYPEHASH = keccak256(
        "Prepare(uint256 view,uint256 seq,uint256 round,uint256 attempt,bytes32 aggregateDigest,bool faulty)"
    );

    /// @notice The included set of the caller's (a FedChainTask's) `round` (see
    ///         `FedChainTask.includedUpdates`): the updates attested by at least f + 1 of the
    ///         committee's n members, from the task's own `attestation` bitmaps (all zero for a
    ///         member that did not attest).
    function includedUpdates(uint256 round) external view returns (uint256[] memory included) {
        ITaskAttestations task = ITaskAttestations(msg.sender);
        uint256 count = task.updateCount(round);
        if (_attestWindow == 0) return Availability.allSet(count);
        uint256 n = task.committeeSize();
        uint256 threshold = Quorums.maxFaulty(n) + 1;
        uint256[][] memory bitmaps = new uint256[][](n);
        for (uint256 m = 0; m < n; ++m) {
            bitmaps[m] = task.attestation(round, m);
        }
        included = new uint256[]((count + 255) >> 8);
        for (uint256 w = 0; w < included.length; ++w) {
            // memory arrays start zeroed: the count of every update starts at 0
            // slither-disable-next-line uninitialized-local
            uint256[9] memory counter;
            for (uint256 m = 0; m < n; ++m) {
                Availability.add(counter, bitmaps[m][w]);
            }
            included[w] = Availability.atLeast(counter, threshold);
        }
    }

    /// @notice Commits to equivocation evidence (see the contract's notice); the first
    ///         commitment of a sealed value stands (later ones change nothing). Anyone may call.
    function commitEquivocation(bytes32 commitment) external {
        // 0 means "never committed" (a block number is never 0 here), not a balance
        // slither-disable-next-line incorrect-equality
        if (equivocationCommittedAt[commitment] == 0) {
            equivocationCommittedAt[commitment] = block.number;
            emit EquivocationCommitted(commitment, block.number);
        }
    }

    /// @notice The member that signed both conflicting messages `a` and `b` of `kind` (0
    ///         PrePrepare, 1 Prepare, 2 DisputeVerdict) in view `viewNumber` (and sequence
    ///         number `seq`, kinds 0 and 1) under the caller's domain; reverts unless they are
    ///         a valid equivocation (see `FedChainTask.slashEquivocation`), or unless the
    ///         reporter (the last 20 bytes of the calldata, appended by the task) committed
    ///         it at least one block before.
    function slashEquivocation(
        uint8 kind,
        uint256 viewNumber,
        uint256 seq,
        SignedVote calldata a,
        SignedVote calldata b
    ) external view returns (address signer) {
        // INVARIANT: evidence is one of the three slashable message kinds.
        if (kind > 2) revert InvalidEvidence(1);
        bool sameDispute = a.round == b.round && a.attempt == b.attempt && a.aggregateDigest == b.aggregateDigest;
        // INVARIANT: only a conflicting pair is evidence: commits of one dispute and view with
        // opposite verdicts, or slot votes of one (view, seq) with different content.
        if (kind == 2 ? !(sameDispute && a.faulty != b.faulty) : (sameDispute && a.faulty == b.faulty)) {
            revert InvalidEvidence(2);
        }
        bytes32 separator =
            keccak256(abi.encode(_DOMAIN_TYPEHASH, _NAME_HASH, _VERSION_HASH, block.chainid, msg.sender));
        signer = _voteSigner(separator, 0, kind, viewNumber, seq, a);
        // INVARIANT: both messages were signed by the same member.
        if (_voteSigner(separator, 1, kind, viewNumber, seq, b) != signer) revert InvalidEvidence(3);
        address reporter = address(bytes20(msg.data[msg.data.length - 20:]));
        bytes32 commitment = keccak256(
            abi.encode(msg.sender, kind, viewNumber, seq, keccak256(a.signature), keccak256(b.signature), reporter)
        );
        uint256 committedAt = equivocationCommittedAt[commitment];
        // INVARIANT: the reward goes only to a reporter that committed to this evidence in an
        // earlier block, so a copied reveal (or a commitment made on seeing it) gains nothing.
        if (committedAt == 0 || committedAt >= block.number) revert EvidenceNotCommitted(reporter);
    }

    /// @dev The signer of `vote` (evidence entry `index`) as a message of `kind`; reverts on a
    ///      malformed signature.
    function _voteSigner(
        bytes32 separator,
        uint256 index,
        uint8 kind,
        uint256 viewNumber,
        uint256 seq,
        SignedVote calldata vote
    ) private pure returns (address signer) {
        bytes32 structHash;
        if (kind == 2) {
            structHash = keccak256(
                abi.encode(_DISPUTE_VERDICT_TYPEHASH, vote.round, vote.attempt, vote.aggregateDigest, vote.faulty, viewNumber)
            );
        } else {
            structHash = keccak256(
                abi.encode(
                    kind == 0 ? _PRE_PREPARE_TYPEHASH : _PREPARE_TYPEHASH,
                    viewNumber,
                    seq,
                    vote.round,
                    vote.attempt,
                    vote.aggregateDigest,
                    vote.faulty
                )
            );
        }
        bytes32 digest = keccak256(abi.encodePacked("\x19\x01", separator, structHash));
        ECDSA.RecoverError err;
        // The third return value (the error's argument) adds nothing to `err`.
        // slither-disable-next-line unused-return
        (signer, err,) = ECDSA.tryRecoverCalldata(digest, vote.signature);
        // INVARIANT: only well-formed, non-malleable signatures are evidence.
        if (err != ECDSA.RecoverError.NoError) revert InvalidSignature(index, uint8(err));
    }
}
