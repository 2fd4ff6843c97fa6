"""Secure aggregation core (Bonawitz et al. 2017, double masking) as pure functions.

Every client ``u`` of a task holds two X25519 key pairs: ``enc`` (to encrypt Shamir shares
to peers, AEAD ChaCha20-Poly1305) and ``mask`` (pairwise mask agreement); its
:class:`KeyBundle` of public keys is published once. In round ``r`` client ``u`` with the
fixed-point update ``x_u`` (int32 two's complement, i.e. the ring Z_2^32) publishes

    y_u = x_u + PRG(b_u) + Σ_{v ≠ u} s(u, v) · PRG(k_uvr)            (mod 2^32)

where ``k_uvr = HKDF(X25519(mask_u, mask_v); task, r, min(u,v), max(u,v))`` is the per-round
pairwise seed (``s(u, v) = +1`` if ``u < v`` else −1, so pairs cancel in the sum), ``b_u`` a
fresh per-round self-mask seed, and PRG the ChaCha20 keystream read as little-endian
uint32 (never NumPy's generator). With its update ``u`` publishes :class:`DealtShares` of
``b_u``: Shamir shares (threshold ``t``), each encrypted to its peer, plus a hash
commitment to every share and to ``b_u`` itself; the shares of its mask key were dealt when
the key was published.

Once the round's included set ``I`` is fixed (on fedchain: by the contract, so every party
sees the same set), each surviving client publishes a :class:`Reveal`: its share of ``b_v``
for every ``v ∈ I`` and its share of the mask key of every dropped peer ``v ∉ I`` — never
both kinds for one client. :func:`unmask_sum` then recovers ``Σ_{u∈I} x_u`` from published
material only (masked updates, dealt shares, reveals, key bundles): same bytes in, same
bytes out, in any process. Every revealed share is checked against its dealer's
commitment (a mismatch is attributed to the revealer and the share ignored); a secret
that reconstructs to something other than its commitment is attributed to the dealer
(:class:`~protocol.errors.SecAggShareError`); fewer than ``t`` valid shares for a secret is
a :class:`~protocol.errors.SecAggThresholdError` naming whose secret is short.

Why both masks, and why mask keys must rotate: docs/privacy.md.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from itertools import pairwise

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from numpy.typing import NDArray

from privacy import shamir
from protocol.errors import ConfigError, SecAggError, SecAggShareError, SecAggThresholdError

__all__ = [
    "MASK_KEY",
    "SELF_MASK",
    "ClientKeys",
    "DealtShares",
    "KeyBundle",
    "Reveal",
    "UnmaskResult",
    "deal_shares",
    "deal_shares_to",
    "expand_mask",
    "generate_keys",
    "make_reveal",
    "mask_update",
    "new_self_mask",
    "open_share",
    "open_share_from",
    "pairwise_seed",
    "unmask_sum",
    "usable_public_key",
]

#: The two kinds of secret a client deals shares of.
SELF_MASK = "self-mask"
MASK_KEY = "mask-key"
RING = np.uint32  # Z_2^32: the fixed-point ring (int32 two's complement)
_DOMAIN = b"fedchain-secagg-v1"
RandomBytes = Callable[[int], bytes]


_CIPHERTEXT_BYTES = 32 + 16  # a 32-byte share under ChaCha20-Poly1305 (tag 16)


class _Reader:
    """Strict little-endian reader of canonical secagg bytes (domain prefix first)."""

    def __init__(self, data: bytes, what: str) -> None:
        if not isinstance(data, bytes | bytearray) or bytes(data[: len(_DOMAIN)]) != _DOMAIN:
            raise SecAggError(f"{what}: bad magic (not fedchain secagg bytes)")
        self.data = bytes(data)
        self.offset = len(_DOMAIN)
        self.what = what

    @property
    def remaining(self) -> int:
        return len(self.data) - self.offset

    def take(self, n: int) -> bytes:
        if self.remaining < n:
            raise SecAggError(f"{self.what}: truncated")
        out = self.data[self.offset : self.offset + n]
        self.offset += n
        return out

    def u32(self) -> int:
        value: int = struct.unpack("<I", self.take(4))[0]
        return value

    def end(self) -> None:
        if self.remaining:
            raise SecAggError(f"{self.what}: {self.remaining} trailing bytes")


def _kdf(secret: bytes, *info: object, length: int = 32) -> bytes:
    text = b"\x1f".join(str(x).encode() for x in info)
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=_DOMAIN, info=text).derive(secret)


_PROBE = X25519PrivateKey.from_private_bytes(bytes([9]) * 32)


def usable_public_key(public: bytes) -> bool:
    """Whether ``public`` is a 32-byte X25519 key with a non-zero shared secret.

    A low-order point (the eight points of the small subgroup, in any of their encodings)
    gives the all-zero shared secret with *every* private key (scalars are clamped to
    multiples of 8), which the X25519 exchange refuses: a peer that registered one would
    make every honest client raise while masking or dealing to it. It is refused when keys
    are read, so it never enters a round."""
    if not isinstance(public, bytes | bytearray) or len(public) != 32:
        return False
    return _usable(bytes(public))


@lru_cache(maxsize=1 << 14)
def _usable(public: bytes) -> bool:
    # cached: every client checks every registered key each round (O(K^2) exchanges at K = 1,000)
    try:
        _PROBE.exchange(X25519PublicKey.from_public_bytes(public))
    except ValueError:
        return False
    return True


def _private_key(value: int) -> X25519PrivateKey:
    return X25519PrivateKey.from_private_bytes(value.to_bytes(32, "big"))


def _public_bytes(key: X25519PrivateKey) -> bytes:
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


@dataclass(frozen=True)
class KeyBundle:
    """A client's public keys (published once; its digest is what goes on-chain)."""

    index: int
    enc_pk: bytes
    mask_pk: bytes

    def to_bytes(self) -> bytes:
        return _DOMAIN + struct.pack("<I", self.index) + self.enc_pk + self.mask_pk

    @property
    def digest(self) -> bytes:
        return hashlib.sha256(self.to_bytes()).digest()

    @classmethod
    def from_bytes(cls, data: bytes) -> KeyBundle:
        """Parse :meth:`to_bytes` (:class:`SecAggError` if malformed)."""
        reader = _Reader(data, "key bundle")
        index = reader.u32()
        enc_pk, mask_pk = reader.take(32), reader.take(32)
        reader.end()
        return cls(index, enc_pk, mask_pk)


