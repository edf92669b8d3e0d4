from __future__ import annotations

from types import SimpleNamespace

import cv2
import numpy as np
import pytest

from turboyolo.errors import ConfigError
from turboyolo.infer.tiling import (
    Detections,
    TileOptions,
    detect_tiled,
    merge_detections,
    tile_origins,
    tile_windows,
)


def test_tiles_cover_the_image_and_stay_inside():
    assert tile_origins(1000, 416, 0.2) == [0, 333, 584]
    assert tile_origins(300, 416, 0.2) == [0]
    windows = tile_windows(1000, 700, 416, 0.2)
    covered = np.zeros((700, 1000), bool)
    for x0, y0, x1, y1 in windows:
        assert 0 <= x0 < x1 <= 1000 and 0 <= y0 < y1 <= 700 and x1 - x0 == 416 and y1 - y0 == 416
        covered[y0:y1, x0:x1] = True
    assert covered.all()
    with pytest.raises(ConfigError):
        TileOptions(416, overlap=1.0)


def _dets(boxes, scores, cut, windows, classes=None):
    n = len(boxes)
    return Detections(
        np.array(boxes, np.float32),
        np.array(scores, np.float32),
        np.array(classes or [0] * n, np.int64),
        np.array(cut, bool),
        np.array(windows, np.float32),
    )


A, B, C = [0, 0, 416, 416], [333, 0, 749, 416], [666, 0, 1082, 416]


def test_cut_part_inside_a_full_box_is_dropped_and_halves_are_joined():
    # an object seen whole by one tile and cut by the other
    merged = merge_detections(
        _dets([[380, 10, 416, 50], [381, 11, 460, 49]], [0.9, 0.6], [True, False], [A, B])
    )
    assert len(merged.scores) == 1
    np.testing.assert_allclose(merged.boxes[0], [380, 10, 460, 50])
    assert merged.scores[0] == pytest.approx(0.9)
    # an object larger than the overlap: three cut parts from three tiles -> one box
    parts = [[300, 100, 416, 200], [333, 101, 749, 199], [666, 100, 800, 200]]
    merged = merge_detections(_dets(parts, [0.5, 0.7, 0.6], [True, True, True], [A, B, C]))
    np.testing.assert_allclose(merged.boxes, [[300, 100, 800, 200]])
    # two different objects cut by the same edge, side by side in the strip: kept apart
    merged = merge_detections(
        _dets([[380, 10, 416, 50], [340, 60, 400, 100]], [0.9, 0.8], [True, True], [A, B])
    )
    assert len(merged.scores) == 2


def test_whole_boxes_are_never_joined_and_classes_stay_apart():
    # a small box inside a big one, neither cut: two objects (e.g. a tree under a larger crown)
    merged = merge_detections(_dets([[0, 0, 100, 100], [10, 10, 30, 30]], [0.9, 0.8], [False, False], [A, B]))
    assert len(merged.scores) == 2
    merged = merge_detections(
        _dets([[0, 0, 50, 50], [0, 0, 50, 50]], [0.9, 0.8], [True, True], [A, B], [0, 1])
    )
    assert sorted(merged.classes.tolist()) == [0, 1]


def _oracle(crops):
    """A perfect 'detector' on what each crop shows: one box per coloured blob (cut ones included)."""
    out = []
    for crop in crops:
        count, _, stats, _ = cv2.connectedComponentsWithStats(
            (crop.max(2) > 0).astype(np.uint8), connectivity=4
        )
        boxes = np.array([[x, y, x + w, y + h] for x, y, w, h, _ in stats[1:]], np.float32).reshape(-1, 4)
        out.append(
            SimpleNamespace(
                boxes=boxes,
                scores=np.full(len(boxes), 0.9, np.float32),
                classes=np.zeros(len(boxes), np.int64),
            )
        )
    return out


def test_tiled_oracle_finds_every_object_once():
    rng = np.random.default_rng(0)
    image = np.zeros((700, 900, 3), np.uint8)
    truth = []
    for _ in range(200):  # non-touching rectangles of 10..170 px, some larger than the 32 px overlap
        w, h = rng.integers(10, 170, 2)
        x, y = rng.integers(0, 900 - w), rng.integers(0, 700 - h)
        if image[max(y - 2, 0) : y + h + 2, max(x - 2, 0) : x + w + 2].any():
            continue
        image[y : y + h, x : x + w] = rng.integers(60, 255, 3)
        truth.append([x, y, x + w, y + h])
    truth = np.array(truth, np.float32)
    merged = detect_tiled(_oracle, image, TileOptions(128, overlap=0.25))
    assert len(merged.boxes) == len(truth) > 30
    order = np.lexsort(merged.boxes.T[::-1])
    np.testing.assert_allclose(merged.boxes[order], truth[np.lexsort(truth.T[::-1])])


@pytest.mark.slow
def test_detect_command_with_tiles(tiny_cfg, tmp_path):
    from turboyolo.cli import main
    from turboyolo.model.loading import build_model, save_darknet_weights

    weights = save_darknet_weights(build_model(tiny_cfg), tmp_path / "tiny.weights")
    image = np.random.default_rng(0).integers(0, 255, (200, 300, 3), np.uint8)
    cv2.imwrite(str(tmp_path / "big.png"), image)
    args = [
        "detect",
        str(tmp_path / "big.png"),
        "--cfg",
        str(tiny_cfg),
        "--weights",
        str(weights),
        "--tile",
        "64",
        "--overlap",
        "0.25",
        "--tile-whole",
        "--conf-thres",
        "0.3",
        "--save-txt",
        "--project",
        str(tmp_path / "runs"),
        "--device",
        "cpu",
    ]
    assert main(args) == 0
    assert (tmp_path / "runs" / "exp" / "labels" / "big.txt").is_file()
    assert main(args[:-4] + ["--fast-decode"]) == 1  # full resolution is the point of --tile


def test_tiled_detect_caps_the_merged_detections_and_says_so(tiny_cfg, tmp_path, capsys):
    """--max-det caps an image's merged detections (not each tile's) and the caps line counts the image
    once, as it does untiled."""
    from turboyolo.cli import main
    from turboyolo.model.loading import build_model, save_darknet_weights

    weights = save_darknet_weights(build_model(tiny_cfg), tmp_path / "tiny.weights")
    cv2.imwrite(str(tmp_path / "big.png"), np.random.default_rng(1).integers(0, 255, (160, 256, 3), np.uint8))
    args = ["detect", str(tmp_path / "big.png"), "--cfg", str(tiny_cfg), "--weights", str(weights), "--tile",
            "64", "--conf-thres", "0.001", "--save-txt", "--device", "cpu", "--project",
            str(tmp_path / "runs")]
    assert main([*args, "--max-det", "3"]) == 0
    assert len((tmp_path / "runs" / "exp" / "labels" / "big.txt").read_text().splitlines()) == 3
    assert "caps: 3 detections (--max-det) reached on 1 of 1 images" in capsys.readouterr().err
    assert main([*args, "--max-det", "100000"]) == 0  # an untrained model: more than 3 boxes, no cap
    assert len((tmp_path / "runs" / "exp2" / "labels" / "big.txt").read_text().splitlines()) > 3
    assert "caps:" not in capsys.readouterr().err
