"""The run directory's pictures (labels, batches, curves, confusion matrix) and per_class.csv."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from turboyolo.train import plots
from turboyolo.train.logger import PER_CLASS_COLUMNS, RunLogger, read_results
from turboyolo.train.metrics import evaluate_detections

NAMES = ["cat", "dog"]
GT = [np.array([[0, 0.2, 0.2, 0.2, 0.2], [1, 0.6, 0.6, 0.2, 0.2]]), np.array([[1, 0.5, 0.5, 0.4, 0.4]])]
HW = [(100, 100), (80, 120)]
DETS = [
    np.array([[10, 10, 30, 30, 0.9, 0], [50, 50, 70, 70, 0.8, 0], [5, 60, 20, 80, 0.3, 1]]),
    np.array([[36, 24, 84, 56, 0.6, 1]]),
]


def _close(pixel, color, tolerance=60) -> bool:
    return bool(np.abs(np.asarray(pixel, int) - np.asarray(color, int)).max() <= tolerance)


def test_labels_plot(tmp_path):
    path = plots.plot_labels(GT, NAMES, tmp_path / "labels.jpg")
    with Image.open(path) as image:
        assert image.format == "JPEG" and image.width > 800


def test_labels_plot_histograms_a_bounded_sample_and_counts_every_box(tmp_path, monkeypatch):
    from matplotlib.axes import Axes

    monkeypatch.setattr(plots, "PLOT_BOXES", 50)
    drawn, bars = [], []
    hist2d, bar = Axes.hist2d, Axes.bar
    monkeypatch.setattr(Axes, "hist2d", lambda ax, x, y, **k: drawn.append(len(x)) or hist2d(ax, x, y, **k))
    monkeypatch.setattr(Axes, "bar", lambda ax, x, h, **k: bars.append(list(h)) or bar(ax, x, h, **k))
    labels = [np.array([[i % 2, 0.5, 0.5, 0.1, 0.1]] * 3) for i in range(40)]  # 120 boxes: 60 per class
    plots.plot_labels(labels, NAMES, tmp_path / "labels.jpg")
    assert drawn == [50, 50] and bars == [[60, 60]]
    drawn.clear()
    plots.plot_labels(GT, NAMES, tmp_path / "small.jpg")
    assert drawn == [3, 3]


def test_train_batch_draws_the_targets_on_the_images(tmp_path):
    images = torch.zeros((2, 3, 64, 64), dtype=torch.uint8)
    # image 1: a dog box centred, half the side (pixels 16..48)
    targets = torch.tensor([[1, 1, 0.5, 0.5, 0.5, 0.5]])
    path = plots.plot_train_batch(images, targets, tmp_path / "train_batch0.jpg", NAMES)
    pixels = np.asarray(Image.open(path).convert("RGB"))
    assert pixels.shape == (2 + 64 + 2, 2 + 2 * (64 + 2), 3)  # make_grid: two tiles in a row, padding 2
    left = 2 + 64 + 2  # the second tile starts after the first and the padding
    assert _close(pixels[2 + 40, left + 16], plots.PALETTE[1])  # left edge of the dog box
    assert _close(pixels[2 + 40, 2 + 16], (0, 0, 0))  # nothing drawn on the first image


def test_first_batches_are_written_and_passed_through(tmp_path):
    batches = [(torch.zeros((1, 3, 32, 32), dtype=torch.uint8), torch.zeros((0, 6)), [k]) for k in range(5)]
    out = list(plots.plot_first_batches(iter(batches), tmp_path, NAMES))
    assert [b[2] for b in out] == [[0], [1], [2], [3], [4]] and out[0] is batches[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"train_batch{k}.jpg" for k in range(3)]


def test_val_batches_show_labels_and_predictions_above_conf(tmp_path):
    shown, labels = [], {}
    for index, ((h, w), gt, dets) in enumerate(zip(HW, GT, DETS)):
        path = tmp_path / f"im{index}.png"
        Image.fromarray(np.zeros((h, w, 3), np.uint8)).save(path)
        shown.append((path, dets))
        labels[str(path)] = gt
    written = plots.plot_val_batches(shown * 2, labels, tmp_path, NAMES, conf_thres=0.5, per_mosaic=3,
                                       tile_side=100)
    assert [p.name for p in written] == [
        "val_batch0_labels.jpg", "val_batch0_pred.jpg", "val_batch1_labels.jpg", "val_batch1_pred.jpg"
    ]
    truth = np.asarray(Image.open(tmp_path / "val_batch0_labels.jpg").convert("RGB"))
    pred = np.asarray(Image.open(tmp_path / "val_batch0_pred.jpg").convert("RGB"))
    # image 0's true dog (50..70) and its 0.8 cat detection on the same spot; the 0.3 dog (5..20, 60..80)
    # is below conf 0.5 and not drawn
    assert _close(truth[2 + 60, 2 + 50], plots.PALETTE[1]) and _close(pred[2 + 60, 2 + 50], plots.PALETTE[0])
    assert _close(pred[2 + 70, 2 + 5], (0, 0, 0)) and not _close(truth[2 + 70, 2 + 5], plots.PALETTE[1])


def test_evaluation_plots(tmp_path):
    result = evaluate_detections(DETS, GT, HW, 2, conf_thres=0.25)
    written = plots.save_evaluation_plots(result, NAMES, tmp_path)
    assert sorted(written) == ["F1_curve", "PR_curve", "P_curve", "R_curve", "confusion_matrix"]
    for name, path in written.items():
        assert path == tmp_path / f"{name}.png"
        with Image.open(path) as image:
            assert image.format == "PNG"
    with pytest.raises(ValueError, match="evaluate_detections"):
        plots.plot_curves(type(result)(), NAMES, tmp_path)


def test_per_class_csv_gets_every_evaluation(tmp_path):
    result = evaluate_detections(DETS, GT, HW, 2, conf_thres=0.25)
    logger = RunLogger(tmp_path, {}, tensorboard=False)
    logger.per_class(result, NAMES, epoch=1, iteration=10)
    logger.per_class(result, NAMES, epoch=2, iteration=20)
    rows = read_results(tmp_path / "per_class.csv")
    assert tuple(rows[0]) == PER_CLASS_COLUMNS
    assert [(r["epoch"], r["iteration"], r["class"]) for r in rows] == [
        ("1", "10", "cat"), ("1", "10", "dog"), ("2", "20", "cat"), ("2", "20", "dog")
    ]
    # cat: 1 box in 1 image, detections 0.9 (TP) and 0.8 (FP); dog: 2 boxes, 0.3 FP and 0.6 TP
    assert [(r["images"], r["boxes"], float(r["P"]), float(r["R"])) for r in rows[:2]] == [
        ("1", "1", 0.5, 1.0), ("2", "2", 0.5, 0.5)
    ]


def test_image_files_reach_tensorboard(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    path = tmp_path / "PR_curve.png"
    Image.fromarray(np.full((20, 30, 3), 200, np.uint8)).save(path)
    logger = RunLogger(tmp_path, {})
    logger.image_files({"PR_curve": path}, step=7)
    logger.tb.close()
    events = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"images": 0})
    events.Reload()
    assert events.Tags()["images"] == ["val/PR_curve"]
    (image,) = events.Images("val/PR_curve")
    assert (image.step, image.width, image.height) == (7, 30, 20)


def test_run_logger_writes_what_an_evaluation_and_the_first_batches_leave(tmp_path):
    image = tmp_path / "im0.png"
    Image.fromarray(np.zeros((100, 100, 3), np.uint8)).save(image)
    result = evaluate_detections(DETS, GT, HW, 2, conf_thres=0.25)
    logger = RunLogger(tmp_path, {}, tensorboard=False)
    assert logger.label_statistics(GT, NAMES) == tmp_path / "labels.jpg"
    batches = [(torch.zeros((1, 3, 32, 32), dtype=torch.uint8), torch.zeros((0, 6)), None)] * 4
    assert len(list(logger.first_batches(batches, NAMES))) == 4
    written = logger.evaluation(result, NAMES, epoch=1, iteration=5, shown=[(image, DETS[0])],
                                labels={str(image): GT[0]})
    assert sorted(written) == ["F1_curve", "PR_curve", "P_curve", "R_curve", "confusion_matrix",
                               "val_batch0_labels", "val_batch0_pred"]
    assert len(read_results(tmp_path / "per_class.csv")) == 2
    assert {p.name for p in tmp_path.iterdir()} >= {
        "labels.jpg", "train_batch0.jpg", "train_batch2.jpg", "PR_curve.png", "confusion_matrix.png",
        "val_batch0_pred.jpg", "per_class.csv",
    }
    assert not (tmp_path / "train_batch3.jpg").exists()


def test_first_batches_of_the_device_augmenting_loader_show_the_augmented_images(tmp_path, isolated_cache):
    # --augment-on device yields CanvasBatch: the picture is the device's warp computed on the CPU, the
    # same picture (up to rounding) as the CPU loader's batch with the same seed
    from synth import make_image_folder
    from turboyolo.data.augment import AugmentParams
    from turboyolo.data.cache import prepare_cache
    from turboyolo.data.pipeline import build_loader
    from turboyolo.data.scan import scan_dataset

    make_image_folder(tmp_path / "ds", count=4)
    samples = scan_dataset(tmp_path / "ds" / "images", "train").samples
    cache = prepare_cache(samples, 96, tmp_path / "prep", workers=1, log=lambda *_: None)
    options = dict(img_size=96, batch_size=4, shuffle=True, seed=3, workers=0, cache=cache,
                   augment=AugmentParams.from_net(angle=7))
    for where in ("cpu", "device"):
        (tmp_path / where).mkdir()
        loader = build_loader(samples, augment_on=where, **options)
        loader.set_epoch(0)
        (batch,) = list(plots.plot_first_batches(loader, tmp_path / where, ["a", "b"]))
        assert hasattr(batch[0], "to_device") == (where == "device")  # passed through unchanged
    cpu, device = (np.asarray(Image.open(tmp_path / w / "train_batch0.jpg"), np.float32)
                   for w in ("cpu", "device"))
    assert cpu.shape == device.shape and cpu.std() > 10
    assert np.abs(cpu - device).mean() < 3


def test_a_first_batch_is_drawn_after_the_consumer_took_it(tmp_path):
    """train_batch{i}.jpg is drawn when the consumer comes back for the next batch (after batch i's step),
    or when the iteration is closed after it (a run that stops there)."""
    batches = [(torch.zeros((1, 3, 32, 32), dtype=torch.uint8), torch.zeros((0, 6)), [k]) for k in range(5)]
    wrapped = plots.plot_first_batches(iter(batches), tmp_path, NAMES)
    assert next(wrapped) is batches[0] and not (tmp_path / "train_batch0.jpg").exists()
    next(wrapped)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train_batch0.jpg"]
    wrapped.close()  # stopped while holding batch 1: its picture is drawn now
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train_batch0.jpg", "train_batch1.jpg"]
