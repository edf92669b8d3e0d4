"""``augment_on="device"``: same batches (indices, boxes, metas) as the CPU path, pixels up to rounding."""

import dataclasses
import time

import numpy as np
import pytest
import torch

from synth import make_image_folder as make_dataset
from turboyolo.data import device_loader
from turboyolo.data import loader as loader_module
from turboyolo.data.augment import AugmentParams, mixup_partner, mosaic_partners
from turboyolo.data.cache import prepare_cache
from turboyolo.data.device_loader import CanvasBatch, check_device_augment, device_augment_unsupported
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


@pytest.mark.parametrize("batch_size, request_images, group", [(4, None, 2), (1, 2, 2)])
def test_workers_reuse_their_shared_buffers_safely(samples, cache, monkeypatch, batch_size, request_images,
                                                   group):
    # prefetch 1: each worker cycles through 3 buffers, one per request (a request makes `group`
    # consecutive batches in one buffer). Batch 4: 2 requests an epoch (2 batches, then 1), one per worker,
    # reused across the 4 epochs; batch 1 with 2 images a request: 5 requests an epoch, reused inside
    # it. Each batch is converted only after the next one arrived, as the training loop holds it (with a
    # ring of 1 this comparison fails).
    if request_images is not None:
        monkeypatch.setattr(device_loader, "DEVICE_REQUEST_IMAGES", request_images)
    # every buffer through shared memory (these tiny canvases would otherwise travel inside the pickle)
    monkeypatch.setattr(loader_module, "SMALL_TENSOR_BYTES", 0)
    kwargs = dict(cache=cache, augment=None, augment_on="device", **{**KW, "batch_size": batch_size})
    reference = [b[0] for b in _batches(build_loader(samples, workers=0, **kwargs), epochs=range(4))]
    loader = build_loader(samples, workers=2, prefetch_factor=1, **kwargs)
    assert loader.dataset.ring == 3 and loader.group == group
    converted, held = [], None
    for epoch in range(4):
        loader.set_epoch(epoch)
        for images, _, _ in loader:
            if held is not None:
                time.sleep(0.02)  # a slow step: the workers have time to make (and write) what follows
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
    # the grey fill around a stored image that does not cover its canvas, where the warp reads it
    from turboyolo.data.device_augment import sampled_region

    stored_h, stored_w = cache.get(0)[0].shape[:2]
    assert stored_w == 128 and stored_h < 128
    x0, _, x1, y1 = sampled_region(images.theta[0].numpy(), (0, 0, 64, 64), 128, 64)
    assert y1 > stored_h and x1 > x0  # the letterbox reads below the image
    assert (images.canvases[0, stored_h:y1, x0:x1] == 114).all()


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


def _epoch_batches(loader, epoch, mix=True):
    loader.set_epoch(epoch, mix=mix)
    return [(move_to_device(images, "cpu"), targets.clone(), [str(m.path) for m in metas],
             np.array([m.matrix for m in metas]), metas.failures) for images, targets, metas in loader]


@pytest.mark.parametrize("mosaic,mixup,workers", [(1.0, 0.0, (0,)), (0.5, 0.0, (0,)), (0.5, 0.5, (0, 1)),
                                                   (0.0, 1.0, (0,))])
def test_device_mosaic_and_mixup_match_cpu_path(samples, cache, mosaic, mixup, workers):
    # the CPU path's partners, draws and boxes; pixels up to rounding; mix=False (--close-mosaic) too
    augment = AugmentParams(degrees=5, scale=(0.5, 1.5), mosaic=mosaic, mixup=mixup)
    cpu_loader = build_loader(samples, workers=0, cache=cache, augment=augment, **KW)
    for count in workers:
        dev_loader = build_loader(samples, workers=count, cache=cache, augment=augment,
                                  augment_on="device", **KW)
        for epoch, mix in ((0, True), (1, True), (2, False)):
            cpu = _epoch_batches(cpu_loader, epoch, mix)
            dev = _epoch_batches(dev_loader, epoch, mix)
            assert len(dev) == len(cpu)
            for (ci, ct, cp, cm, _), (di, dt, dp, dm, _) in zip(cpu, dev, strict=True):
                assert dp == cp and torch.equal(dt, ct)  # boxes bit for bit
                np.testing.assert_array_equal(dm, cm)
                assert di.shape == ci.shape
                diff = (di - ci).abs() * 255
                # colour: OpenCV quantises H/S/V to 8 bits; mixup: the CPU rounds both images first
                assert diff.mean() < 1.5, float(diff.mean())


