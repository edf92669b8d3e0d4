"""Fixtures for the after-training features: a tiny synthetic data set and a tiny untrained model."""

from __future__ import annotations

import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))


def make_boxes_dataset(
    root: Path,
    count: int = 6,
    size: tuple[int, int] = (96, 128),
    seed: int = 0,
    box_px: tuple[int, int] = (12, 30),
) -> list[Path]:
    """``root/images/*.png`` with coloured rectangles, ``root/labels/*.txt``, ``root/obj.names`` (1 class)."""
    from turboyolo.formats.labels import write_yolo_labels

    rng = np.random.default_rng(seed)
    (root / "images").mkdir(parents=True, exist_ok=True)
    (root / "obj.names").write_text("obj\n")
    height, width = size
    paths = []
    for i in range(count):
        image = np.full((height, width, 3), 90, np.uint8)
        rows = []
        for _ in range(2 + i % 2):
            bw, bh = rng.integers(*box_px, size=2)
            x1, y1 = rng.integers(0, width - bw), rng.integers(0, height - bh)
            image[y1 : y1 + bh, x1 : x1 + bw] = rng.integers(0, 255, 3)
            rows.append([0, (x1 + bw / 2) / width, (y1 + bh / 2) / height, bw / width, bh / height])
        path = root / "images" / f"img{i:02d}.png"
        cv2.imwrite(str(path), image)
        write_yolo_labels(root / "labels" / f"img{i:02d}.txt", rows)
        paths.append(path)
    return paths


@pytest.fixture
def isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TURBOYOLO_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def boxes_dataset(tmp_path, isolated_cache) -> Path:
    make_boxes_dataset(tmp_path / "ds")
    return tmp_path / "ds"


@pytest.fixture(scope="session")
def tiny_cfg(tmp_path_factory) -> Path:
    """A 1-class yolov3-tiny cfg at 64 px (random weights are enough to exercise the plumbing)."""
    from turboyolo.formats.darknet_cfg import write_cfg
    from turboyolo.model.zoo import make_spec

    path = tmp_path_factory.mktemp("cfg") / "tiny-1c.cfg"
    write_cfg(make_spec("yolov3-tiny", 1, 64, 64, batch=1, subdivisions=1), path)
    return path
