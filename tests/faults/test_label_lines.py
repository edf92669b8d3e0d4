"""Bad label lines (class id >= classes, NaN/inf, not a number, zero or negative size, a box far outside
the image) are each named with their line and reason, and counted, the same way by train, test, prepare
and anchors; a box just outside is clipped and named as fixed."""

from __future__ import annotations

import re

from faults.hostile import make_split

BAD = ("0 0.5 0.5 0.2 0.2\n"  # line 1: good
       "2 0.5 0.5 0.1 0.1\n"  # class id 2 with 2 classes
       "0 nan 0.5 0.1 0.1\n"
       "0 inf 0.5 0.1 0.1\n"
       "0 0.5 0.5 -0.1 0.1\n"
       "1 0.5 0.5 0.1 0\n"
       "0 0.5 0.5 0.1 two\n"
       "1 1.3 0.5 0.1 0.1\n")
REASONS = ("line 2: class id 2 out of range (names has 2)", "line 3: NaN or inf", "line 4: NaN or inf",
           "line 5: width/height <= 0", "line 6: width/height <= 0", "line 7: not a number",
           "line 8: box extends 0.350 outside the image")


def _broken_set(root):
    make_split(root, count=4)
    (root / "labels" / "img1.txt").write_text(BAD)
    (root / "labels" / "img2.txt").write_text("1 0.5 0.5 0.2 0.2\n0 0.995 0.5 0.02 0.2\n")  # clipped
    (root / "d.yaml").write_text(f"path: {root}\ntrain: images\nval: images\nnames: [apple, banana]\n")
    return root / "d.yaml"


def _assert_named(text: str) -> None:
    line = next(line for line in text.splitlines() if "img1.jpg" in line)
    assert "7 bad lines" in line and all(reason in line for reason in REASONS), line
    fixed = next(line for line in text.splitlines() if "img2.jpg" in line)
    assert "line 2: box clipped to the image" in fixed, fixed


def test_every_command_names_and_counts_each_bad_line(tmp_path, cli, tiny_model):
    from synth import micro_cfg

    cfg, weights, _, _ = tiny_model
    data = _broken_set(tmp_path / "set")
    summary = "1 excluded (7 bad label lines), 1 fixed"
    runs = {
        "prepare": cli("prepare", "--data", data, "--split", "train", "--img-size", 64, "--out",
                       tmp_path / "prep", "--workers", 1),
        "anchors": cli("anchors", "--data", data, "--num", 2, "--restarts", 1),
        "test": cli("test", "--weights", weights, "--cfg", cfg, "--data", data, "--workers", 0),
        "train": cli("train", "--cfg", micro_cfg(tmp_path / "m.cfg", batch=2, num_classes=2), "--data",
                     data, "--workers", 0, "--project", tmp_path / "runs", "--epochs", 1,
                     "--evaluation-interval", 0),
    }
    for name, run in runs.items():
        run.assert_clean(0)
        assert summary in run.output, name
        _assert_named(run.output)
    _assert_named((tmp_path / "prep" / "train" / "scan_report.txt").read_text(encoding="utf-8"))
    train_report = (tmp_path / "runs" / "exp" / "scan_report.txt").read_text(encoding="utf-8")
    assert len(re.findall("7 bad lines", train_report)) == 2  # both splits
    _assert_named(train_report)