def test_device_mosaic_replaces_a_broken_partner_as_the_cpu_path(samples, tmp_path):
    # no cache: the originals are decoded; one is damaged after the scan, so some mosaics lose a partner
    samples[3].image.write_bytes(b"not an image")
    augment = AugmentParams(mosaic=1.0, mixup=0.5)
    cpu = _epoch_batches(build_loader(samples, workers=0, augment=augment, **KW), 0)
    dev = _epoch_batches(build_loader(samples, workers=0, augment=augment, augment_on="device", **KW), 0)
    failures = [f for *_, f in cpu]
    assert any(failures)  # the damaged file was drawn as a partner
    assert failures == [f for *_, f in dev]
    for (_, ct, cp, *_), (_, dt, dp, *_) in zip(cpu, dev, strict=True):
        assert dp == cp and torch.equal(dt, ct)


def test_workers_reuse_buffers_when_mosaics_vary_the_canvas_count(samples, cache):
    # mosaic 0.5 + mixup: each batch takes a different number of canvases (4 to 8 per image)
    kwargs = dict(cache=cache, augment=AugmentParams(mosaic=0.5, mixup=0.3), augment_on="device", **KW)
    in_process = build_loader(samples, workers=0, **kwargs)
    reference = [b[0] for epoch in range(4) for b in _epoch_batches(in_process, epoch)]
    loader = build_loader(samples, workers=2, prefetch_factor=1, **kwargs)
    counts, converted, held = set(), [], None
    for epoch in range(4):
        loader.set_epoch(epoch)
        for images, _, _ in loader:
            counts.add(images.canvases.shape[0] / images.shape[0])
            if held is not None:
                converted.append(move_to_device(held, "cpu"))
            held = images
    converted.append(move_to_device(held, "cpu"))
    assert len(counts) > 2
    for expected, got in zip(reference, converted, strict=True):
        assert torch.equal(expected, got)


def test_device_augment_unsupported_says_why():
    assert device_augment_unsupported(None) is None
    assert device_augment_unsupported(AugmentParams()) is None
    assert device_augment_unsupported(AugmentParams(mosaic=1.0, mixup=0.5, flipud=0.5, degrees=10)) is None

    @dataclasses.dataclass(frozen=True)
    class WithCopyPaste(AugmentParams):  # an augmentation the device path has not learnt
        copy_paste: float = 0.0

    assert device_augment_unsupported(WithCopyPaste()) is None  # off: nothing differs
    reason = device_augment_unsupported(WithCopyPaste(copy_paste=0.5))
    assert reason is not None and "copy_paste=0.5" in reason
    with pytest.raises(DataError, match="--augment-on device: .*copy_paste.*--augment-on cpu"):
        check_device_augment(WithCopyPaste(copy_paste=0.5))


@pytest.mark.slow
def test_train_cli_with_device_mosaic_and_mixup(tmp_path, isolated_cache, capsys):
    # (unmarked: tests/train/test_cli_journeys.py trains on the device's mosaics through the CLI, in-process)
    from synth import make_dataset as make_train_set
    from synth import micro_cfg
    from turboyolo.cli import main

    data = make_train_set(tmp_path / "data", 6, 2)
    cfg = micro_cfg(tmp_path / "micro.cfg", batch=2)
    code = main(["train", "--cfg", str(cfg), "--data", str(data), "--workers", "1", "--epochs", "2",
                 "--project", str(tmp_path / "runs"), "--evaluation-interval", "0", "--checkpoint-interval",
                 "0", "--augment-on", "device", "--cache", "ram", "--mosaic", "1", "--mixup", "0.5"])
    assert code == 0, capsys.readouterr().err
    run = tmp_path / "runs" / "exp"
    config = (run / "config.yaml").read_text()
    assert "mosaic: 1.0" in config and "mixup: 0.5" in config and "augment_on: device" in config
    rows = (run / "results.csv").read_text().splitlines()
    assert len(rows) == 3  # a header and both epochs