@dataclass(frozen=True)
class ClientKeys:
    """A client's secret keys: ``enc`` for share encryption, ``mask`` (as a field element,
    so it can be Shamir-shared) for pairwise masks."""

    index: int
    enc_secret: int
    mask_secret: int

    @property
    def bundle(self) -> KeyBundle:
        return KeyBundle(
            self.index,
            _public_bytes(_private_key(self.enc_secret)),
            _public_bytes(_private_key(self.mask_secret)),
        )


def generate_keys(index: int, random_bytes: RandomBytes) -> ClientKeys:
    """Fresh X25519 key pairs for client ``index`` (private scalars below the field prime)."""
    return ClientKeys(
        index, shamir.random_element(random_bytes), shamir.random_element(random_bytes)
    )


def pairwise_seed(
    mask_secret: int, peer_mask_pk: bytes, task: str, round_: int, u: int, v: int
) -> bytes:
    """The per-round pairwise seed of clients ``u`` and ``v`` (same from either side)."""
    shared = _private_key(mask_secret).exchange(X25519PublicKey.from_public_bytes(peer_mask_pk))
    lo, hi = min(u, v), max(u, v)
    return _kdf(shared, "pairwise-mask", task.lower(), round_, lo, hi)


def expand_mask(seed: bytes, dim: int) -> NDArray[np.uint32]:
    """``dim`` uint32 words of the ChaCha20 keystream under ``seed`` (a 32-byte key)."""
    if len(seed) != 32:
        raise ConfigError("a mask seed is 32 bytes")
    encryptor = Cipher(algorithms.ChaCha20(seed, bytes(16)), mode=None).encryptor()
    stream = encryptor.update(bytes(4 * dim))
    return np.frombuffer(stream, dtype="<u4").astype(RING, copy=False)


def new_self_mask(random_bytes: RandomBytes) -> int:
    """A fresh self-mask seed ``b`` for one round (a field element, so it can be shared)."""
    return shamir.random_element(random_bytes)


def _seed_bytes(secret: int) -> bytes:
    return secret.to_bytes(32, "big")


def _secret_commitment(purpose: str, dealer: int, task: str, round_: int, secret: int) -> bytes:
    if purpose == MASK_KEY:  # the public key is the commitment to a mask key
        return _public_bytes(_private_key(secret))
    header = f"{purpose}|{task.lower()}|{round_}|{dealer}".encode()
    return hashlib.sha256(_DOMAIN + b"secret|" + header + _seed_bytes(secret)).digest()


