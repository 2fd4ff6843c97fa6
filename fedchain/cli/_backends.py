"""Throw-away anvil and IPFS daemons for ``--backend real``."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def backends(args: argparse.Namespace) -> Iterator[dict[str, Any]]:
    """With --backend real: a throw-away anvil and IPFS daemon for this command."""
    if getattr(args, "backend", "embedded") != "real":
        yield {}
        return
    import tempfile
    from pathlib import Path

    from adapters.services import AnvilService, IpfsService

    with (
        tempfile.TemporaryDirectory(prefix="fedchain-backends-") as tmp,
        AnvilService(Path(tmp) / "anvil", die_with_parent=True) as anvil,
        IpfsService(Path(tmp) / "ipfs", die_with_parent=True) as ipfs,
    ):
        yield {
            "rpc_url": anvil.url,
            "funding_key": anvil.funding_key,
            "store": "ipfs:" + ipfs.api_multiaddr,
        }
