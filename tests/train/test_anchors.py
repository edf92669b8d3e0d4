"""The anchors job (turboyolo anchors) as a library call: report, reference anchors, flag errors."""

from __future__ import annotations

import pytest

from turboyolo.errors import ConfigError, FlagError
from turboyolo.train.anchors import anchor_report


def test_report_without_cfg_compares_with_coco_anchors(boxes_dataset):
    lines = []
    report = anchor_report(boxes_dataset / "images", num=6, img_size=(320, 256), restarts=2, log=lines.append)
    assert lines and lines[0].startswith("scan train")
    assert report.img_size == (320, 256) and report.current_name == "yolov3-tiny COCO"
    assert len(report.fitted.anchors) == 6 and report.fitted.mean_iou > report.current.mean_iou
    text = report.summary()
    assert "at 320x256 letterbox" in text and text.splitlines()[-1].startswith("use them: turboyolo cfg")


def test_errors_name_the_flag(boxes_dataset, tiny_cfg, tmp_path):
    data = boxes_dataset / "images"
    with pytest.raises(FlagError, match="--thresh"):
        anchor_report(data, thresh=0)
    with pytest.raises(FlagError, match="--num"):
        anchor_report(data, num=-1)
    with pytest.raises(ConfigError, match="--num 5 but"):
        anchor_report(data, cfg=tiny_cfg, num=5, output=tmp_path / "x.cfg")
