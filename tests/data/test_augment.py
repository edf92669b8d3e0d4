"""Augmentation: boxes checked against the warped pixels themselves, letterbox inverse, HSV, rng."""

import cv2
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turboyolo.data.augment import (
    FILL_VALUE,
    AugmentParams,
    apply_hsv,
    augment_sample,
    hsv_table_from,
    letterbox_matrix,
    mosaic_sample,
    sample_rng,
    transform_boxes,
    transform_boxes_parts,
)

OUT = 128


def _box_image(h, w, box):
    image = np.full((h, w, 3), FILL_VALUE, np.uint8)
    x1, y1, x2, y2 = box
    image[y1:y2, x1:x2] = 255
    return image


def _mask_extent(image):
    mask = image[:, :, 0] > (FILL_VALUE + 255) / 2
    if not mask.any():
        return None
    ys, xs = np.nonzero(mask)
    return xs.min(), ys.min(), xs.max() + 1, ys.max() + 1


@st.composite
def scenes(draw):
    h = draw(st.integers(40, 160))
    w = draw(st.integers(40, 160))
    x1 = draw(st.integers(0, w - 12))
    y1 = draw(st.integers(0, h - 12))
    x2 = draw(st.integers(x1 + 12, w))
    y2 = draw(st.integers(y1 + 12, h))
    seed = draw(st.integers(0, 2**31 - 1))
    degrees = draw(st.sampled_from([0.0, 0.0, 30.0]))
    return h, w, (x1, y1, x2, y2), seed, degrees


@settings(max_examples=150, deadline=None)
@given(scenes())
def test_boxes_follow_pixels(scene):
    h, w, box, seed, degrees = scene
    params = AugmentParams(degrees=degrees, scale=(0.6, 1.5), translate=0.3, jitter=0.3, hue=0.0,
                           saturation=1.0, exposure=1.0, flip=0.5)
    labels = np.array([[2, (box[0] + box[2]) / 2 / w, (box[1] + box[3]) / 2 / h,
                        (box[2] - box[0]) / w, (box[3] - box[1]) / h]], np.float32)
    rng = sample_rng(seed, 0, 0)
    out, boxes, matrix = augment_sample(_box_image(h, w, box), labels, (h, w), OUT, params, rng)
    assert out.shape == (OUT, OUT, 3) and out.dtype == np.uint8
    extent = _mask_extent(out)
    # direct computation of the transformed rectangle's hull (unclipped)
    xs = np.array([box[0], box[2], box[2], box[0]], float)
    ys = np.array([box[1], box[1], box[3], box[3]], float)
    px = matrix[0, 0] * xs + matrix[0, 1] * ys + matrix[0, 2]
    py = matrix[1, 0] * xs + matrix[1, 1] * ys + matrix[1, 2]
    hull = np.array([px.min(), py.min(), px.max(), py.max()])
    clipped = bool(np.any(hull < 0) or np.any(hull > OUT))
    if len(boxes) == 1:
        assert boxes[0, 0] == 2
        cx, cy, bw, bh = boxes[0, 1:] * OUT
        got = np.array([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2])
        assert extent is not None
        assert np.all(got >= 0) and np.all(got <= OUT)
        np.testing.assert_allclose(got, np.clip(hull, 0, OUT), atol=1e-3)
        if degrees == 0:
            # straight edges: the bilinear ramp crosses half-way at the box's edge, a pixel's centre decides
            np.testing.assert_allclose(got, np.array(extent, float), atol=1.5)
        else:
            # a rotated rectangle's extreme points are its corners, where bilinear interpolation is the
            # product of two edge ramps: the half-way contour is cut inside the corner by up to (1 - 1/sqrt 2)
            # source pixel along each source axis, i.e. that many output pixels times the largest stretch;
            # pixels lie outside the box by half a pixel at most (a pixel's centre decides; 1.0 allowed), and
            # inside it by no more than that cut and a pixel (uint8 rounding of the ramp included); measured
            # over 2,800 unclipped scenes: at most 0.50 outside, 0.63 + the cut inside
            stretch = np.linalg.svd(matrix[:, :2], compute_uv=False)[0]
            # how far the visible pixels lie outside the box per side (negative: inside it)
            outward = np.array([got[0] - extent[0], got[1] - extent[1],
                                extent[2] - got[2], extent[3] - got[3]])
            assert outward.max() <= 1.0
            if not clipped:  # a box cut by the border may hold far fewer pixels than its clipped hull
                assert -outward.min() <= 1.0 + (1 - 2 ** -0.5) * stretch
    else:
        # dropped: what is visible must be thin or a small part of the transformed box
        assert clipped
        if extent is not None:
            ew, eh = extent[2] - extent[0], extent[3] - extent[1]
            hull_area = (hull[2] - hull[0]) * (hull[3] - hull[1])
            small = ew * eh < params.min_visible * hull_area + 2 * (ew + eh)
            assert min(ew, eh) < params.min_box_px + 2 or small


