"""One exception hierarchy for everything fedchain raises on purpose.

Callers catch :class:`FedchainError` for "anything fedchain refused", or a narrower class.
Contract custom errors are mapped to subclasses of :class:`ContractRevert` (see
``adapters.chain``), so code can catch ``RoundNotOpen`` instead of parsing revert strings.
"""

from __future__ import annotations


class FedchainError(Exception):
    """Base class of every error fedchain raises deliberately."""


class ConfigError(FedchainError, ValueError):
    """A configuration value, CLI option or scenario file is invalid."""


class CodecError(FedchainError, ValueError):
    """A payload is not a valid canonical tensor encoding, or does not match the model spec."""


class StorageError(FedchainError):
    """Content-addressed storage failed: missing content, bad CID, unreachable node."""


class ContentNotFound(StorageError, KeyError):
    """No content is stored under the requested CID."""


class DigestMismatch(StorageError):
    """Bytes returned for a CID do not hash to that CID (tampered or corrupt content)."""


class RuleParameterError(FedchainError, ValueError):
    """An aggregation rule was given invalid parameters, or too few inputs for its parameters."""


class ChainError(FedchainError):
    """Talking to the chain failed (connection, transaction, or an unmapped revert)."""


class ContractRevert(ChainError):
    """A contract call reverted. Subclasses are generated per Solidity custom error.

    ``error_name`` is the Solidity error's name and ``error_args`` its decoded arguments
    (by parameter name), so callers can inspect e.g. ``exc.error_args["round"]``.
    """

    error_name: str = "ContractRevert"

    def __init__(self, message: str, error_args: dict[str, object] | None = None) -> None:
        super().__init__(message)
        self.error_args: dict[str, object] = dict(error_args or {})


class ConsensusError(FedchainError):
    """A PBFT message or certificate is invalid (bad signature, wrong quorum, equivocation)."""


class PrivacyError(FedchainError):
    """A privacy mechanism, accountant or cryptographic aggregation refused its input."""


class PrivacyBudgetError(PrivacyError):
    """A task would spend (or has spent) more privacy budget than its target allows."""


class SecAggError(PrivacyError):
    """Secure aggregation cannot produce the exact sum from the published material."""


class SecAggThresholdError(SecAggError):
    """Fewer valid shares than the threshold were revealed for some secret.

    ``missing`` maps each dealer (client index) whose secret cannot be reconstructed to the
    number of valid shares that were available for it.
    """

    def __init__(self, message: str, missing: dict[int, int]) -> None:
        super().__init__(message)
        self.missing = dict(missing)


class SecAggShareError(SecAggError):
    """A revealed share, or a dealt set of shares, is inconsistent with its commitment.

    ``culprit`` is the client index held responsible (the revealer of a share that does not
    open the dealer's commitment, or the dealer whose shares reconstruct to a secret that
    does not match its published commitment); ``role`` says which ("revealer" or "dealer").
    """

    def __init__(self, message: str, culprit: int, role: str) -> None:
        super().__init__(message)
        self.culprit = culprit
        self.role = role


class HEError(PrivacyError, ValueError):
    """A homomorphic ciphertext or key is malformed, or a decryption proof does not verify."""