def test_partners_come_from_the_pool_the_key_carries():
    # a key may carry its partner pool (the run of batches one worker makes); whole-set pools draw
    # exactly what no pool draws
    pool = (7, 3, 11, 5)
    for index in range(20):
        partners = mosaic_partners(1, 2, index, 40, 1.0, pool=pool)
        assert partners is not None and set(partners) <= set(pool)
        whole = mosaic_partners(1, 2, index, 40, 1.0, pool=tuple(range(40)))
        assert whole == mosaic_partners(1, 2, index, 40, 1.0)
        partner, ratio = mixup_partner(1, 2, index, 40, 1.0, pool=pool)
        assert partner in pool and 0 < ratio < 1
    assert mosaic_partners(1, 2, 0, 40, 0.0) is None and mixup_partner(1, 2, 0, 40, 0.0) is None


REGION_AUGMENTS = {  # mosaics and mixups (each part masked to its rect), and single images (not masked)
    "mosaic": AugmentParams(degrees=10, scale=(0.4, 1.6), translate=0.2, mosaic=0.7, mixup=0.4, flipud=0.5),
    "single": AugmentParams(degrees=15, scale=(0.3, 1.8), translate=0.3, flipud=0.5),
}


@pytest.mark.parametrize("shape", ["landscape", "portrait"])
@pytest.mark.parametrize("kind", list(REGION_AUGMENTS))
@pytest.mark.parametrize("workers", [0, 2])
def test_copying_only_the_sampled_region_changes_no_pixel(tmp_path, isolated_cache, workers, kind, shape):
    """The loader copies onto a canvas only what the warp can read of it (a mosaic part: about a quarter
    of its image); the batches the device makes are bit for bit those of whole copies, also from workers
    whose reused buffers still hold earlier batches' pixels elsewhere. Landscape and portrait images (the
    fill below and right of a stored image), mosaics (masked parts) and single images (every tap must lie
    in the region)."""
    make_dataset(tmp_path, count=9, size=(90, 120) if shape == "landscape" else (120, 80))
    samples = scan_dataset(tmp_path / "images", "train").samples
    cache = prepare_cache(samples, 128, None, memory="ram", workers=1, log=lambda *_: None)
    kwargs = dict(cache=cache, augment=REGION_AUGMENTS[kind], augment_on="device", **KW)
    whole = build_loader(samples, workers=0, **kwargs)
    whole.dataset.copy_whole = True
    reference = [b[0] for epoch in range(3) for b in _epoch_batches(whole, epoch)]
    loader = build_loader(samples, workers=workers, prefetch_factor=1, **kwargs)
    assert loader.dataset.copy_whole is False
    got = [b[0] for epoch in range(3) for b in _epoch_batches(loader, epoch)]
    assert len(got) == len(reference)
    for expected, batch in zip(reference, got, strict=True):
        assert torch.equal(expected, batch)


def test_a_mosaic_part_reads_only_part_of_its_canvas():
    from turboyolo.data.augment import plan_mosaic
    from turboyolo.data.device_augment import plan_mosaic_parts, sampled_region

    rng = np.random.default_rng(0)
    params = AugmentParams(mosaic=1.0)
    shares = []
    for _ in range(20):
        hws = [(int(rng.integers(60, 129)), 128) for _ in range(4)]
        plan = plan_mosaic([(np.zeros((0, 5), np.float32), hw) for hw in hws], 96, params,
                           np.random.default_rng(int(rng.integers(1 << 30))))
        thetas, rects = plan_mosaic_parts(plan, hws, hws, 128, 96)
        for theta, rect in zip(thetas, rects, strict=True):
            x0, y0, x1, y1 = sampled_region(theta, rect, 128, 96)
            shares.append((x1 - x0) * (y1 - y0) / 128 ** 2)
    assert max(shares) <= 1 and np.mean(shares) < 0.6  # about a quarter of the canvas, not all of it


@pytest.mark.parametrize("workers", [1, 2])
def test_batches_made_in_groups_are_the_batches_made_one_by_one(samples, cache, monkeypatch, workers):
    """A request making several batches in one buffer (:class:`CanvasGroup`) changes no batch: canvases
    as the device reads them, targets, metas and replacements equal those of one batch per request, with
    mosaics and mixups (so groups hold varying canvas counts)."""
    kwargs = dict(cache=cache, augment=AugmentParams(mosaic=0.7, mixup=0.4), augment_on="device",
                  **{**KW, "batch_size": 2})

    def made(request_images):
        monkeypatch.setattr(device_loader, "DEVICE_REQUEST_IMAGES", request_images)
        loader = build_loader(samples, workers=workers, **kwargs)
        return loader.group, _batches(loader, epochs=range(3))

    one_group, one_by_one = made(1)
    grouped_size, grouped = made(6)
    assert one_group == 1 and grouped_size > 1
    assert build_loader(samples, workers=0, **kwargs).group == 1  # in-process: nothing to hand over
    assert len(grouped) == len(one_by_one)
    for (gi, gt, gp, gm, gpad), (oi, ot, op, om, opad) in zip(grouped, one_by_one, strict=True):
        assert torch.equal(gi, oi) and torch.equal(gt, ot) and gp == op
        np.testing.assert_array_equal(gm, om)
        np.testing.assert_array_equal(gpad, opad)


