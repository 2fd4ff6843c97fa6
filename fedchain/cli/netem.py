"""``fedchain netem``: the WAN-emulating TCP proxy."""

from __future__ import annotations

import argparse


def main(args: argparse.Namespace) -> int:
    from fedchain.testnet.netem import command

    return command(args)
