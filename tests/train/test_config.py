"""The training options: one spelling per option (renamed keys of stored runs still read), and every
field of every group a flag."""

from __future__ import annotations

from dataclasses import fields

import pytest
import yaml

from turboyolo.cli import build_parser
from turboyolo.train.config import GROUPS, TrainConfig, read_config, read_hyp


def test_assign_iou_thres_has_the_flags_spelling_and_old_files_still_read(tmp_path):
    config = TrainConfig.build("a.cfg", "a.data", assign_iou_thres=0.3)
    assert config.loss.assign_iou_thres == 0.3 and "assign_iou_thres" in config.as_dict()["loss"]
    stored = config.as_dict()
    stored["loss"]["assign_iou_thresh"] = stored["loss"].pop("assign_iou_thres")  # as 0.1 wrote it
    stored["given"] = ["assign_iou_thresh"]
    again = TrainConfig.from_dict(stored)
    assert again.loss.assign_iou_thres == 0.3 and again.given == ("assign_iou_thres",)
    (tmp_path / "old.yaml").write_text(yaml.safe_dump({"loss": {"assign_iou_thresh": 1}}))
    assert read_config(tmp_path / "old.yaml") == {"assign_iou_thres": 1}
    assert read_hyp(tmp_path / "old.yaml") == {"assign_iou_thres": 1}
    assert TrainConfig.build("a.cfg", "a.data", assign_iou_thresh=0.5).loss.assign_iou_thres == 0.5
    argv = ["train", "--cfg", "a.cfg", "-d", "a.data", "--assign-iou-thres", "0.4"]
    args = build_parser("train").parse_args(argv)
    assert TrainConfig.from_flags(args).loss.assign_iou_thres == 0.4


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_every_option_is_a_flag(group):
    parser = build_parser("train")
    actions = {action.dest for action in parser._subparsers._group_actions[0].choices["train"]._actions}
    assert {item.name for item in fields(GROUPS[group])} <= actions
