"""The device augmentation path against the CPU path: same boxes, same pixels up to rounding."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from turboyolo.data.augment import (
    AugmentParams,
    apply_hsv,
    augment_sample,
    hsv_table_from,
    mosaic_sample,
    plan_mosaic,
    sample_rng,
)
from turboyolo.data.device_augment import (
    PartLayout,
    augment_batch,
    compose_batch,
    hsv_jitter,
    place_on_canvas,
    plan_mosaic_parts,
    plan_sample,
    thetas_for,
)


def _image(h, w, seed=0):
    rng = np.random.default_rng(seed)
    # smooth content so bilinear rounding differences stay small
    base = rng.integers(0, 255, (h // 8 + 2, w // 8 + 2, 3)).astype(np.float32)
    import cv2

    return np.ascontiguousarray(cv2.resize(base, (w, h), interpolation=cv2.INTER_LINEAR).astype(np.uint8))


LABELS = np.array([[0, 0.5, 0.5, 0.3, 0.4], [1, 0.2, 0.3, 0.1, 0.1], [0, 0.9, 0.85, 0.15, 0.2]], np.float32)
PARAMS = AugmentParams(degrees=10, scale=(0.6, 1.4), translate=0.1, jitter=0.2, hue=0.0, saturation=1.0,
                       exposure=1.0, flip=0.5)


def _device(image, orig_hw, canvas, out, params, rng):
    theta, hsv, boxes, _ = plan_sample(image.shape[:2], orig_hw, LABELS, canvas, out, params, rng)
    batch = torch.from_numpy(place_on_canvas(image, canvas)).permute(2, 0, 1)[None]
    result = augment_batch(batch, torch.from_numpy(theta)[None], torch.from_numpy(hsv)[None], out)
    return (result[0].permute(1, 2, 0).numpy() * 255), boxes


@pytest.mark.parametrize("orig_hw,stored_hw", [((120, 160), (120, 160)), ((600, 800), (150, 200)),
                                               ((200, 100), (96, 48))])
def test_letterbox_identity_matches_cpu(orig_hw, stored_hw):
    image = _image(*stored_hw)
    cpu_img, cpu_boxes, _ = augment_sample(image, LABELS, orig_hw, 128, None, None)
    dev_img, dev_boxes = _device(image, orig_hw, 208, 128, None, None)
    np.testing.assert_array_equal(dev_boxes, cpu_boxes)
    assert np.abs(dev_img - cpu_img).max() <= 3.0
    assert np.abs(dev_img - cpu_img).mean() < 0.6


@pytest.mark.parametrize("seed", range(6))
def test_random_affine_matches_cpu(seed):
    orig_hw, stored = (300, 400), (96, 128)
    image = _image(*stored, seed=seed)
    cpu_img, cpu_boxes, _ = augment_sample(image, LABELS, orig_hw, 128, PARAMS, sample_rng(seed, 1, 2))
    dev_img, dev_boxes = _device(image, orig_hw, 128, 128, PARAMS, sample_rng(seed, 1, 2))
    np.testing.assert_array_equal(dev_boxes, cpu_boxes)
    diff = np.abs(dev_img - cpu_img)
    assert np.percentile(diff, 99) <= 4.0 and diff.mean() < 1.0


@pytest.mark.parametrize("dh,ds,dv", [(0.0, 1.0, 1.0), (0.1, 1.0, 1.0), (-0.05, 1.4, 0.7), (0.0, 0.6, 1.3)])
def test_hsv_matches_cpu_lookup_table(dh, ds, dv):
    image = _image(64, 64, seed=3)
    cpu = apply_hsv(image.copy(), hsv_table_from(dh, ds, dv)).astype(np.float32)
    tensor = torch.from_numpy(image).permute(2, 0, 1)[None].float() / 255
    dev = hsv_jitter(tensor, torch.tensor([[dh, ds, dv]]))[0].permute(1, 2, 0).numpy() * 255
    # OpenCV quantises hue to 2 degrees and H, S, V to 8 bits; the device path is continuous.
    assert np.percentile(np.abs(dev - cpu), 95) <= 6.0


def test_hsv_round_trip_is_identity():
    tensor = torch.rand(2, 3, 16, 16)
    out = hsv_jitter(tensor, torch.tensor([[1.0, 1.0, 1.0], [0.0, 1.0, 1.0]]))  # a full turn of hue
    assert torch.allclose(out, tensor, atol=1e-5)


def _mosaic_parts(rng, canvas, count=4):
    """4 x (stored image, labels, orig_hw): originals of varied size and aspect, stored as a prepared
    cache stores them (longer side ``canvas``)."""
    parts = []
    for _ in range(count):
        orig_hw = (int(rng.integers(40, 1200)), int(rng.integers(40, 1200)))
        fit = canvas / max(orig_hw)
        stored = (max(1, round(orig_hw[0] * fit)), max(1, round(orig_hw[1] * fit)))
        n = int(rng.integers(0, 6))
        wh = rng.uniform(0.02, 0.6, (n, 2))
        centre = rng.uniform(wh / 2, 1 - wh / 2)
        labels = np.concatenate([rng.integers(0, 3, (n, 1)), centre, wh], axis=1).astype(np.float32)
        parts.append((_image(*stored, seed=int(rng.integers(1 << 30))), labels, orig_hw))
    return parts


def _device_mosaic(parts, canvas, out, params, rng):
    plan = plan_mosaic([(labels, hw) for _, labels, hw in parts], out, params, rng)
    stored, orig = [p[0].shape[:2] for p in parts], [p[2] for p in parts]
    thetas, rects = plan_mosaic_parts(plan, stored, orig, canvas, out)
    canvases = torch.stack([torch.from_numpy(place_on_canvas(p[0], canvas)) for p in parts])
    canvases = canvases.permute(0, 3, 1, 2)
    layout = PartLayout(torch.from_numpy(rects), torch.zeros(4, dtype=torch.int64),
                        torch.zeros(1, dtype=torch.int64), torch.ones(1), 1)
    hsv = torch.tensor([plan.hsv], dtype=torch.float32)
    result = compose_batch(canvases, torch.from_numpy(thetas), hsv, out, layout)
    return result[0].permute(1, 2, 0).numpy() * 255, plan.boxes, plan.matrices[0]


@pytest.mark.parametrize("seed", range(10))
def test_device_mosaic_matches_cpu_mosaic(seed):
    # random originals (sizes, aspects, boxes), output sizes, zoom ranges and flips; the device paints
    # each part over the whole output and keeps it inside its quadrant, the CPU warps each quadrant
    rng = np.random.default_rng(seed)
    out = int(rng.choice([64, 96, 160, 224]))
    canvas = out + 32 * int(rng.integers(0, 3))
    params = AugmentParams(scale=(0.4, 1.6), flip=0.5, flipud=0.5 if seed % 2 else 0.0, hue=0.0,
                           saturation=1.0, exposure=1.0, mosaic=1.0)
    parts = _mosaic_parts(rng, canvas)
    cpu_img, cpu_boxes, cpu_matrix = mosaic_sample(parts, out, params, sample_rng(seed, 3, 1))
    dev_img, dev_boxes, dev_matrix = _device_mosaic(parts, canvas, out, params, sample_rng(seed, 3, 1))
    np.testing.assert_array_equal(dev_boxes, cpu_boxes)
    np.testing.assert_array_equal(dev_matrix, cpu_matrix)
    diff = np.abs(dev_img - cpu_img.astype(np.float32))
    # bilinear sampling both ways; OpenCV rounds its weights to 1/32 and its result to 8 bits (measured:
    # mean 0.12-0.27, largest 2.5 over these seeds; a mosaic left unflipped differs by 30-56 on average)
    assert diff.mean() < 0.4 and diff.max() <= 3.0, (diff.mean(), diff.max())


@pytest.mark.parametrize("seed", range(4))
def test_device_mosaic_with_colour_matches_cpu(seed):
    rng = np.random.default_rng(100 + seed)
    params = AugmentParams(scale=(0.5, 1.5), mosaic=1.0)  # the default HSV jitter
    parts = _mosaic_parts(rng, 128)
    cpu_img, cpu_boxes, _ = mosaic_sample(parts, 128, params, sample_rng(seed, 0, 0))
    dev_img, dev_boxes, _ = _device_mosaic(parts, 128, 128, params, sample_rng(seed, 0, 0))
    np.testing.assert_array_equal(dev_boxes, cpu_boxes)
    # OpenCV quantises H/S/V to 8 bits (hue to 2 degrees); the device is continuous
    assert np.abs(dev_img - cpu_img).mean() < 1.5


def test_thetas_of_many_images_are_each_images_bit_for_bit():
    """The batched theta (a mosaic's 4 parts at once) is the one 2-D matrix algebra gives each image
    alone: stored px -> original px -> output px, inverted, between the normalised frames."""
    rng = np.random.default_rng(11)
    for _ in range(100):
        count, canvas, out = int(rng.integers(1, 9)), int(rng.integers(64, 800)), int(rng.choice([256, 608]))
        matrices = rng.uniform(-3, 3, (count, 2, 3)) * [1, 1, 200]
        stored = [(int(rng.integers(10, 700)), int(rng.integers(10, 700))) for _ in range(count)]
        orig = [(int(rng.integers(10, 6000)), int(rng.integers(10, 6000))) for _ in range(count)]
        got = thetas_for(matrices, stored, orig, canvas, out)
        for k in range(count):
            to_orig = np.diag([orig[k][1] / stored[k][1], orig[k][0] / stored[k][0], 1.0])
            stored_to_out = np.vstack([matrices[k], [0.0, 0.0, 1.0]]) @ to_orig
            from_out = np.array([[out / 2, 0, out / 2], [0, out / 2, out / 2], [0, 0, 1.0]])
            to_canvas = np.array([[2 / canvas, 0, -1], [0, 2 / canvas, -1], [0, 0, 1.0]])
            expected = (to_canvas @ np.linalg.inv(stored_to_out) @ from_out)[:2].astype(np.float32)
            assert np.array_equal(got[k], expected)
