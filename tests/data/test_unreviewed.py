"""What training does with labels a model made and nobody reviewed: the scan line counts them, and
``turboyolo train --unreviewed`` includes them, leaves their images out, or ignores their background."""

from __future__ import annotations

import csv

import pytest
import torch

from synth import make_dataset, make_image_folder, micro_cfg
from turboyolo.cli import main as cli
from turboyolo.data.autolabels import label_status, record_model_labels, record_reviewed
from turboyolo.data.scan import apply_unreviewed, scan_dataset
from turboyolo.formats.darknet_cfg import parse_cfg
from turboyolo.model.darknet import Darknet
from turboyolo.train.loss import YoloLoss


def test_the_scan_line_counts_human_reviewed_and_model_made_labels(tmp_path, isolated_cache):
    images = make_image_folder(tmp_path / "ds", count=6, size=(64, 80), num_classes=2)
    labels = [tmp_path / "ds" / "labels" / f"{p.stem}.txt" for p in images]
    record_model_labels(labels[:3], weights="w.pt")
    record_reviewed(labels[0])  # a person accepted the first model label
    labels[1].write_text("0 0.5 0.5 0.2 0.2\n")  # and corrected the second in another program
    assert [label_status(p) for p in labels[:4]] == ["reviewed", "human", "model", "human"]
    scan = scan_dataset(tmp_path / "ds" / "images", "train", use_cache=False)
    assert "label files: 4 human, 1 reviewed, 1 model-made (not yet reviewed)" in scan.summary()
    assert scan.unreviewed == [str(images[2])]

    kept = apply_unreviewed(scan_dataset(tmp_path / "ds" / "images", "train"), "include")
    assert len(kept.samples) == 6 and not any(s.partial for s in kept.samples)
    left_out = apply_unreviewed(scan_dataset(tmp_path / "ds" / "images", "train"), "exclude")
    assert [s.image for s in left_out.samples] == images[:2] + images[3:]
    assert "their images left out: --unreviewed exclude" in left_out.summary()
    ignored = apply_unreviewed(scan_dataset(tmp_path / "ds" / "images", "train"), "ignore")
    assert [s.partial for s in ignored.samples] == [False, False, True, False, False, False]
    assert "their background ignored" in ignored.summary()


def test_the_scan_hashes_only_label_files_a_manifest_names(tmp_path, isolated_cache, monkeypatch):
    from turboyolo.data import autolabels

    images = make_image_folder(tmp_path / "ds", count=5, size=(64, 80), num_classes=2)
    other = make_image_folder(tmp_path / "other", count=4, size=(64, 80), num_classes=2)
    labels = [tmp_path / "ds" / "labels" / f"{p.stem}.txt" for p in images]
    record_model_labels(labels[:2], weights="w.pt")
    hashed, manifests = [], []
    sha1, read = autolabels._sha1, autolabels.read_manifest
    monkeypatch.setattr(autolabels, "_sha1", lambda path: hashed.append(path.name) or sha1(path))
    monkeypatch.setattr("turboyolo.data.scan.read_manifest",
                        lambda folder: manifests.append(folder) or read(folder))
    scan = scan_dataset(tmp_path / "ds" / "images", "train", use_cache=False)
    assert sorted(hashed) == ["img000.txt", "img001.txt"]  # the two the manifest names, once each
    assert len(manifests) == 1 and scan.model_made == 2 and scan.human == 3
    hashed.clear(), manifests.clear()
    again = scan_dataset(tmp_path / "other" / "images", "train", use_cache=False)  # no manifest
    assert hashed == [] and len(manifests) == 1 and again.human == len(other)


def test_no_background_removes_only_the_no_object_loss_of_those_images(tmp_path):
    spec = parse_cfg(micro_cfg(tmp_path / "m.cfg", num_classes=1))
    torch.manual_seed(0)
    model = Darknet(spec)
    outputs = model(torch.rand(2, 3, 64, 64))
    loss = YoloLoss(model.heads)
    box = torch.tensor([[1, 0, 0.5, 0.5, 0.4, 0.4]])  # image 1 has a box, image 0 none
    _, both = loss(outputs, box, (64, 64))
    _, first = loss(outputs, box, (64, 64), no_background=torch.tensor([True, False]))
    _, second = loss(outputs, box, (64, 64), no_background=torch.tensor([False, True]))
    assert first[1] < both[1] and second[1] < both[1]
    assert torch.equal(first[0], both[0]) and torch.equal(first[2], both[2])  # box and class terms stay
    _, none = loss(outputs, torch.zeros(0, 6), (64, 64), no_background=torch.tensor([True, True]))
    assert none[1] == 0  # nothing assigned, all background ignored: no objectness loss at all


@pytest.mark.slow
def test_train_applies_the_rule_to_unreviewed_model_labels(tmp_path, isolated_cache, capsys):
    data = make_dataset(tmp_path / "data", 4, 2)
    model_made = sorted((tmp_path / "data" / "labels" / "train").glob("*.txt"))
    for path in model_made:
        path.write_text("")  # the model found nothing: every training image is a model-made background
    record_model_labels(model_made, weights="w.pt")
    record_reviewed(model_made[0])  # one of them was reviewed: a true background
    cfg = micro_cfg(tmp_path / "m.cfg", batch=2)
    objectness = {}
    for rule in ("include", "ignore", "exclude"):
        assert cli(["train", "--cfg", str(cfg), "--data", str(data), "--epochs", "1", "--workers", "0",
                    "--project", str(tmp_path / "runs"), "--name", rule, "--evaluation-interval", "0",
                    "--checkpoint-interval", "0", "--mosaic", "0", "--unreviewed", rule]) == 0
        out = capsys.readouterr().out
        assert "label files: 0 human, 1 reviewed, 3 model-made (not yet reviewed" in out
        assert f"training on cpu: {1 if rule == 'exclude' else 4} images" in out
        with open(tmp_path / "runs" / rule / "results.csv") as handle:
            objectness[rule] = float(list(csv.DictReader(handle))[-1]["obj"])
    # per image: with `ignore` only the reviewed background image of the four teaches "no object"
    assert objectness["ignore"] < 0.5 * objectness["include"]
    assert objectness["exclude"] > 0.5 * objectness["include"]  # one image, a full background loss
