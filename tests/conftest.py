"""Shared fixtures: the official yolov3-tiny weights (fetched once into the user cache) and paths."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS))  # shared helpers such as fidelity.py

DARKNET_CFG_DIR = Path("/usr/share/darknet/cfg")
DARKNET_DATA_DIR = Path("/usr/share/darknet/data")


@pytest.fixture(scope="session")
def tiny_weights() -> Path:
    """The official yolov3-tiny.weights, verified by sha256 (downloaded on first use)."""
    from turboyolo import assets
    from turboyolo.errors import AssetError

    try:
        return assets.fetch("yolov3-tiny", verbose=False)
    except AssetError as err:  # no network and no cache: say so rather than fail obscurely
        pytest.skip(f"yolov3-tiny weights unavailable: {err}")
