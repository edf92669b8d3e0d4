"""The device augmentation path against the CPU path: same boxes, same pixels up to rounding."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from turboyolo.data.augment import AugmentParams, apply_hsv, augment_sample, hsv_table_from, sample_rng
from turboyolo.data.device_augment import augment_batch, hsv_jitter, place_on_canvas, plan_sample


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
