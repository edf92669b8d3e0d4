from __future__ import annotations

import numpy as np
import pytest

from turboyolo.cli import main
from turboyolo.data.anchors import anchor_fit, kmeans_anchors, letterbox_box_sizes, wh_iou
from turboyolo.errors import ConfigError


def test_wh_iou_matches_hand_values():
    iou = wh_iou(np.array([[2.0, 2.0], [4.0, 1.0]]), np.array([[2.0, 2.0], [4.0, 4.0]]))
    np.testing.assert_allclose(iou, [[1.0, 0.25], [2 / 6, 4 / 16]])


def test_letterbox_sizes_use_the_smaller_ratio():
    rows = np.array([[0, 0.5, 0.5, 0.5, 0.25]])
    # 200 x 100 (w x h) image into 400 x 400: ratio 2 (width-bound)
    sizes = letterbox_box_sizes([rows], [(100, 200)], (400, 400))
    np.testing.assert_allclose(sizes, [[200.0, 50.0]])


def test_kmeans_recovers_clusters_and_beats_poor_anchors():
    rng = np.random.default_rng(1)
    centres = np.array([[10, 12], [30, 60], [90, 70]], float)
    boxes = np.concatenate([c * rng.uniform(0.92, 1.08, (200, 2)) for c in centres])
    fit = kmeans_anchors(boxes, 3, seed=0)
    np.testing.assert_allclose(fit.anchors, centres, rtol=0.06)
    assert fit.mean_iou > 0.85 and fit.recall == 1.0 and fit.used == 3
    poor = anchor_fit(boxes, [[200, 200], [300, 300], [5, 5]])
    assert poor.mean_iou < fit.mean_iou and poor.recall < fit.recall
    again = kmeans_anchors(boxes, 3, seed=0)
    np.testing.assert_array_equal(again.anchors, fit.anchors)  # deterministic for a seed
    assert fit.text().count(",") == 5


def test_kmeans_needs_enough_boxes():
    with pytest.raises(ValueError):
        kmeans_anchors(np.array([[10.0, 10.0], [10.0, 10.0]]), 2)


def test_anchors_command_rewrites_cfg(boxes_dataset, tiny_cfg, tmp_path, capsys):
    from turboyolo.formats.darknet_cfg import YoloSpec, parse_cfg

    out = tmp_path / "fitted.cfg"
    data = str(boxes_dataset / "images")
    assert main(["anchors", "--data", data, "--cfg", str(tiny_cfg), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "current (tiny-1c.cfg)" in text and "fitted (k-means" in text
    fitted_line = next(line for line in text.splitlines() if line.startswith("fitted:"))
    anchors = [layer.anchors for layer in parse_cfg(out).layers if isinstance(layer, YoloSpec)]
    assert len(anchors) == 2 and anchors[0] == anchors[1] and len(anchors[0]) == 6
    assert fitted_line == "fitted: " + ", ".join(f"{int(w)},{int(h)}" for w, h in anchors[0])


def test_anchors_command_output_needs_cfg(boxes_dataset, tmp_path):
    from turboyolo.commands import anchors

    parser_args = ["anchors", "--data", str(boxes_dataset / "images"), "-o", str(tmp_path / "x.cfg")]
    assert main(parser_args) == 1
    with pytest.raises(ConfigError):
        anchors.run(_namespace(data=str(boxes_dataset), output=str(tmp_path / "x.cfg")))


def _namespace(**kwargs):
    import argparse

    defaults = dict(split="train", num=None, img_size=None, cfg=None, thresh=0.5, restarts=2, seed=0)
    defaults.update(kwargs)
    return argparse.Namespace(**defaults)