@settings(max_examples=60, deadline=None)
@given(st.integers(20, 300), st.integers(20, 300), st.integers(0, 1000))
def test_letterbox_maps_back_exactly(h, w, seed):
    rng = np.random.default_rng(seed)
    cxcy = rng.uniform(0.3, 0.7, size=(3, 2))
    wh = rng.uniform(0.05, 0.5, size=(3, 2))
    labels = np.hstack([np.zeros((3, 1)), cxcy, wh]).astype(np.float32)
    image = np.zeros((h, w, 3), np.uint8)
    out, boxes, matrix = augment_sample(image, labels, (h, w), OUT, None, None)
    _, ratio, pad = letterbox_matrix((h, w), OUT)
    np.testing.assert_allclose(matrix, [[ratio, 0, pad[0]], [0, ratio, pad[1]]])
    assert len(boxes) == 3
    net_xy = boxes[:, 1:3] * OUT
    orig_xy = (net_xy - np.array(pad)) / ratio
    np.testing.assert_allclose(orig_xy, labels[:, 1:3] * [w, h], atol=2e-3 * max(h, w))
    np.testing.assert_allclose(boxes[:, 3:5] * OUT / ratio, labels[:, 3:5] * [w, h], atol=2e-3 * max(h, w))
    assert max(h, w) * ratio == pytest.approx(OUT)


def test_letterbox_pixels_sit_where_the_matrix_says():
    # an image with one bright column: after letterbox it appears at ratio * x + pad
    h, w = 50, 100
    image = np.zeros((h, w, 3), np.uint8)
    image[:, 40:60] = 200
    out, _, _ = augment_sample(image, np.zeros((0, 5), np.float32), (h, w), 200, None, None)
    cols = np.nonzero(out[100, :, 0] > 100)[0]
    assert cols.min() == 80 and cols.max() == 119
    rows = np.nonzero(out[:, 100, 0] > 150)[0]
    assert rows.min() == 50 and rows.max() == 149
    assert out[0, 0, 0] == FILL_VALUE


def test_same_rng_same_result_and_different_index_differs():
    image = np.random.default_rng(0).integers(0, 255, (90, 120, 3), dtype=np.uint8)
    labels = np.array([[0, 0.5, 0.5, 0.3, 0.3]], np.float32)
    params = AugmentParams.from_net(angle=10)
    a = augment_sample(image, labels, (90, 120), 96, params, sample_rng(3, 1, 7))
    b = augment_sample(image, labels, (90, 120), 96, params, sample_rng(3, 1, 7))
    c = augment_sample(image, labels, (90, 120), 96, params, sample_rng(3, 1, 8))
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert not np.array_equal(a[0], c[0])


def test_hsv_lut_semantics():
    red = np.zeros((4, 4, 3), np.uint8)
    red[..., 0] = 255
    green = apply_hsv(red.copy(), hsv_table_from(1 / 3, 1.0, 1.0))  # +120 degrees
    np.testing.assert_array_equal(green[0, 0], [0, 255, 0])
    img = np.random.default_rng(1).integers(0, 120, (16, 16, 3), dtype=np.uint8)
    brighter = apply_hsv(img.copy(), hsv_table_from(0.0, 1.0, 2.0))
    np.testing.assert_allclose(brighter.astype(int), np.clip(img.astype(int) * 2, 0, 255), atol=6)
    gray = apply_hsv(img.copy(), hsv_table_from(0.0, 0.0 + 1e-9, 1.0))
    assert np.abs(gray.astype(int) - gray.max(axis=2, keepdims=True)).max() <= 1  # saturation ~0
    np.testing.assert_array_equal(gray.max(axis=2), cv2.cvtColor(img, cv2.COLOR_RGB2HSV)[..., 2])


def test_from_net_and_validation():
    p = AugmentParams.from_net(angle=5, saturation=1.5, exposure=1.4, hue=0.05, jitter=0.2, flip=False)
    assert (p.degrees, p.saturation, p.exposure, p.hue, p.jitter, p.flip) == (5, 1.5, 1.4, 0.05, 0.2, 0.0)
    with pytest.raises(ValueError):
        AugmentParams(saturation=0.5)
    with pytest.raises(ValueError):
        AugmentParams(scale=(1.5, 1.0))


COLOURS = ((255, 40, 40), (40, 255, 40), (40, 40, 255), (255, 255, 255))


