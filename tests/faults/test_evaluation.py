"""A validation image that breaks after the scan: evaluation leaves it out and says so; it never
substitutes another image (which was then counted twice in mAP)."""

from __future__ import annotations

import torch

from faults.hostile import bad_crc_png, make_split, truncated_jpeg


def test_evaluation_counts_each_image_once_and_names_the_broken_one(tmp_path, monkeypatch):
    from turboyolo.data.pipeline import build_loader
    from turboyolo.data.scan import scan_dataset
    from turboyolo.model.darknet import Darknet
    from turboyolo.model.zoo import make_spec
    from turboyolo.train.engine import evaluate

    monkeypatch.setenv("TURBOYOLO_CACHE", str(tmp_path / "cache"))
    images = make_split(tmp_path / "set", count=5)
    scan = scan_dataset(tmp_path / "set" / "images", "val")
    assert len(scan.samples) == 5
    truncated_jpeg(images[1])  # both break after the scan
    bad_crc_png(images[3])  # PNG bytes with a bad CRC under the .jpg name
    loader = build_loader(scan.samples, img_size=64, batch_size=2, augment=None, workers=0, shuffle=False)
    model = Darknet(make_spec("yolov3-tiny", num_classes=2, width=64, height=64))
    result, shown = evaluate(model, loader, device=torch.device("cpu"), num_classes=2, keep_predictions=100)
    evaluated = [str(path) for path, _ in shown]
    assert evaluated == [str(images[i]) for i in (0, 2, 4)]  # each once, the broken ones left out
    assert result is not None
    assert [path for path, _ in loader.dropped] == [str(images[1]), str(images[3])]
    summary = loader.dropped_summary()
    assert "2 image(s) failed to load and were left out of this evaluation" in summary
    assert "img1.jpg: truncated" in summary and "img3.jpg: damaged PNG: CRC mismatch" in summary
    assert loader.replaced == []

    # training keeps its batches full: the same break is replaced there (and counted)
    train = build_loader(scan.samples, img_size=64, batch_size=5, augment=None, workers=0, shuffle=True)
    assert [len(metas) for _, _, metas in train] == [5] and len(train.replaced) == 2


def test_test_command_names_the_images_left_out(tmp_path, cli, tiny_model, monkeypatch):
    from turboyolo.train import testing as evaluation_module

    cfg, weights, _, _ = tiny_model
    images = make_split(tmp_path / "set", count=3)
    (tmp_path / "set" / "data.yaml").write_text("train: images\nval: images\nnames: [apple, banana]\n")
    scan = evaluation_module.scan_dataset

    def scan_then_break(*args, **kwargs):
        result = scan(*args, **kwargs)
        images[2].write_bytes(b"")  # breaks between the scan and the evaluation
        return result

    monkeypatch.setattr(evaluation_module, "scan_dataset", scan_then_break)
    run = cli("test", "--cfg", cfg, "--weights", weights, "--data", tmp_path / "set" / "data.yaml",
              "--device", "cpu", "--workers", 0, "--batch-size", 2)
    run.assert_clean(0)
    assert "1 image(s) failed to load and were left out of this evaluation" in run.output
    assert f"{images[2]}: zero-byte" in run.output
