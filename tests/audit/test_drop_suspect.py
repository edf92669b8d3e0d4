"""``turboyolo train --drop-suspect``: what an audit flags is left out of training (images, or boxes with
their background ignored), the choice is in config.yaml, and a wrong path names its flag."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from synth import make_dataset, micro_cfg
from turboyolo.cli import main
from turboyolo.data.scan import scan_dataset
from turboyolo.data.suspects import apply_suspects
from turboyolo.formats.issues import LabelIssue, write_issues


def _pixels(sample, row: int) -> tuple[float, ...]:
    height, width = sample.hw
    _, cx, cy, w, h = (float(v) for v in sample.labels[row])
    return ((cx - w / 2) * width, (cy - h / 2) * height, (cx + w / 2) * width, (cy + h / 2) * height)


def _issue(sample, row: int, kind: str, score: float) -> LabelIssue:
    height, width = sample.hw
    return LabelIssue(str(sample.image), kind, score, int(sample.labels[row, 0]), _pixels(sample, row),
                      width=width, height=height)


def test_box_action_drops_the_flagged_boxes_and_ignores_those_images_background(tmp_path):
    data = make_dataset(tmp_path / "data", num_train=6, num_val=2, num_classes=2, seed=3)
    scan = scan_dataset(data, "train")
    two = next(s for s in scan.samples if len(s.labels) == 2)
    other = next(s for s in scan.samples if s is not two)
    issues = [_issue(two, 1, "class", 0.9), _issue(other, 0, "spurious", 0.3),  # under the score: kept
              LabelIssue(str(other.image), "missing", 0.8, 0, (1, 1, 9, 9)),
              LabelIssue(str(two.image), "location", 0.95, 1 - int(two.labels[0, 0]), _pixels(two, 0))]
    line = apply_suspects(scan, issues, 0.5, "box")
    after = {str(s.image): s for s in scan.samples}
    assert np.array_equal(after[str(two.image)].labels, two.labels[:1])  # the class row dropped
    assert after[str(two.image)].partial and after[str(other.image)].partial
    assert len(after[str(other.image)].labels) == len(other.labels)
    assert sum(s.partial for s in scan.samples) == 2
    # the location row names another class than the box: it no longer matches the file, and says so
    assert line.startswith("1 boxes dropped, 2 images without background loss") and "1 flagged boxes" in line


def test_train_leaves_out_the_images_an_audit_flags_and_records_it(tmp_path, capsys):
    data = make_dataset(tmp_path / "data", num_train=8, num_val=2, num_classes=2)
    samples = scan_dataset(data, "train").samples
    audit = tmp_path / "audit"
    audit.mkdir()
    write_issues(audit / "label_issues.csv", [_issue(samples[1], 0, "class", 0.8),
                                              _issue(samples[4], 0, "spurious", 0.6),
                                              _issue(samples[5], 0, "spurious", 0.4)], ["c0", "c1"])
    cfg = micro_cfg(tmp_path / "micro.cfg", num_classes=2, batch=2)
    assert main(["train", "--cfg", str(cfg), "--data", str(data), "--epochs", "1", "--workers", "0",
                 "--evaluation-interval", "0", "--project", str(tmp_path / "runs"),
                 "--drop-suspect", str(audit), "--suspect-score", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "2 images left out (--drop-suspect, score >= 0.5)" in out
    assert "training on cpu: 6 images" in out
    saved = yaml.safe_load((tmp_path / "runs" / "exp" / "config.yaml").read_text())
    assert saved["data_args"]["drop_suspect"] == str(audit) and saved["data_args"]["suspect_score"] == 0.5
    assert saved["data_args"]["suspect_action"] == "image" and saved["sources"]["drop_suspect"] == "flag"


@pytest.mark.parametrize("flags, message", [
    (["--drop-suspect", "nowhere"], "--drop-suspect nowhere: no label_issues.csv there"),
    (["--drop-suspect", "x", "--suspect-score", "2"], "--suspect-score must be in [0, 1]"),
])
def test_bad_drop_suspect_values_name_their_flag(tmp_path, capsys, flags, message):
    data = make_dataset(tmp_path / "data", num_train=2, num_val=1)
    cfg = micro_cfg(tmp_path / "micro.cfg", batch=2)
    assert main(["train", "--cfg", str(cfg), "--data", str(data), "--epochs", "1", "--workers", "0",
                 "--project", str(tmp_path / "runs"), *flags]) == 1
    assert message in capsys.readouterr().err
    assert not list(Path(tmp_path / "runs").glob("exp*"))


def test_box_action_counts_only_the_images_it_made_partial(tmp_path):
    """An image --unreviewed ignore already trains without background loss is not counted again."""
    from dataclasses import replace

    data = make_dataset(tmp_path / "data", num_train=6, num_val=2, num_classes=2, seed=3)
    scan = scan_dataset(data, "train")
    first, second = scan.samples[0], scan.samples[1]
    scan.samples[0] = replace(first, partial=True)  # as --unreviewed ignore leaves a model-made file
    issues = [_issue(first, 0, "class", 0.9), _issue(second, 0, "class", 0.9)]
    line = apply_suspects(scan, issues, 0.5, "box")
    assert line.startswith("2 boxes dropped, 1 images without background loss"), line