def _share_commitment(
    purpose: str, dealer: int, recipient: int, task: str, round_: int, share: int
) -> bytes:
    header = f"{purpose}|{task.lower()}|{round_}|{dealer}|{recipient}".encode()
    return hashlib.sha256(_DOMAIN + b"share|" + header + _seed_bytes(share)).digest()


def _channel(
    own_enc_secret: int,
    peer_enc_pk: bytes,
    purpose: str,
    task: str,
    round_: int,
    dealer: int,
    recipient: int,
) -> tuple[ChaCha20Poly1305, bytes]:
    shared = _private_key(own_enc_secret).exchange(X25519PublicKey.from_public_bytes(peer_enc_pk))
    ad = f"{purpose}|{task.lower()}|{round_}|{dealer}|{recipient}".encode()
    return ChaCha20Poly1305(_kdf(shared, "share-channel", ad.decode())), ad


@dataclass(frozen=True)
class DealtShares:
    """Shares of one secret of ``dealer``, one per peer, encrypted and committed.

    ``recipients`` are the clients' indices in increasing order (the dealer included: it
    keeps a share of its own secret, as in Bonawitz et al.); a recipient's share is the
    polynomial at ``x = recipient + 1``. ``round`` is the round (self masks) or the round
    from which the key is in force (mask keys). ``secret_commitment`` is SHA-256 of the
    self mask, or the mask key's public key.
    """

    dealer: int
    purpose: str
    round: int
    threshold: int
    recipients: tuple[int, ...]
    ciphertexts: tuple[bytes, ...]
    commitments: tuple[bytes, ...]
    secret_commitment: bytes

    @cached_property
    def _positions(self) -> dict[int, int]:
        return {r: i for i, r in enumerate(self.recipients)}

    def position(self, recipient: int) -> int:
        pos = self._positions.get(recipient)
        if pos is None:
            raise SecAggError(
                f"client {recipient} holds no share of {self.dealer}'s {self.purpose}"
            )
        return pos

    def holds(self, recipient: int) -> bool:
        """Whether ``recipient`` was dealt a share."""
        return recipient in self._positions

    def to_bytes(self) -> bytes:
        """Canonical bytes (what a client publishes; its digest can go on-chain)."""
        head = struct.pack(
            "<IIII", self.dealer, self.round, self.threshold, len(self.recipients)
        ) + self.purpose.encode().ljust(16, b"\0")
        body = b"".join(
            struct.pack("<I", r) + c + m
            for r, c, m in zip(self.recipients, self.ciphertexts, self.commitments, strict=True)
        )
        return _DOMAIN + head + self.secret_commitment + body

    @classmethod
    def from_bytes(cls, data: bytes) -> DealtShares:
        """Parse :meth:`to_bytes` strictly: known purpose, recipients strictly increasing,
        threshold within 1..recipients, every field its exact size, no trailing bytes."""
        reader = _Reader(data, "dealt shares")
        dealer, round_, threshold, count = reader.u32(), reader.u32(), reader.u32(), reader.u32()
        purpose = reader.take(16).rstrip(b"\0").decode("ascii", errors="replace")
        if purpose not in (SELF_MASK, MASK_KEY):
            raise SecAggError(f"dealt shares: unknown purpose {purpose!r}")
        commitment = reader.take(32)
        if count > reader.remaining // (4 + _CIPHERTEXT_BYTES + 32):
            raise SecAggError(f"dealt shares: {count} recipients do not fit the payload")
        recipients, ciphertexts, commitments = [], [], []
        for _ in range(count):
            recipients.append(reader.u32())
            ciphertexts.append(reader.take(_CIPHERTEXT_BYTES))
            commitments.append(reader.take(32))
        reader.end()
        if any(b <= a for a, b in pairwise(recipients)):
            raise SecAggError("dealt shares: recipients are not strictly increasing")
        if not 1 <= threshold <= count:
            raise SecAggError(f"dealt shares: threshold {threshold} outside 1..{count}")
        return cls(
            dealer,
            purpose,
            round_,
            threshold,
            tuple(recipients),
            tuple(ciphertexts),
            tuple(commitments),
            commitment,
        )


