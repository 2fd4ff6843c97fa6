"""A client's secure-aggregation secrets, all derived from its own account key.

Every secret a client uses in secure aggregation — its long-term X25519 encryption key, the
mask key in force from each round, each round's self mask, and the randomness of every
Shamir polynomial — is HKDF-SHA256 of its account key, labelled by the task, the purpose
and the round. Nobody else can compute them, and a client that crashes and restarts
re-derives exactly the same keys and re-creates byte-identical payloads (the same digest),
instead of publishing a second, differently masked copy of its update or losing the key
its peers already masked with. Nothing needs to be kept on disk.

Randomness for the Shamir polynomials comes from a ChaCha20 keystream under a derived key
(:func:`random_stream`): a cryptographic PRG, never NumPy's generator.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from privacy import shamir
from privacy.secagg import ClientKeys, RandomBytes
from protocol.errors import ConfigError

__all__ = ["ClientSecrets", "derive", "random_stream"]

_SALT = b"fedchain-privacy-v1"


def derive(secret: bytes, *label: object) -> bytes:
    """32 bytes of HKDF-SHA256(``secret``; ``label`` joined by 0x1f)."""
    if len(secret) < 16:
        raise ConfigError("the client secret must have at least 128 bits")
    info = b"\x1f".join(str(x).encode() for x in label)
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=_SALT, info=info).derive(secret)


def random_stream(seed: bytes) -> RandomBytes:
    """A ``random_bytes(n)`` callable reading the ChaCha20 keystream under ``seed``."""
    encryptor = Cipher(algorithms.ChaCha20(seed, bytes(16)), mode=None).encryptor()

    def random_bytes(n: int) -> bytes:
        return encryptor.update(bytes(n))

    return random_bytes


@dataclass(frozen=True)
class ClientSecrets:
    """The secrets of client ``index`` (its registration index) in ``task``."""

    secret: bytes
    task: str
    index: int

    def _element(self, *label: object) -> int:
        return shamir.random_element(random_stream(derive(self.secret, *self._label(*label))))

    def _label(self, *label: object) -> tuple[object, ...]:
        return ("secagg", self.task.lower(), self.index, *label)

    @cached_property
    def enc_secret(self) -> int:
        """The long-term encryption key (shares dealt to this client are encrypted to it)."""
        return self._element("enc")

    def mask_secret(self, round_: int) -> int:
        """The mask key in force from ``round_`` (each is used for that one round only)."""
        return self._element("mask", int(round_))

    def keys(self, round_: int) -> ClientKeys:
        """The key pairs of this client for ``round_`` (long-term enc key, round's mask key)."""
        return ClientKeys(self.index, self.enc_secret, self.mask_secret(round_))

    @cached_property
    def enc_public(self) -> bytes:
        """The encryption public key (what the client registers on-chain)."""
        return self.keys(0).bundle.enc_pk

    def self_mask(self, round_: int) -> int:
        """The self-mask seed ``b`` of ``round_``."""
        return self._element("self-mask", int(round_))

    def randomness(self, purpose: str, round_: int) -> RandomBytes:
        """The PRG of the Shamir polynomial of ``purpose`` in ``round_``."""
        return random_stream(derive(self.secret, *self._label("shamir", purpose, int(round_))))
