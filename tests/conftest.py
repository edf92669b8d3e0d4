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



@pytest.fixture
def isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TURBOYOLO_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def boxes_dataset(tmp_path, isolated_cache) -> Path:
    from synth import make_image_folder

    make_image_folder(tmp_path / "ds", count=6, size=(96, 128), ext=".png", num_classes=1)
    return tmp_path / "ds"


@pytest.fixture(scope="session")
def tiny_cfg(tmp_path_factory) -> Path:
    """A 1-class yolov3-tiny cfg at 64 px (random weights are enough to exercise the plumbing)."""
    from turboyolo.formats.darknet_cfg import write_cfg
    from turboyolo.model.zoo import make_spec

    path = tmp_path_factory.mktemp("cfg") / "tiny-1c.cfg"
    write_cfg(make_spec("yolov3-tiny", 1, 64, 64, batch=1, subdivisions=1), path)
    return path
