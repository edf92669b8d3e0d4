"""``augment_on="device"``: same batches (indices, boxes, metas) as the CPU path, pixels up to rounding."""

import numpy as np
import pytest
import torch

from synth import make_image_folder as make_dataset
from turboyolo.data.augment import AugmentParams
from turboyolo.data.cache import prepare_cache
from turboyolo.data.device_loader import CanvasBatch
from turboyolo.data.loader import move_to_device
from turboyolo.data.pipeline import build_loader
from turboyolo.data.scan import scan_dataset
from turboyolo.errors import DataError


@pytest.fixture
def samples(tmp_path, isolated_cache):
    make_dataset(tmp_path, count=9)
    return scan_dataset(tmp_path / "images", "train").samples


@pytest.fixture
def cache(samples, tmp_path):
    return prepare_cache(samples, 128, tmp_path / "prep", workers=1, log=lambda *_: None)


def _batches(loader, epochs=(0, 1)):
    out = []
    for epoch in epochs:
        loader.set_epoch(epoch)
        for images, targets, metas in loader:
            out.append((move_to_device(images, "cpu"), targets.clone(), [str(m.path) for m in metas],
                        np.array([m.matrix for m in metas]), np.array([m.pad for m in metas])))
    return out


KW = dict(img_size=96, batch_size=4, shuffle=True, seed=5, multiscale=(64, 128))


@pytest.mark.parametrize("augment", [None, AugmentParams.from_net(angle=7)], ids=["letterbox", "full"])
def test_device_path_matches_cpu_path(samples, cache, augment):
    cpu = _batches(build_loader(samples, workers=0, cache=cache, augment=augment, **KW))
    for workers in (0, 1):
        dev = _batches(build_loader(samples, workers=workers, cache=cache, augment=augment,
                                    augment_on="device", **KW))
        assert len(dev) == len(cpu)
        for (ci, ct, cp, cm, cpad), (di, dt, dp, dm, dpad) in zip(cpu, dev, strict=True):
            assert dp == cp
            assert torch.equal(dt, ct)  # same boxes, bit for bit: same rng draws, same box function
            np.testing.assert_allclose(dm, cm)
            np.testing.assert_allclose(dpad, cpad)
            assert di.shape == ci.shape and di.dtype == torch.float32
            diff = (di - ci).abs() * 255
            # colour jitter: OpenCV quantises H/S/V to 8 bits, the device path is continuous
            assert diff.mean() < (1.0 if augment is None else 1.5)


def test_workers_reuse_their_shared_buffers_safely(samples, cache):
    # prefetch 1: each worker cycles through 3 buffers; 4 epochs x 3 batches = 6 per worker, so reused.
    # Each batch is converted only after the next one arrived, as the training loop holds it (with a
    # ring of 1 this comparison fails).
    kwargs = dict(cache=cache, augment=None, augment_on="device", **KW)
    reference = [b[0] for b in _batches(build_loader(samples, workers=0, **kwargs), epochs=range(4))]
    loader = build_loader(samples, workers=2, prefetch_factor=1, **kwargs)
    assert loader.dataset.ring == 3
    converted, held = [], None
    for epoch in range(4):
        loader.set_epoch(epoch)
        for images, _, _ in loader:
            if held is not None:
                converted.append(move_to_device(held, "cpu"))
            held = images
    converted.append(move_to_device(held, "cpu"))
    assert len(converted) == len(reference)
    for expected, got in zip(reference, converted, strict=True):
        assert torch.equal(expected, got)


def test_canvas_batch_layout_and_device_copy(samples, cache):
    loader = build_loader(samples, workers=0, cache=cache, augment=AugmentParams(), augment_on="device",
                          img_size=64, batch_size=3, shuffle=False)
    images, targets, metas = next(iter(loader))
    assert isinstance(images, CanvasBatch)
    assert images.canvases.dtype == torch.uint8 and images.canvases.shape == (3, 128, 128, 3)
    assert images.shape == (3, 3, 64, 64) and images.theta.shape == (3, 2, 3) and images.hsv.shape == (3, 3)
    out = move_to_device(images, "cpu", dtype=torch.float64, channels_last=True)
    assert out.dtype == torch.float64 and out.is_contiguous(memory_format=torch.channels_last)
    assert 0 <= float(out.min()) and float(out.max()) <= 1
    # the grey fill around a stored image that does not cover its canvas
    stored_h, stored_w = cache.get(0)[0].shape[:2]
    assert stored_w == 128 and stored_h < 128
    assert (images.canvases[0, stored_h:] == 114).all()


def test_device_path_without_cache_decodes_originals(samples):
    loader = build_loader(samples, workers=0, augment=AugmentParams(), augment_on="device", img_size=64,
                          batch_size=4, shuffle=True)
    images, targets, _ = next(iter(loader))
    assert images.canvases.shape[1:] == (64, 64, 3) and targets.shape[1] == 6


def test_remaining_matches_tail_of_epoch(samples, cache):
    loader = build_loader(samples, workers=1, cache=cache, augment=AugmentParams(), augment_on="device", **KW)
    loader.set_epoch(2)
    full = [(b[2], b[1]) for b in ((i, t, [m.path for m in ms]) for i, t, ms in loader)]
    tail = [([m.path for m in ms], t) for _, t, ms in loader.remaining(1)]
    assert len(tail) == len(full) - 1
    for (fp, ft), (tp, tt) in zip(full[1:], tail, strict=True):
        assert fp == tp and torch.equal(ft, tt)


def test_errors_name_the_flag(samples):
    with pytest.raises(DataError, match="--augment-on device"):
        build_loader(samples, workers=0, augment=AugmentParams(mosaic=0.5), augment_on="device", img_size=64,
                     batch_size=2, shuffle=True)
    with pytest.raises(DataError, match="--augment-on"):
        build_loader(samples, workers=0, augment=None, augment_on="gpu", img_size=64, batch_size=2,
                     shuffle=False)


@pytest.mark.slow
def test_train_with_device_augmentation_resumes_exactly(tmp_path):
    from synth import make_dataset as make_train_set
    from synth import micro_cfg
    from turboyolo.train.config import TrainConfig
    from turboyolo.train.fit import fit

    data = make_train_set(tmp_path / "data", 8, 2)
    cfg = micro_cfg(tmp_path / "micro.cfg", batch=4, subdivisions=2, learning_rate=0.01, burn_in=2,
                    max_batches=5)
    common = dict(cfg=str(cfg), data=str(data), epochs=100, workers=1, evaluation_interval=0,
                  checkpoint_interval=0, augment_on="device", cache="ram")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        straight = fit(TrainConfig.build(project=str(tmp_path / "a"), **common), quiet=True).run_dir
        first = fit(TrainConfig.build(project=str(tmp_path / "b"), **common), stop_at_iteration=3,
                    quiet=True).run_dir
        resumed = fit(TrainConfig.build(resume=str(first / "weights" / "last.pt")), quiet=True).run_dir
    finally:
        torch.set_num_threads(threads)
    a = torch.load(straight / "weights" / "last.pt", weights_only=True)["model"]
    b = torch.load(resumed / "weights" / "last.pt", weights_only=True)["model"]
    for key in a:
        assert torch.equal(a[key], b[key]), key
    assert "data_wait" in (straight / "results.csv").read_text().splitlines()[0]