def test_loader_timing_takes_whole_requests(samples, cache, monkeypatch):
    """A timing of the device path starts and ends on a request's boundary: the warm-up takes the first
    request's batches (made together), and the timed part ends with a request's last batch or its
    epoch's; a window cutting a request would count its work without all of its images."""
    from turboyolo.data.timing import measure_loader

    monkeypatch.setattr(device_loader, "DEVICE_REQUEST_IMAGES", 4)
    loader = build_loader(samples, workers=1, cache=cache, augment=None, augment_on="device", img_size=96,
                          batch_size=2, shuffle=True, seed=5)
    assert loader.group == 2 and len(loader) == 5  # 9 images: requests of 2 + 2 + 1 batches an epoch
    m = measure_loader(loader, 4)
    assert m.untimed_images == 4 and m.images == 4
    m = measure_loader(loader, 6)  # the second request, the epoch's short last one, the next epoch's first
    assert m.untimed_images == 4 and m.images == 4 + 1 + 4


def test_loader_timing_goes_on_to_a_cpu_time_in_whole_requests(samples, cache, monkeypatch):
    """``min_cpu_s``: the timed part goes on past its images (whole requests) until it has timed that much
    CPU time or ``max_images``, after the one warm-up (the start-of-run measurement, instead of a second
    measurement with a warm-up of its own); 0, the images asked for."""
    from turboyolo.data.timing import measure_loader

    monkeypatch.setattr(device_loader, "DEVICE_REQUEST_IMAGES", 4)
    loader = build_loader(samples, workers=1, cache=cache, augment=None, augment_on="device", img_size=96,
                          batch_size=2, shuffle=True, seed=5)
    m = measure_loader(loader, 4, min_cpu_s=0.0, max_images=40)
    assert m.untimed_images == 4 and m.images == 4
    m = measure_loader(loader, 4, min_cpu_s=1e9, max_images=12)  # never reached: up to max_images
    assert m.untimed_images == 4 and m.images == 4 + 1 + 4 + 4  # whole requests, across the epoch's end


def test_buffer_ring_settles_at_the_largest_request(samples, cache):
    """Requests of varying canvas counts (a full group, an epoch's short last one) do not keep replacing
    buffers: a replacement is as large as the largest request so far, so the ring ends up holding only
    such buffers and reuses them."""
    dataset = build_loader(samples, workers=0, cache=cache, augment=None, augment_on="device",
                           **KW).dataset
    dataset.ring, dataset.pin = 2, False
    for count in (8, 2, 8, 2, 8, 2, 8):
        assert dataset._buffer(count).shape[0] == count
    assert [buffer.shape[0] for buffer in dataset._buffers] == [8, 8]
    held = {buffer.data_ptr() for buffer in dataset._buffers}
    for count in (2, 8, 5):
        dataset._buffer(count)
    assert {buffer.data_ptr() for buffer in dataset._buffers} == held  # reused, none allocated


def test_a_timing_past_the_ring_round_sees_no_new_buffer(samples, cache):
    """data.timing.ring_round_batches (what the doctor and the start-of-run measurement time past): once
    that many batches are made, the in-process ring holds all its buffers and reuses them."""
    from turboyolo.data.timing import ring_round_batches

    loader = build_loader(samples, workers=0, cache=cache, augment=AugmentParams.from_net(mosaic=1.0),
                          augment_on="device", pin_memory=False, **KW)
    dataset = loader.dataset
    assert dataset.ring > 0 and ring_round_batches(loader) > dataset.ring
    made, epoch = 0, 0
    while made < ring_round_batches(loader):
        loader.set_epoch(epoch)
        for _ in loader:
            made += 1
            if made == ring_round_batches(loader):
                break
        epoch += 1
    assert len(dataset._buffers) == dataset.ring
    held = {buffer.data_ptr() for buffer in dataset._buffers}
    loader.set_epoch(epoch)
    for _ in loader:
        pass
    assert {buffer.data_ptr() for buffer in dataset._buffers} == held
