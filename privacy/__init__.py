"""Privacy that stays verifiable: pure cores for DP mechanisms, accounting, secure
aggregation and homomorphic aggregation (see docs/privacy.md).

The package sits beside ``adapters`` in the layers (docs/architecture.md): it imports only
``protocol`` and the maintained libraries it builds on (``dp-accounting`` for privacy
accounting, ``cryptography`` for X25519 / HKDF / ChaCha20 / AEAD, ``phe`` for Paillier).
Every function here is a pure function of its arguments; randomness is always passed in
(a NumPy ``Generator`` for DP noise, a ``random_bytes`` callable for key material), so
the same inputs give the same outputs in any process.
"""
