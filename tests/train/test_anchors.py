"""The anchors job (turboyolo anchors) as a library call: report, reference anchors, flag errors."""

from __future__ import annotations

import pytest

from turboyolo.errors import ConfigError, FlagError
from turboyolo.train.anchors import AnchorsArgs, AnchorsRequest, run_anchors


def test_report_without_cfg_compares_with_coco_anchors(boxes_dataset):
    lines = []
    args = AnchorsArgs(num=6, img_size=(320, 256), restarts=2)
    report = run_anchors(AnchorsRequest(boxes_dataset / "images", anchors=args), log=lines.append)
    assert lines and lines[0].startswith("scan train")
    assert report.img_size == (320, 256) and report.current_name == "yolov3-tiny COCO"
    assert len(report.fitted.anchors) == 6 and report.fitted.mean_iou > report.current.mean_iou
    text = report.summary()
    assert "at 320x256 letterbox" in text and text.splitlines()[-1].startswith("use them: turboyolo cfg")


def test_errors_name_the_flag(boxes_dataset, tiny_cfg, tmp_path):
    data = boxes_dataset / "images"
    with pytest.raises(FlagError, match="--thresh"):
        AnchorsArgs(thresh=0)
    with pytest.raises(FlagError, match="--num"):
        AnchorsArgs(num=-1)
    with pytest.raises(ConfigError, match="--num 5 but"):
        run_anchors(AnchorsRequest(data, tiny_cfg, AnchorsArgs(num=5, output=str(tmp_path / "x.cfg"))))