@settings(max_examples=60, deadline=None)
@given(st.lists(scenes(), min_size=4, max_size=4), st.integers(0, 2**31 - 1))
def test_mosaic_boxes_follow_pixels(scenes_, seed):
    params = AugmentParams(scale=(0.6, 1.4), hue=0.0, saturation=1.0, exposure=1.0, flip=0.5, mosaic=1.0)
    parts = []
    for k, (h, w, box, _, _) in enumerate(scenes_):
        image = np.full((h, w, 3), FILL_VALUE, np.uint8)
        image[box[1]:box[3], box[0]:box[2]] = COLOURS[k]
        labels = np.array([[k, (box[0] + box[2]) / 2 / w, (box[1] + box[3]) / 2 / h,
                            (box[2] - box[0]) / w, (box[3] - box[1]) / h]], np.float32)
        parts.append((image, labels, (h, w)))
    out, boxes, _ = mosaic_sample(parts, OUT, params, sample_rng(seed, 0, 0))
    assert out.shape == (OUT, OUT, 3)
    assert len(set(boxes[:, 0].tolist())) == len(boxes)
    for row in boxes:
        k = int(row[0])
        mask = np.all(np.abs(out.astype(int) - np.array(COLOURS[k])) < 50, axis=2)
        assert mask.any()
        ys, xs = np.nonzero(mask)
        extent = np.array([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], float)
        cx, cy, bw, bh = row[1:] * OUT
        got = np.array([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2])
        np.testing.assert_allclose(got, extent, atol=2.0)
    for k in set(range(4)) - set(boxes[:, 0].astype(int).tolist()):
        mask = np.all(np.abs(out.astype(int) - np.array(COLOURS[k])) < 50, axis=2)
        if mask.any():  # a dropped box shows at most a sliver or a small part of itself
            ys, xs = np.nonzero(mask)
            h, w, box, _, _ = scenes_[k]
            assert min(xs.max() - xs.min(), ys.max() - ys.min()) + 1 < params.min_box_px + 2 or \
                mask.sum() < 0.5 * (box[2] - box[0]) * (box[3] - box[1]) * (OUT / max(h, w) * 1.4) ** 2


def _random_part(rng, rotate):
    n = int(rng.integers(0, 9))
    labels = np.column_stack([rng.integers(0, 5, n), rng.uniform(-0.1, 1.1, (n, 2)),
                              rng.uniform(0.0, 0.9, (n, 2))]).astype(np.float32)
    hw = (int(rng.integers(20, 5000)), int(rng.integers(20, 5000)))
    s = rng.uniform(0.01, 3.0)
    if rotate:
        a = rng.uniform(-np.pi, np.pi)
        matrix = np.array([[s * np.cos(a), -s * np.sin(a), rng.uniform(-300, 300)],
                           [s * np.sin(a), s * np.cos(a), rng.uniform(-300, 300)]])
    else:
        sy = s * rng.uniform(0.5, 2)
        matrix = np.array([[s, 0.0, rng.uniform(-300, 300)], [0.0, sy, rng.uniform(-300, 300)]])
    x1, y1 = (int(v) for v in rng.integers(0, 300, 2))
    clip = (x1, y1, x1 + int(rng.integers(0, 400)), y1 + int(rng.integers(0, 400)))
    if rng.random() < 0.1:  # numpy sizes and float64 labels promote otherwise: one image at a time
        hw = tuple(np.int64(side) for side in hw)
    if rng.random() < 0.1:
        labels = labels.astype(np.float64)
    return labels, hw, matrix, clip


@pytest.mark.parametrize("rotate", [False, True])
@pytest.mark.parametrize("out_size", [416, (640, 384)])
def test_transform_boxes_parts_is_each_part_bit_for_bit(rotate, out_size):
    """A mosaic's boxes in one pass are exactly the per-image results, concatenated: every value, the
    rows kept and their order (tiny, outside and partly clipped boxes among random ones)."""
    rng = np.random.default_rng(7)
    for _ in range(200):
        parts = [_random_part(rng, rotate) for _ in range(int(rng.integers(1, 5)))]
        min_px, visible = float(rng.choice([0.0, 2.0, 5.5])), float(rng.choice([0.0, 0.25, 0.6]))
        expected = np.concatenate([transform_boxes(labels, hw, matrix, out_size, min_px, visible, clip)
                                   for labels, hw, matrix, clip in parts])
        got = transform_boxes_parts(parts, out_size, min_px, visible)
        assert got.dtype == np.float32 and got.shape == expected.shape
        assert np.array_equal(got.view(np.uint32), expected.view(np.uint32))
