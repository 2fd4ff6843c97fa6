"""The multi-process testnet: a real chain (anvil), a real IPFS daemon and one OS process per
node.

``cluster`` (``fedchain testnet up|status|kill|start|down``), ``node`` (a node process's entry
point), ``pbft_service`` (PBFT over TCP between aggregator processes) and ``netem`` (the
user-space network-emulation proxy).
"""
