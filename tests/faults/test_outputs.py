"""The one output rule, through the commands a user types (issue 31, round three): no output is an input,
an existing file is replaced only when asked, a reused run directory never mixes two runs' files,
two inputs of one name get two outputs, ``--resume`` writes only into its run, a failed start leaves no
empty run directory."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import cv2
import numpy as np

from synth import make_dataset, make_image_folder, micro_cfg


def _video(path: Path, frames: int = 2, shade: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 5, (64, 48))
    for index in range(frames):
        writer.write(np.full((48, 64, 3), shade + 30 * index, np.uint8))
    writer.release()
    return path


def test_export_never_writes_over_its_inputs_or_an_existing_file_unasked(tmp_path, cli, tiny_model):
    cfg, weights, _, checkpoint = tiny_model
    copy = shutil.copy(checkpoint, tmp_path / "best.pt")
    before = Path(copy).read_bytes()
    run = cli("export", "--weights", copy, "-o", copy, "--no-check")
    run.assert_clean(1)
    assert f"-o/--output {copy} is the same file as the input --weights {copy}" in run.output
    assert Path(copy).read_bytes() == before  # the checkpoint is whole
    cfg_copy = shutil.copy(cfg, tmp_path / "m.cfg")
    run = cli("export", "--weights", weights, "--cfg", cfg_copy, "-o", "./m.cfg", "--no-check")
    run.assert_clean(1)
    assert "is the same file as the input --cfg" in run.output
    taken = tmp_path / "taken.onnx"
    taken.write_text("someone's file")
    run = cli("export", "--weights", copy, "-o", taken, "--no-check", "--exporter", "torchscript")
    run.assert_clean(1)
    assert f"{taken} exists; pass --overwrite" in run.output and taken.read_text() == "someone's file"
    run = cli("export", "--weights", copy, "-o", taken, "--no-check", "--exporter", "torchscript",
              "--overwrite")
    run.assert_clean(0)
    assert taken.read_bytes()[:8] != b"someone'"


def test_an_argument_error_found_late_leaves_no_empty_run_directory(tmp_path, cli, tiny_model):
    _, _, _, checkpoint = tiny_model
    run = cli("export", "--weights", checkpoint, "--img-size", "33", "--no-check",
              "--project", tmp_path / "r")
    run.assert_clean(1)
    assert "must be a multiple of 32" in run.output
    assert not (tmp_path / "r" / "exp").exists()


def test_cfg_and_anchors_refuse_an_existing_output_and_an_input(tmp_path, cli):
    taken = tmp_path / "mine.cfg"
    taken.write_text("# my notes\n")
    run = cli("cfg", "yolov3-tiny", "--num-classes", "2", "-o", taken)
    run.assert_clean(1)
    assert "exists; pass --overwrite" in run.output and taken.read_text() == "# my notes\n"
    cli("cfg", "yolov3-tiny", "--num-classes", "2", "-o", taken, "--overwrite").assert_clean(0)
    assert "[yolo]" in taken.read_text()
    data = make_dataset(tmp_path / "set", 3, 2)
    before = taken.read_text()
    run = cli("anchors", "--data", data, "--cfg", taken, "-o", taken)
    run.assert_clean(1)
    assert f"is the same file as the input --cfg {taken}" in run.output and taken.read_text() == before


def test_detect_gives_same_named_inputs_their_own_outputs(tmp_path, cli, tiny_model):
    _, _, _, checkpoint = tiny_model
    _video(tmp_path / "a" / "clip.mp4", shade=0)
    _video(tmp_path / "b" / "clip.mp4", shade=100)
    make_image_folder(tmp_path / "p", count=2, size=(48, 64), ext=".jpg")
    make_image_folder(tmp_path / "q", count=2, size=(48, 64), ext=".jpg")  # same names, other folder
    shutil.copy(tmp_path / "p" / "images" / "img000.jpg", tmp_path / "p" / "images" / "img000.png")
    run = cli("detect", "a/clip.mp4", "b/clip.mp4", "p/images", "q/images", "--weights", checkpoint,
              "--save-txt", "--project", "out")
    run.assert_clean(0)
    out = tmp_path / "out" / "exp"
    for drawn in ("a/clip.mp4", "b/clip.mp4", "p/images/img000.jpg", "q/images/img000.jpg"):
        assert (out / drawn).is_file(), drawn
    labels = sorted(str(p.relative_to(out / "labels")) for p in (out / "labels").rglob("*.txt"))
    assert labels == ["a/clip_0.txt", "a/clip_1.txt", "b/clip_0.txt", "b/clip_1.txt",
                      "p/images/img000.txt", "p/images/img000_png.txt", "p/images/img001.txt",
                      "q/images/img000.txt", "q/images/img001.txt"]
    assert (out / "p" / "images" / "img000.png").is_file()  # the .png's own drawing


def test_detect_exist_ok_removes_the_previous_runs_outputs(tmp_path, cli, tiny_model):
    _, _, _, checkpoint = tiny_model
    make_image_folder(tmp_path / "one", count=3, size=(48, 64), ext=".jpg")
    make_image_folder(tmp_path / "two", count=1, size=(48, 64), ext=".png")
    args = ("--weights", checkpoint, "--save-txt", "--project", "out", "--name", "run", "--exist-ok")
    cli("detect", "one/images", *args).assert_clean(0)
    run = cli("detect", "two/images", *args)
    run.assert_clean(0)
    out = tmp_path / "out" / "run"
    assert "file(s) of the previous run in" in run.output
    labels = sorted(p.name for p in (out / "labels").rglob("*.txt"))
    listed = {Path(r["file_name"]).stem for r in json.loads((out / "predictions.json").read_text())}
    assert labels == ["img000.txt"] and listed == {"img000"}  # only this run's files
    assert sorted(p.name for p in out.glob("*.jpg")) + sorted(p.name for p in out.glob("*.png")) == \
        ["img000.png"]


def test_detect_never_draws_over_its_input_images(tmp_path, cli, tiny_model):
    _, _, _, checkpoint = tiny_model
    make_image_folder(tmp_path / "set", count=2, size=(48, 64), ext=".jpg")
    before = {p.name: p.read_bytes() for p in (tmp_path / "set" / "images").iterdir()}
    run = cli("detect", "set/images", "--weights", checkpoint, "--project", "set", "--name", "images",
              "--exist-ok")
    run.assert_clean(1)
    assert "--project set/images lies inside the image folder set/images" in run.output
    assert {p.name: p.read_bytes() for p in (tmp_path / "set" / "images").iterdir()} == before


def _train(cli, tmp_path, *extra):
    cfg = micro_cfg(tmp_path / "micro.cfg", batch=2, learning_rate=0.01, max_batches=2)
    data = make_dataset(tmp_path / "set", 2, 2)
    return cli("train", "--cfg", cfg, "--data", data, "--device", "cpu", "--workers", "0", "--epochs", "1",
               "--evaluation-interval", "0", "--checkpoint-interval", "0", *extra)


def test_resume_writes_only_into_the_checkpoints_run_or_the_named_one(tmp_path, cli, trained_run_copy):
    downloads = tmp_path / "Downloads"
    downloads.mkdir()
    copied = shutil.copy(tmp_path / "runs" / "exp" / "weights" / "last.pt", downloads / "last.pt")
    (downloads / "config.yaml").write_text("my: own file\n")
    run = cli("train", "--resume", copied, "--device", "cpu", "--workers", "0")
    run.assert_clean(1)
    assert "not inside its run directory" in run.output and "--project/--name" in run.output
    assert sorted(p.name for p in downloads.iterdir()) == ["config.yaml", "last.pt"]
    assert (downloads / "config.yaml").read_text() == "my: own file\n"
    run = cli("train", "--resume", copied, "--device", "cpu", "--workers", "0", "--project", "runs",
              "--name", "continued", "--epochs", "2")
    run.assert_clean(0)
    assert "--resume writes into runs/continued (--project/--name)" in run.output
    assert (tmp_path / "runs" / "continued" / "weights" / "last.pt").is_file()
    assert sorted(p.name for p in downloads.iterdir()) == ["config.yaml", "last.pt"]
    own = tmp_path / "runs" / "exp" / "weights" / "last.pt"
    run = cli("train", "--resume", own, "--device", "cpu", "--workers", "0", "--epochs", "2")
    run.assert_clean(0)
    assert "(the checkpoint's own run directory)" in run.output
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["continued", "exp"]


def test_label_writes_where_the_trainer_reads_on_a_pytorch_yolov3_layout(tmp_path, cli, tiny_model):
    _, _, _, checkpoint = tiny_model
    make_image_folder(tmp_path / "src", count=3, size=(48, 64), ext=".jpg")
    images, labels = tmp_path / "set" / "train_images", tmp_path / "set" / "train_labels"
    shutil.copytree(tmp_path / "src" / "images", images)
    labels.mkdir()
    for name in ("img000", "img001"):  # human labels for two of the three images
        shutil.copy(tmp_path / "src" / "labels" / f"{name}.txt", labels / f"{name}.txt")
    human = (labels / "img000.txt").read_text()
    (tmp_path / "set" / "k.names").write_text("apple\nbanana\n")
    run = cli("label", "--weights", checkpoint, "--data", images)
    run.assert_clean(0)
    assert "1 labelled by the model" in run.output and "2 kept their existing labels" in run.output
    assert (labels / "img002.txt").is_file() and not list(images.glob("*.txt"))
    assert (labels / "img000.txt").read_text() == human
    run = cli("anchors", "--data", images, "-n", "1")  # the scan reads the same files
    run.assert_clean(0)
    assert "3 images found, 3 labelled" in run.output and "model-made" in run.output


def test_a_link_to_a_parent_folder_never_brings_another_splits_images(tmp_path, cli):
    make_dataset(tmp_path / "set", 3, 2)
    (tmp_path / "set" / "data.yaml").write_text("train: images/train\nval: images/val\nnames: [c0]\n")
    (tmp_path / "set" / "images" / "train" / "up").symlink_to("..")
    run = cli("anchors", "--data", tmp_path / "set" / "data.yaml", "-n", "1")
    run.assert_clean(0)
    assert "scan train: 3 images found" in run.output, run.output
    assert "a folder that holds" in run.output  # the link is named, not followed
    (tmp_path / "set" / "images" / "train" / "up").unlink()
    (tmp_path / "set" / "images" / "train" / "v").symlink_to("../val")  # straight into the val folder
    run = cli("anchors", "--data", tmp_path / "set" / "data.yaml", "-n", "1")
    run.assert_clean(0)
    assert "scan train: 3 images found" in run.output, run.output
    assert "2 image(s) of the other split's folder" in run.output
    (tmp_path / "set" / "images" / "train" / "v").unlink()
    (tmp_path / "set" / "images" / "train" / "v0.png").symlink_to("../val/val0.png")  # one file link
    run = cli("anchors", "--data", tmp_path / "set" / "data.yaml", "-n", "1")
    run.assert_clean(0)
    assert "scan train: 3 images found" in run.output
    assert "1 image(s) of the other split's folder" in run.output


def test_prepare_never_writes_its_cache_into_an_image_folder(tmp_path, cli):
    make_dataset(tmp_path / "set", 2, 1)
    (tmp_path / "set" / "d.yaml").write_text("train: images/train\nval: images/val\nnames: [c0]\n")
    before = sorted(p.name for p in (tmp_path / "set" / "images" / "train").iterdir())
    run = cli("prepare", "--data", tmp_path / "set" / "d.yaml", "--out", tmp_path / "set" / "images",
              "--img-size", "64")
    run.assert_clean(1)
    assert "cache folder" in run.output and "is an image folder of the data set" in run.output
    assert sorted(p.name for p in (tmp_path / "set" / "images" / "train").iterdir()) == before


def test_coco_gt_ids_of_two_images_of_one_name_keep_apart(tmp_path, cli, tiny_model):
    _, _, _, checkpoint = tiny_model
    make_image_folder(tmp_path / "train", count=1, size=(48, 64), ext=".jpg")
    make_image_folder(tmp_path / "val", count=1, size=(48, 64), ext=".jpg")
    gt = {"images": [{"id": 11, "file_name": "train/images/img000.jpg", "width": 64, "height": 48},
                     {"id": 22, "file_name": "val/images/img000.jpg", "width": 64, "height": 48}],
          "annotations": [], "categories": [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]}
    (tmp_path / "gt.json").write_text(json.dumps(gt))
    run = cli("detect", "train/images", "val/images", "--weights", checkpoint, "--coco-gt", "gt.json",
              "--project", "out")
    run.assert_clean(0)
    ids = {r["file_name"]: r["image_id"] for r in
           json.loads((tmp_path / "out" / "exp" / "predictions.json").read_text())}
    assert ids == {"train/images/img000.jpg": 11, "val/images/img000.jpg": 22}


def test_train_exist_ok_never_writes_over_its_own_input_weights(tmp_path, cli, trained_run_copy):
    last = tmp_path / "runs" / "exp" / "weights" / "last.pt"
    before = last.read_bytes()
    run = _train(cli, tmp_path, "--project", "runs", "--name", "exp", "--exist-ok", "--weights", last)
    run.assert_clean(1)
    assert "the run's weights/last.pt runs/exp/weights/last.pt is the same file as the input --weights" in \
        run.output
    assert last.read_bytes() == before


def test_a_run_directory_inside_the_image_folder_is_refused(tmp_path, cli, tiny_model):
    _, _, _, checkpoint = tiny_model
    make_image_folder(tmp_path / "set", count=2, size=(48, 64), ext=".jpg")
    run = cli("detect", "set", "--weights", checkpoint, "--project", "set/runs")
    run.assert_clean(1)
    assert "--project set/runs/exp lies inside the image folder set this command reads" in run.output
    assert not (tmp_path / "set" / "runs").exists()
    cfg = micro_cfg(tmp_path / "micro.cfg", batch=2, learning_rate=0.01, max_batches=2)
    make_dataset(tmp_path / "ds", 2, 2)
    (tmp_path / "ds" / "data.yaml").write_text("train: images/train\nval: images/val\nnames: [c0]\n")
    run = cli("train", "--cfg", cfg, "--data", tmp_path / "ds" / "data.yaml", "--device", "cpu",
              "--project", "ds/images/train/runs")
    run.assert_clean(1)
    assert "--project ds/images/train/runs/exp lies inside the image folder" in run.output
    assert not (tmp_path / "ds" / "images" / "train" / "runs").exists()


def test_label_never_writes_one_label_file_for_two_images(tmp_path, cli, tiny_model):
    _, _, _, checkpoint = tiny_model
    make_image_folder(tmp_path / "src", count=2, size=(48, 64), ext=".jpg")
    folder = tmp_path / "set"
    folder.mkdir()
    shutil.copy(tmp_path / "src" / "images" / "img000.jpg", folder / "x.jpg")
    shutil.copy(tmp_path / "src" / "images" / "img001.jpg", folder / "x.png")  # another picture, one stem
    run = cli("label", "--weights", checkpoint, "--data", folder)
    run.assert_clean(0)
    assert "1 labelled by the model" in run.output
    assert "1 not labelled: another image has the same label file" in run.output
    review = (tmp_path / "runs" / "label" / "exp" / "review.csv").read_text()
    assert "x.png" in review and "x.jpg has the same label file; rename one image" in review
    run = cli("anchors", "--data", folder, "-n", "1")  # the scan names the shared file
    run.assert_clean(0)
    assert "x.png: reads the same label file" in run.output and "as x.jpg" in run.output


def test_an_output_under_a_regular_file_is_named_before_any_work(tmp_path, cli, tiny_model):
    _, _, _, checkpoint = tiny_model
    (tmp_path / "afile").write_text("not a folder")
    for args in (("cfg", "yolov3-tiny", "-n", "2", "-o", "afile/x.cfg"),
                 ("export", "--weights", checkpoint, "-o", "afile/x.onnx", "--no-check")):
        run = cli(*args)
        run.assert_clean(1)
        assert "afile is a file, not a folder; choose another output path" in run.output, args
