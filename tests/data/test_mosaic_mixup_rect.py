"""Mosaic placed by hand, up-down flips, mixup, class-weighted sampling, --close-mosaic keys and
rectangular evaluation batches whose boxes map back exactly."""

from __future__ import annotations

import numpy as np
import pytest

from turboyolo.data.augment import (
    FILL_VALUE,
    AugmentParams,
    augment_sample,
    letterbox_matrix,
    mixup,
    mosaic_sample,
    random_matrix,
    sample_rng,
)
from turboyolo.data.loader import DetectionDataset
from turboyolo.data.pipeline import build_loader
from turboyolo.data.sampler import MultiScaleBatchSampler, rect_shape
from turboyolo.data.scan import Sample

PLAIN = dict(hue=0.0, saturation=1.0, exposure=1.0, translate=0.0, jitter=0.0)


def _part(colour, box, hw=(64, 64), cls=0):
    """An image of ``hw`` with one box (x1, y1, x2, y2 px) painted ``colour``, and its label row."""
    h, w = hw
    image = np.full((h, w, 3), FILL_VALUE, np.uint8)
    x1, y1, x2, y2 = box
    image[y1:y2, x1:x2] = colour
    label = np.array([[cls, (x1 + x2) / 2 / w, (y1 + y2) / 2 / h, (x2 - x1) / w, (y2 - y1) / h]], np.float32)
    return image, label, hw


def test_mosaic_places_each_image_by_hand_and_keeps_its_boxes_in_its_quadrant():
    # 128 px mosaic of four 128x128 images at zoom 1: each image keeps its own scale (fit 1.0), its
    # corner touches the centre (cx, cy), and the quadrant shows the image's part next to the centre.
    size = 128
    colours = ((250, 20, 20), (20, 250, 20), (20, 20, 250), (250, 250, 20))
    boxes_px = ((90, 80, 120, 110), (10, 90, 40, 120), (80, 5, 110, 35), (0, 0, 30, 20))
    parts = [_part(c, b, (128, 128), k) for k, (c, b) in enumerate(zip(colours, boxes_px))]
    params = AugmentParams(scale=(1.0, 1.0), flip=0.0, mosaic=1.0, **PLAIN)
    copy = sample_rng(7, 0, 0)
    cx, cy = (int(round(v)) for v in copy.uniform(0.25 * size, 0.75 * size, size=2))
    out, boxes, matrix = mosaic_sample(parts, size, params, sample_rng(7, 0, 0))
    # image k's top-left corner in the output, by hand: 0 ends at the centre, 1 starts at cx and ends at
    # cy, 2 ends at cx and starts at cy, 3 starts at the centre
    origin = {0: (cx - 128, cy - 128), 1: (cx, cy - 128), 2: (cx - 128, cy), 3: (cx, cy)}
    quadrant = {0: (0, 0, cx, cy), 1: (cx, 0, size, cy), 2: (0, cy, cx, size), 3: (cx, cy, size, size)}
    np.testing.assert_allclose(matrix, [[1, 0, cx - 128], [0, 1, cy - 128]])
    expected = []
    for k, (x1, y1, x2, y2) in enumerate(boxes_px):
        ox, oy = origin[k]
        qx1, qy1, qx2, qy2 = quadrant[k]
        bx1, by1 = np.clip(x1 + ox, qx1, qx2), np.clip(y1 + oy, qy1, qy2)
        bx2, by2 = np.clip(x2 + ox, qx1, qx2), np.clip(y2 + oy, qy1, qy2)
        full = (x2 - x1) * (y2 - y1)
        if bx2 - bx1 >= 2 and by2 - by1 >= 2 and (bx2 - bx1) * (by2 - by1) >= 0.25 * full:
            expected.append([k, (bx1 + bx2) / 2 / size, (by1 + by2) / 2 / size, (bx2 - bx1) / size,
                             (by2 - by1) / size])
            # the pixels are the image's own colour there
            patch = out[int(by1):int(by2), int(bx1):int(bx2)]
            assert (np.abs(patch.astype(int) - colours[k]) <= 1).all()
    assert len(expected) >= 2, (cx, cy)  # the seed leaves several boxes visible
    np.testing.assert_allclose(boxes, np.array(expected, np.float32), atol=1e-6)
    for row in boxes:
        qx1, qy1, qx2, qy2 = quadrant[int(row[0])]
        x1, y1 = (row[1] - row[3] / 2) * size, (row[2] - row[4] / 2) * size
        x2, y2 = (row[1] + row[3] / 2) * size, (row[2] + row[4] / 2) * size
        assert qx1 - 1e-4 <= x1 and x2 <= qx2 + 1e-4 and qy1 - 1e-4 <= y1 and y2 <= qy2 + 1e-4


