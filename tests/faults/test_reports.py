"""Every excluded or fixed file is named with its reason: the first ones in the console (then "and M
more, see <report>"), all of them in a report that exists, whatever the command (train, test, prepare,
anchors) and whether the start then fails."""

from __future__ import annotations

import os
import re

from faults.hostile import LATIN1_NAME, good_jpeg, make_split, odd_name, truncated_jpeg
from synth import make_dataset, micro_cfg


def _train_args(cfg, data, project, *extra):
    return ["train", "--cfg", cfg, "--data", data, "--workers", 0, "--project", project, "--epochs", 1,
            "--evaluation-interval", 0, "--checkpoint-interval", 0, *extra]


def _break_training_set(root):
    """11 excluded images (one with a Latin-1 name) and 2 fixed label files added to train.txt."""
    images, labels = root / "images" / "train", root / "labels" / "train"
    added = [truncated_jpeg(odd_name(images, LATIN1_NAME))]
    added += [truncated_jpeg(images / f"cut{i}.jpg") for i in range(5)]
    for i in range(5):
        added.append(good_jpeg(images / f"badlabel{i}.jpg", seed=i))
        (labels / f"badlabel{i}.txt").write_text(f"{i + 3} 0.5 0.5 0.1 0.1\n")
    for i in range(2):
        added.append(good_jpeg(images / f"clipped{i}.jpg", seed=i))
        (labels / f"clipped{i}.txt").write_text("0 0.5 0.5 1.004 0.2\n")
    with open(root / "train.txt", "ab") as handle:
        handle.writelines(os.fsencode(path) + b"\n" for path in added)


def test_train_names_every_excluded_and_fixed_file(tmp_path, cli):
    data = make_dataset(tmp_path / "d", 4, 2)
    _break_training_set(tmp_path / "d")
    run = cli(*_train_args(micro_cfg(tmp_path / "m.cfg", batch=2), data, tmp_path / "runs"))
    run.assert_clean(0)
    report_path = tmp_path / "runs" / "exp" / "scan_report.txt"
    assert "11 excluded (5 bad label lines), 2 fixed" in run.output
    assert f"and 3 more, see {report_path}" in run.output  # 13 named: 10 here, the rest in the report
    console = re.findall(r"^  (?:excluded|fixed) .*$", run.output, re.M)
    assert len(console) == 10 and all(": " in line for line in console)
    report = report_path.read_text(encoding="utf-8")
    for name in ["caf\\xe9.jpg", *(f"cut{i}.jpg" for i in range(5)), *(f"badlabel{i}.jpg" for i in range(5)),
                 "clipped0.jpg", "clipped1.jpg"]:
        assert re.search(rf"^  .*/{re.escape(name)}: \S", report, re.M), name


def test_a_split_without_usable_images_names_the_split_the_files_and_a_report(tmp_path, cli):
    data = make_dataset(tmp_path / "d", 4, 0)
    val = [truncated_jpeg(tmp_path / "d" / "images" / "val" / f"v{i}.jpg") for i in range(7)]
    (tmp_path / "d" / "valid.txt").write_text("".join(f"{path}\n" for path in val))
    run = cli(*_train_args(micro_cfg(tmp_path / "m.cfg", batch=2), data, tmp_path / "runs"))
    run.assert_clean(1)
    error = run.output[run.output.index("error:"):]
    assert "no usable image in the val split: 7 listed, 7 excluded" in error
    assert "v0.jpg: truncated JPEG" in error and "and 2 more" in error
    report = re.search(r"every file with its reason: (\S+\.txt)", error).group(1)
    text = open(report, encoding="utf-8").read()
    assert all(f"{path}: truncated JPEG" in text for path in val)
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())  # no half-made run


def test_prepare_and_anchors_write_the_report_they_point_to(tmp_path, cli):
    make_split(tmp_path / "set", count=3)
    images = tmp_path / "set" / "images"
    for i in range(11):
        truncated_jpeg(images / f"cut{i:02d}.jpg")
    truncated_jpeg(odd_name(images, LATIN1_NAME))
    run = cli("prepare", "--data", images, "--split", "train", "--img-size", 64, "--out", tmp_path / "prep",
              "--workers", 1)
    run.assert_clean(0)
    report = tmp_path / "prep" / "train" / "scan_report.txt"
    assert "12 excluded" in run.output and f"and 2 more, see {report}" in run.output
    text = report.read_text(encoding="utf-8")
    assert "caf\\xe9.jpg: truncated JPEG" in text and text.count(": truncated JPEG") == 12
    run = cli("anchors", "--data", images, "--num", 2, "--restarts", 1)
    run.assert_clean(0)
    named = re.search(r"and 2 more, see (\S+)", run.output).group(1)
    assert open(named, encoding="utf-8").read().count(": truncated JPEG") == 12


def test_test_checks_class_ids_against_the_model_when_the_data_names_none(tmp_path, cli, tiny_model):
    cfg, weights, _, _ = tiny_model  # 2 classes
    make_split(tmp_path / "set", count=3)
    (tmp_path / "set" / "m.names").unlink()
    (tmp_path / "set" / "labels" / "img1.txt").write_text("5 0.5 0.5 0.2 0.2\n")
    run = cli("test", "--weights", weights, "--cfg", cfg, "--data", tmp_path / "set" / "images",
              "--workers", 0, "--batch-size", 2)
    run.assert_clean(0)
    assert "1 excluded" in run.output and "img1.jpg" in run.output and "class id 5" in run.output
