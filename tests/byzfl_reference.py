"""ByzFL (PyPI ``byzfl``, pinned in requirements-reference.lock) as a float reference.

``import byzfl`` runs its package ``__init__``, which imports torchvision (its
benchmark data loaders) - not a fedchain dependency. Its aggregators and attacks need only
numpy, scipy and torch, so this helper imports ``byzfl.aggregators`` / ``byzfl.attacks``
under a bare parent package whose ``__init__`` does not run.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any

import pytest


def byzfl_module(name: str) -> Any:
    """``byzfl.<name>`` (``aggregators`` or ``attacks``); skips when byzfl is missing."""
    if "byzfl" not in sys.modules:
        spec = importlib.util.find_spec("byzfl")
        if spec is None or spec.submodule_search_locations is None:
            pytest.skip("byzfl is not installed (requirements-reference.lock)")
        pkg = types.ModuleType("byzfl")
        pkg.__path__ = list(spec.submodule_search_locations)
        sys.modules["byzfl"] = pkg
    return importlib.import_module(f"byzfl.{name}")