def test_flipud_mirrors_pixels_and_boxes():
    image, label, hw = _part((200, 30, 30), (8, 4, 24, 20))
    params = AugmentParams(scale=(1.0, 1.0), flip=0.0, flipud=1.0, **PLAIN)
    out, boxes, _ = augment_sample(image, label, hw, 64, params, sample_rng(0, 0, 0))
    straight, plain_boxes, _ = augment_sample(image, label, hw, 64, None, None)
    np.testing.assert_array_equal(out, straight[::-1])
    np.testing.assert_allclose(boxes[:, 2], 1 - plain_boxes[:, 2], atol=1e-6)
    np.testing.assert_allclose(boxes[:, [0, 1, 3, 4]], plain_boxes[:, [0, 1, 3, 4]], atol=1e-6)
    # flipud=0 draws nothing more (six numbers, as before the option): earlier runs keep their draws
    for flipud, draws in ((0.0, 6), (0.5, 7)):
        rng, reference = sample_rng(3, 1, 2), sample_rng(3, 1, 2)
        random_matrix(hw, 64, AugmentParams(flipud=flipud), rng)
        reference.random(draws)
        assert rng.random() == reference.random()


def test_mixup_blends_pixels_and_keeps_both_box_sets():
    a, la, _ = _part((200, 0, 0), (0, 0, 16, 16))
    b, lb, _ = _part((0, 200, 0), (32, 32, 64, 64), cls=1)
    image, boxes = mixup((a, la), (b, lb), 0.25)
    np.testing.assert_array_equal(image[0, 0], np.round(0.25 * a[0, 0] + 0.75 * b[0, 0]).astype(np.uint8))
    np.testing.assert_array_equal(boxes, np.concatenate([la, lb]))


def _samples(tmp_path, count=6, sizes=None):
    import cv2

    samples = []
    rng = np.random.default_rng(0)
    for i in range(count):
        h, w = sizes[i] if sizes else (64, 64)
        image = np.full((h, w, 3), 40 * i % 255, np.uint8)
        bw, bh = rng.uniform(0.1, 0.4, 2)
        cx, cy = rng.uniform(bw / 2, 1 - bw / 2), rng.uniform(bh / 2, 1 - bh / 2)
        path = tmp_path / f"i{i}.png"
        cv2.imwrite(str(path), image)
        samples.append(Sample(path, np.array([[i % 2, cx, cy, bw, bh]], np.float32), (h, w)))
    return samples


def test_mixup_in_the_loader_is_deterministic_and_merges_boxes(tmp_path):
    samples = _samples(tmp_path)
    params = AugmentParams(mixup=1.0, **PLAIN)
    dataset = DetectionDataset(samples, params, 64, seed=1)
    image, boxes, _ = dataset[(0, 0, 64)]
    assert len(boxes) == 2  # its own box and the partner's
    again = DetectionDataset(samples, params, 64, seed=1)[(0, 0, 64)]
    np.testing.assert_array_equal(image, again[0])
    closed, closed_boxes, _ = dataset[(0, 0, 64, False)]  # --close-mosaic epochs: no mixup
    assert len(closed_boxes) == 1
    alone = DetectionDataset(samples, AugmentParams(**PLAIN), 64, seed=1)[(0, 0, 64)]
    np.testing.assert_array_equal(closed, alone[0])