def deal_shares(
    secret: int,
    purpose: str,
    dealer: ClientKeys,
    peers: Sequence[KeyBundle],
    threshold: int,
    task: str,
    round_: int,
    random_bytes: RandomBytes,
) -> DealtShares:
    """Shamir-share ``secret`` among ``peers`` (every registered client), encrypted to each."""
    return deal_shares_to(
        secret,
        purpose,
        dealer,
        {p.index: p.enc_pk for p in peers},
        threshold,
        task,
        round_,
        random_bytes,
    )


def deal_shares_to(
    secret: int,
    purpose: str,
    dealer: ClientKeys,
    enc_keys: Mapping[int, bytes],
    threshold: int,
    task: str,
    round_: int,
    random_bytes: RandomBytes,
) -> DealtShares:
    """Shamir-share ``secret`` among the clients of ``enc_keys`` (index -> enc public key),
    each share encrypted to its holder; the dealer always keeps a share too."""
    if purpose not in (SELF_MASK, MASK_KEY):
        raise ConfigError(f"purpose {purpose!r}: must be {SELF_MASK!r} or {MASK_KEY!r}")
    by_index = dict(enc_keys)
    by_index.setdefault(dealer.index, dealer.bundle.enc_pk)  # the dealer keeps a share too
    recipients = sorted(by_index)
    if not 1 <= threshold <= len(recipients):
        raise ConfigError(f"threshold {threshold!r}: must be in 1..{len(recipients)} (clients)")
    shares = shamir.split(secret, [r + 1 for r in recipients], threshold, random_bytes)
    ciphertexts, commitments = [], []
    for recipient, share in zip(recipients, shares, strict=True):
        aead, ad = _channel(
            dealer.enc_secret,
            by_index[recipient],
            purpose,
            task,
            round_,
            dealer.index,
            recipient,
        )
        ciphertexts.append(aead.encrypt(bytes(12), _seed_bytes(share), ad))
        commitments.append(_share_commitment(purpose, dealer.index, recipient, task, round_, share))
    return DealtShares(
        dealer.index,
        purpose,
        round_,
        threshold,
        tuple(recipients),
        tuple(ciphertexts),
        tuple(commitments),
        _secret_commitment(purpose, dealer.index, task, round_, secret),
    )


def open_share(
    dealt: DealtShares, me: ClientKeys, dealer_bundle: KeyBundle, task: str
) -> int | None:
    """Decrypt my share of ``dealt``; None if it does not decrypt or open its commitment."""
    return open_share_from(dealt, me, dealer_bundle.enc_pk, task)


def open_share_from(
    dealt: DealtShares, me: ClientKeys, dealer_enc_pk: bytes, task: str
) -> int | None:
    """:func:`open_share` given only the dealer's encryption public key."""
    pos = dealt.position(me.index)
    aead, ad = _channel(
        me.enc_secret,
        dealer_enc_pk,
        dealt.purpose,
        task,
        dealt.round,
        dealt.dealer,
        me.index,
    )
    try:
        share = int.from_bytes(aead.decrypt(bytes(12), dealt.ciphertexts[pos], ad), "big")
    except InvalidTag:
        return None
    expected = _share_commitment(dealt.purpose, dealt.dealer, me.index, task, dealt.round, share)
    return share if expected == dealt.commitments[pos] else None


def mask_update(
    update: NDArray[np.integer],
    me: ClientKeys,
    peers: Sequence[KeyBundle],
    self_mask: int,
    task: str,
    round_: int,
    neighbours: Collection[int] | None = None,
) -> NDArray[np.uint32]:
    """``y = x + PRG(b) + Σ s(u,v)·PRG(k_uvr)`` in Z_2^32 over every other peer, or only the
    peers in ``neighbours`` (SecAgg+: the client's neighbours in the round's mask graph)."""
    x = np.asarray(update)
    if x.ndim != 1 or not np.issubdtype(x.dtype, np.integer):
        raise ConfigError("the update must be a flat integer (fixed-point) vector")
    y = x.astype(np.int64).astype(RING)  # two's complement: int32 values embed in Z_2^32
    y += expand_mask(_seed_bytes(self_mask), x.size)
    for peer in peers:
        if peer.index == me.index or (neighbours is not None and peer.index not in neighbours):
            continue
        p = expand_mask(
            pairwise_seed(me.mask_secret, peer.mask_pk, task, round_, me.index, peer.index), x.size
        )
        if me.index < peer.index:
            y += p
        else:
            y -= p
    return y


