"""The recipe's flags through the command line: ``turboyolo train`` carries each into the run (config.yaml,
the model it trains, what it prints), and ``turboyolo test --rect`` feeds rectangular batches."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

import turboyolo
from synth import make_dataset, make_image_folder, micro_cfg
from turboyolo.cli import main as cli
from turboyolo.formats.darknet_cfg import parse_cfg


def test_train_flags_reach_the_run(tmp_path, capsys):
    data = make_dataset(tmp_path / "data", 8, 2, num_classes=2)
    cfg = micro_cfg(tmp_path / "m.cfg", batch=4, num_classes=2)
    flags = ("--mosaic 1 --close-mosaic 1 --mixup 0.5 --label-smoothing 0.1 --flipud 0.5 --fliplr 0 "
             "--translate 0.2 --hue 0.02 --saturation 1.3 --exposure 1.2 --degrees 3 --box-loss ciou "
             "--obj-gain 2 --cls-gain 0.5 --no-obj-iou --image-weights --single-cls --patience 5 "
             "--autoanchor").split()
    run_flags = "--epochs 2 --workers 0 --evaluation-interval 1 --checkpoint-interval 0 --name flags".split()
    assert cli(["train", "--cfg", str(cfg), "--data", str(data), "--project", str(tmp_path / "runs"),
                *run_flags, *flags]) == 0
    out = capsys.readouterr().out
    run = tmp_path / "runs" / "flags"
    saved = yaml.safe_load((run / "config.yaml").read_text())
    augment = ("mosaic", "close_mosaic", "mixup", "flipud", "fliplr", "translate", "hue", "saturation",
               "exposure", "degrees")
    assert {key: saved["augment"][key] for key in augment} == {
        "mosaic": 1.0, "close_mosaic": 1, "mixup": 0.5, "flipud": 0.5, "fliplr": 0.0, "translate": 0.2,
        "hue": 0.02, "saturation": 1.3, "exposure": 1.2, "degrees": 3.0}
    assert {key: saved["loss"][key] for key in ("box_loss", "obj_gain", "cls_gain", "label_smoothing")} \
        == {"box_loss": "ciou", "obj_gain": 2.0, "cls_gain": 0.5, "label_smoothing": 0.1}
    assert saved["data_args"]["image_weights"] is True and saved["data_args"]["single_cls"] is True
    assert saved["schedule"]["patience"] == 5 and saved["loss"]["autoanchor"] is True
    assert saved["loss"]["obj_iou"] is False  # on by default; --no-obj-iou restores Darknet's target 1
    assert "epoch 2: mosaic and mixup off for the last 1 epochs (--close-mosaic)" in out
    assert "--single-cls: every box is class 0" in out and "anchors: best-possible recall" in out
    assert parse_cfg(run / "model.cfg").yolo_layers[0][1].classes == 1
    assert (run / "weights" / "best.pt").exists() and (run / "train_batch0.jpg").exists()


def test_test_rect_feeds_batches_of_the_images_aspect(tmp_path, monkeypatch, capsys):
    from turboyolo.model.darknet import Darknet
    from turboyolo.model.loading import save_darknet_weights

    make_image_folder(tmp_path / "set", count=6, size=(40, 120), ext=".png", num_classes=1)
    images, names = tmp_path / "set" / "images", tmp_path / "set" / "k.names"
    (tmp_path / "d.data").write_text(f"classes=1\ntrain={images}\nvalid={images}\nnames={names}\n")
    cfg = micro_cfg(tmp_path / "m.cfg", size=64)
    shapes, forward = [], Darknet.forward

    def recording(self, x, *args, **kwargs):
        shapes.append(tuple(x.shape[-2:]))
        return forward(self, x, *args, **kwargs)

    monkeypatch.setattr(Darknet, "forward", recording)
    torch.manual_seed(0)  # random weights are enough: the shapes the network sees are what is checked
    weights = save_darknet_weights(Darknet(parse_cfg(cfg)), tmp_path / "w.weights")
    base = ["test", "--cfg", str(cfg), "--weights", str(weights), "--data", str(tmp_path / "d.data"),
            "--img-size", "64", "--workers", "0"]
    assert cli(base) == 0
    square, shapes[:] = set(shapes), []
    assert cli([*base, "--rect"]) == 0
    assert square == {(64, 64)}
    assert set(shapes) == {(32, 64)}  # 40-54 x 120-135 images: 64 wide, <= 0.45 x 64 up to the stride 32
    assert "mAP@0.5" in capsys.readouterr().out


def test_pretrained_names_and_a_batch_without_subdivisions(tmp_path, tiny_weights, capsys):
    """A new user's first command: an architecture as --cfg, a pretrained name as --weights, --batch
    alone; then `turboyolo test` and `turboyolo export` of a pretrained name."""
    data = make_dataset(tmp_path / "data", 4, 2, num_classes=2)
    assert cli(["train", "--cfg", "yolov3-tiny", "--weights", "yolov3-tiny", "--data", str(data),
                "--batch", "4", "--img-size", "64", "--epochs", "1", "--workers", "0",
                "--evaluation-interval", "0", "--project", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    assert "network: yolov3-tiny, its canonical cfg for the data set's 2 classes" in out
    assert "--batch 4 without --subdivisions: 4 images per mini-batch (subdivisions=1; the cfg's " \
           "subdivisions=16 split its batch=64)" in out
    assert f"loaded {tiny_weights} into every layer whose shape matches" in out
    net = parse_cfg(tmp_path / "runs" / "exp" / "model.cfg")
    assert (net.net.batch, net.net.subdivisions, net.yolo_layers[0][1].classes) == (4, 1, 2)
    # `turboyolo test` of the COCO weights: a data set with COCO's 80 classes
    coco = Path(turboyolo.__file__).parent / "resources" / "coco.names"
    coco_data = data.parent / "coco.data"
    coco_data.write_text(data.read_text().replace(str(data.parent / "names"), str(coco))
                         .replace("classes=2", "classes=80"))
    assert cli(["test", "--weights", "yolov3-tiny", "--data", str(coco_data), "--img-size", "64",
                "--workers", "0"]) == 0
    assert f"loaded {tiny_weights}" in capsys.readouterr().out
    onnx = tmp_path / "tiny.onnx"
    assert cli(["export", "--weights", "yolov3-tiny", "--img-size", "64", "-o", str(onnx), "--no-check"]) == 0
    assert onnx.stat().st_size > 30_000_000
    assert cli(["train", "--cfg", "yolov3-tiny", "--weights", "yolov9-huge", "--data", str(data),
                "--project", str(tmp_path / "runs")]) == 1
    err = capsys.readouterr().err
    assert "yolov9-huge: no such weights file (--weights); a path, or one of the pretrained names" in err
    assert "yolov4-tiny" in err and "Traceback" not in err


def test_anchors_flag_replaces_the_cfgs(tmp_path):
    data = make_dataset(tmp_path / "data", 4, 2)
    cfg = micro_cfg(tmp_path / "m.cfg", batch=2)
    anchors = "5,6, 9,9, 12,14, 20,22, 30,30, 40,44"
    assert cli(["train", "--cfg", str(cfg), "--data", str(data), "--anchors", anchors, "--epochs", "1",
                "--workers", "0", "--evaluation-interval", "0", "--project", str(tmp_path / "runs")]) == 0
    yolo = parse_cfg(tmp_path / "runs" / "exp" / "model.cfg").yolo_layers[0][1]
    assert yolo.anchors[:2] == ((5.0, 6.0), (9.0, 9.0))
    assert cli(["train", "--cfg", str(cfg), "--data", str(data), "--anchors", "5,6,7", "--project",
                str(tmp_path / "runs")]) == 1


def test_a_pretrained_name_alone_brings_its_network(tmp_path):
    from turboyolo.errors import FlagError
    from turboyolo.train.config import TrainConfig

    assert TrainConfig.build(weights="yolov4-tiny", data="d.data").cfg == "yolov4-tiny"
    (tmp_path / "mine.weights").write_bytes(b"")
    with pytest.raises(FlagError, match="--cfg is required .* or an architecture: yolov3, yolov3-tiny"):
        TrainConfig.build(weights=str(tmp_path / "mine.weights"), data="d.data")