def test_close_mosaic_keys_switch_mosaic_off(tmp_path):
    samples = _samples(tmp_path)
    loader = build_loader(samples, img_size=64, batch_size=3, augment=AugmentParams(mosaic=1.0, **PLAIN),
                          workers=0, shuffle=True, seed=0)
    mosaic_boxes = 0  # a mosaic of four one-box images: more boxes than images (over a few epochs)
    for epoch in range(4):
        loader.set_epoch(epoch)
        mosaic_boxes += sum(batch[1].shape[0] for batch in loader)
    loader.set_epoch(0)
    mixing_keys = next(iter(loader.batch_sampler))
    # mixing: (index, epoch, size, True, pool), the pool holding the batch's own samples
    assert all(len(k) == 5 and k[3] is True and k[0] in k[4] for k in mixing_keys)
    loader.set_epoch(0, mix=False)
    keys = next(iter(loader.batch_sampler))
    assert all(len(k) == 4 and k[3] is False for k in keys)
    plain_batch = next(iter(loader))
    assert plain_batch[1].shape[0] == 3  # one box per image: no mosaic
    assert mosaic_boxes > 4 * len(samples)


def test_image_weights_draw_by_weight():
    sampler = MultiScaleBatchSampler(5, 5, 64, shuffle=True, weights=np.array([0, 0, 1.0, 0, 0]))
    assert [k[0] for batch in sampler for k in batch] == [2] * 5
    sampler = MultiScaleBatchSampler(4, 2, 64, shuffle=True, seed=3, weights=np.array([1, 1, 1, 30.0]))
    drawn = [k[0] for epoch in range(20) for batch in (sampler.set_epoch(epoch) or sampler) for k in batch]
    assert drawn.count(3) > 0.8 * len(drawn)


def test_rect_shape_holds_every_letterbox():
    assert rect_shape(np.array([0.5, 0.75]), 416) == (416, 320)  # wide: 416 x (0.75 * 416 -> 320)
    assert rect_shape(np.array([2.0, 1.5]), 416) == (288, 416)  # tall: 416 / 1.5 = 277 -> 288 x 416
    assert rect_shape(np.array([0.8, 1.2]), 416) == 416  # mixed: square


def test_rect_batches_keep_boxes_exact_under_unletterboxing(tmp_path):
    sizes = [(60, 120), (64, 128), (100, 90), (120, 60), (128, 64), (64, 64), (50, 150)]
    samples = _samples(tmp_path, len(sizes), sizes)
    loader = build_loader(samples, img_size=128, batch_size=2, augment=None, workers=0, shuffle=False,
                          rect=True)
    square = build_loader(samples, img_size=128, batch_size=2, augment=None, workers=0, shuffle=False)
    shapes, seen = set(), 0
    by_path = {str(s.image): s for s in samples}
    for images, targets, metas in loader:
        h, w = images.shape[2:]
        assert h % 32 == 0 and w % 32 == 0 and max(h, w) == 128
        shapes.add((w, h))
        for slot, meta in enumerate(metas):
            sample = by_path[str(meta.path)]
            oh, ow = sample.hw
            rows = targets[targets[:, 0] == slot][:, 2:].numpy().astype(np.float64) * [w, h, w, h]
            # un-letterbox: original = (network - pad) / ratio
            cx = (rows[:, 0] - meta.pad[0]) / meta.ratio / ow
            cy = (rows[:, 1] - meta.pad[1]) / meta.ratio / oh
            bw, bh = rows[:, 2] / meta.ratio / ow, rows[:, 3] / meta.ratio / oh
            np.testing.assert_allclose(np.stack([cx, cy, bw, bh], 1), sample.labels[:, 1:], atol=1e-5)
            assert meta.ratio == pytest.approx(letterbox_matrix((oh, ow), 128)[1])  # the square letterbox's
            seen += 1
    assert seen == len(samples) and len(shapes) > 1
    assert sum(int(np.prod(i.shape[2:])) * i.shape[0] for i, _, _ in loader) < \
        sum(int(np.prod(i.shape[2:])) * i.shape[0] for i, _, _ in square)  # fewer padded pixels
    with pytest.raises(Exception, match="evaluation"):
        build_loader(samples, img_size=128, batch_size=2, augment=AugmentParams(), workers=0, shuffle=True,
                     rect=True)


