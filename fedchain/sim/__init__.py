"""The in-process simulator: one process drives the chain, the clients and every aggregator.

``runner`` (``Demo``: ``fedchain demo`` / ``fedchain run``), ``driver/`` (one module per
concern of the round loop) and ``scenario`` (scenario files: faults, behaviours,
expectations).
"""