@dataclass(frozen=True)
class Reveal:
    """What surviving client ``revealer`` publishes after the included set is fixed:
    its share of each included client's self mask and of each dropped client's mask key."""

    revealer: int
    round: int
    self_mask_shares: Mapping[int, int] = field(default_factory=dict)
    mask_key_shares: Mapping[int, int] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        def part(d: Mapping[int, int]) -> bytes:
            return struct.pack("<I", len(d)) + b"".join(
                struct.pack("<I", k) + _seed_bytes(d[k]) for k in sorted(d)
            )

        return (
            _DOMAIN
            + struct.pack("<II", self.revealer, self.round)
            + part(self.self_mask_shares)
            + part(self.mask_key_shares)
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> Reveal:
        """Parse :meth:`to_bytes` strictly (dealers strictly increasing, shares < P)."""
        reader = _Reader(data, "reveal")
        revealer, round_ = reader.u32(), reader.u32()

        def part() -> dict[int, int]:
            count = reader.u32()
            if count > reader.remaining // 36:
                raise SecAggError(f"reveal: {count} shares do not fit the payload")
            out: dict[int, int] = {}
            last = -1
            for _ in range(count):
                dealer = reader.u32()
                share = int.from_bytes(reader.take(32), "big")
                if dealer <= last:
                    raise SecAggError("reveal: dealers are not strictly increasing")
                if share >= shamir.FIELD_PRIME:
                    raise SecAggError("reveal: a share is not a field element")
                out[dealer] = share
                last = dealer
            return out

        selfs = part()
        keys = part()
        reader.end()
        return cls(revealer, round_, selfs, keys)


def make_reveal(
    me: ClientKeys,
    round_: int,
    included: Iterable[int],
    self_masks: Mapping[int, DealtShares],
    mask_keys: Mapping[int, DealtShares],
    bundles: Mapping[int, KeyBundle],
    task: str,
) -> Reveal:
    """My reveal for ``round_``: self-mask shares of the included clients, mask-key shares of
    the dropped ones (registered clients not included). A client never reveals both for
    the same peer, and shares that do not open are left out (they count as missing)."""
    inc = set(included)
    selfs: dict[int, int] = {}
    keys: dict[int, int] = {}
    for dealer in sorted(bundles):
        if dealer in inc:
            dealt = self_masks.get(dealer)
            target = selfs
        else:
            dealt = mask_keys.get(dealer)
            target = keys
        if dealt is None or not dealt.holds(me.index):
            continue
        share = open_share(dealt, me, bundles[dealer], task)
        if share is not None:
            target[dealer] = share
    return Reveal(me.index, round_, selfs, keys)


@dataclass(frozen=True)
class UnmaskResult:
    """The exact sum (int64 values of the int32 ring, i.e. two's complement), and the
    revealers whose shares failed their dealer's commitment (``(revealer, dealer)``)."""

    total: NDArray[np.int64]
    bad_shares: tuple[tuple[int, int], ...]

    def to_bytes(self) -> bytes:
        return self.total.astype("<i8").tobytes()


def _recover(
    dealt: DealtShares, reveals: Sequence[Reveal], attr: str, task: str, bad: list[tuple[int, int]]
) -> int | None:
    """The secret of ``dealt`` from the first ``t`` valid revealed shares (by revealer)."""
    points = []
    for rev in sorted(reveals, key=lambda r: r.revealer):
        shares = getattr(rev, attr)
        if dealt.dealer not in shares or not dealt.holds(rev.revealer):
            continue
        share = shares[dealt.dealer]
        pos = dealt.position(rev.revealer)
        expected = _share_commitment(
            dealt.purpose, dealt.dealer, rev.revealer, task, dealt.round, share
        )
        if not 0 <= share < shamir.FIELD_PRIME or expected != dealt.commitments[pos]:
            bad.append((rev.revealer, dealt.dealer))
            continue
        points.append((rev.revealer + 1, share))
        if len(points) == dealt.threshold:
            return shamir.combine(points)
    return None


def unmask_sum(
    round_: int,
    task: str,
    bundles: Mapping[int, KeyBundle],
    masked: Mapping[int, NDArray[np.uint32]],
    self_masks: Mapping[int, DealtShares],
    mask_keys: Mapping[int, DealtShares],
    reveals: Sequence[Reveal],
    graph: Callable[[int], Collection[int]] | None = None,
) -> UnmaskResult:
    """``Σ_{u ∈ included} x_u`` from published material only (pure, deterministic).

    ``bundles``: every registered client's keys in force this round (the peer set);
    ``masked``: the included clients' masked updates; ``self_masks``: their dealt self-mask
    shares; ``mask_keys``: the dealt mask-key shares of every registered client; ``reveals``:
    what the survivors revealed; ``graph``: the share holders (neighbours, the client itself
    included) of each client in the round's mask graph (None: the full graph). Only what is
    needed is reconstructed: the self mask of every included client and the mask key of every
    dropped client with an included neighbour (SecAgg+, Bell et al. 2020). Raises
    :class:`SecAggThresholdError` when some secret has fewer than its threshold of valid
    shares, :class:`SecAggShareError` (role ``dealer``) when a dealer's shares reconstruct
    to something other than its commitment.
    """
    included = sorted(masked)
    if not included:
        raise SecAggError("no included update to aggregate")
    unknown = [u for u in included if u not in bundles]
    if unknown:
        raise SecAggError(f"included clients {unknown} have no registered key bundle")
    members = set(included)
    partners: dict[int, list[int]] = {}  # dropped v -> included clients that masked with it
    for v in sorted(bundles):
        if v in masked:
            continue
        linked = included if graph is None else sorted(members & set(graph(v)) - {v})
        if linked:
            partners[v] = linked
    dropped = list(partners)
    dims = {np.asarray(masked[u]).shape for u in included}
    if len(dims) != 1 or len(next(iter(dims))) != 1:
        raise SecAggError("masked updates differ in shape or are not flat")
    dim = next(iter(dims))[0]
    bad: list[tuple[int, int]] = []
    missing: dict[int, int] = {}
    self_seeds: dict[int, int] = {}
    for u in included:
        dealt = self_masks.get(u)
        if dealt is None:
            raise SecAggError(f"client {u} is included but dealt no self-mask shares")
        secret = _recover(dealt, reveals, "self_mask_shares", task, bad)
        if secret is None:
            missing[u] = _valid_count(dealt, reveals, "self_mask_shares", task)
            continue
        if _secret_commitment(SELF_MASK, u, task, round_, secret) != dealt.secret_commitment:
            raise SecAggShareError(
                f"client {u}'s self-mask shares reconstruct to a value that does not match "
                "its commitment: the dealer is at fault",
                culprit=u,
                role="dealer",
            )
        self_seeds[u] = secret
    key_secrets: dict[int, int] = {}
    for v in dropped:
        dealt = mask_keys.get(v)
        if dealt is None:
            missing[v] = 0
            continue
        secret = _recover(dealt, reveals, "mask_key_shares", task, bad)
        if secret is None:
            missing[v] = _valid_count(dealt, reveals, "mask_key_shares", task)
            continue
        if _public_bytes(_private_key(secret)) != bundles[v].mask_pk:
            raise SecAggShareError(
                f"dropped client {v}'s mask-key shares reconstruct to a key that is not its "
                "registered public key: the dealer is at fault",
                culprit=v,
                role="dealer",
            )
        key_secrets[v] = secret
    if missing:
        raise SecAggThresholdError(
            f"round {round_}: too few valid shares to unmask (client: valid shares) {missing}",
            missing,
        )
    total = np.zeros(dim, dtype=RING)
    for u in included:
        total += np.asarray(masked[u], dtype=RING)
        total -= expand_mask(_seed_bytes(self_seeds[u]), dim)
    for v in dropped:
        for u in partners[v]:
            p = expand_mask(
                pairwise_seed(key_secrets[v], bundles[u].mask_pk, task, round_, u, v), dim
            )
            if u < v:  # u added +p for its pair with v
                total -= p
            else:
                total += p
    return UnmaskResult(total.view(np.int32).astype(np.int64), tuple(sorted(set(bad))))


def _valid_count(dealt: DealtShares, reveals: Sequence[Reveal], attr: str, task: str) -> int:
    count = 0
    for rev in reveals:
        shares = getattr(rev, attr)
        if dealt.dealer in shares and dealt.holds(rev.revealer):
            share = shares[dealt.dealer]
            expected = _share_commitment(
                dealt.purpose, dealt.dealer, rev.revealer, task, dealt.round, share
            )
            if (
                0 <= share < shamir.FIELD_PRIME
                and expected == dealt.commitments[dealt.position(rev.revealer)]
            ):
                count += 1
    return count