def test_the_runs_first_pool_fills_as_it_goes(tmp_path):
    """Epoch 1's first partner pool: a sample's mosaic and mixup partners come from the pool's samples up
    to itself (the first batch needs only its own images); later pools and epochs draw from the whole
    pool; a worker receives the pool as it is (pickled), so its batches are the main process's."""
    import pickle

    from turboyolo.data.augment import FillingPool, mixup_partner, mosaic_partners

    samples = _samples(tmp_path, count=24)
    loader = build_loader(samples, img_size=64, batch_size=4,
                          augment=AugmentParams(mosaic=1.0, mixup=1.0, **PLAIN), workers=0, shuffle=True,
                          seed=0)
    loader.batch_sampler.pool_batches = 2  # pools of 8: three in an epoch
    batches = list(loader.batch_sampler)
    pools = [batch[0][4] for batch in batches]
    assert isinstance(pools[0], FillingPool) and pools[1] is pools[0]
    assert all(type(pool) is tuple for pool in pools[2:])
    first = pools[0]
    for key in (key for batch in batches[:2] for key in batch):
        before = set(first[:first.index(key[0]) + 1])
        assert set(mosaic_partners(0, 0, key[0], 24, 1.0, 0, key[4])) <= before
        assert mixup_partner(0, 0, key[0], 24, 1.0, key[4])[0] in before
    drawn = {p for key in batches[2] for p in mosaic_partners(0, 0, key[0], 24, 1.0, 0, key[4])}
    assert not drawn <= {key[0] for key in batches[2]}  # a later pool: partners beyond the batch
    sent = pickle.loads(pickle.dumps(first))
    assert sent == first and type(sent) is FillingPool
    loader.set_epoch(1)
    assert all(type(batch[0][4]) is tuple for batch in loader.batch_sampler)
    # the first batch is made from its own images: four decodes
    loader.set_epoch(0)
    next(iter(loader))
    assert sum(loader.dataset.decodes.values()) == 4


def test_the_runs_first_batch_is_a_request_of_its_own_with_any_workers(tmp_path):
    """With several workers a request is a whole pool's batches; the run's first batch (its pool
    filling) is still one request of its own, so the first step waits for its images only. A start
    inside the epoch (a resume's remainder, re-pooled on another world size) has no filling pool."""
    from turboyolo.data.augment import FillingPool
    from turboyolo.data.sampler import BatchGroups

    samples = _samples(tmp_path, count=24)
    loader = build_loader(samples, img_size=64, batch_size=4, augment=AugmentParams(mosaic=1.0, **PLAIN),
                          workers=0, shuffle=True, seed=0)
    sampler = loader.batch_sampler
    sampler.pool_batches = 3  # pools of 12 samples: two in an epoch
    groups = list(BatchGroups(sampler, size=3))  # what a loader with several workers requests
    assert [len(group) for group in groups] == [1, 2, 3]
    sampler.set_epoch(1)
    assert [len(group) for group in BatchGroups(sampler, size=3)] == [3, 3]
    sampler.set_epoch(0, 8)
    assert not any(isinstance(batch[0][4], FillingPool) for batch in sampler)
