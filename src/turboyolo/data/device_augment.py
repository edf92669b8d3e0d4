"""Augmentation on the device (``--augment-on device``): the CPU only draws numbers and copies bytes.

The loader's CPU work per sample is: read the prepared (pre-resized) uint8 image, copy it into the
top-left corner of a fixed ``canvas x canvas`` array, draw the sample's random numbers from
(seed, epoch, index) exactly as the CPU path does, and move the boxes through the same matrix with
the same function. The device then warps the whole batch with one ``grid_sample`` (letterbox, scale,
aspect, rotation, translation and flip in one affine per image) and applies the HSV jitter as
batched tensor ops. Box semantics are therefore identical to the CPU path by construction; pixels
differ only by interpolation rounding.

Mosaic and mixup: a sample may take several canvases ("parts"). A mosaic's 4 parts are each warped by
their own affine (:func:`turboyolo.data.augment.plan_mosaic`'s matrix, the mosaic's flips folded in)
and kept inside their quadrant (a rectangle mask), summed into one image, then coloured; a mixup
blends two such images with the CPU path's weight (:class:`PartLayout` says which part goes where).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from turboyolo.data.augment import (
    FILL_VALUE,
    AugmentParams,
    MosaicPlan,
    draw_hsv,
    letterbox_matrix,
    random_matrix,
    transform_boxes,
)


def _draw_hsv(rng: np.random.Generator, params: AugmentParams) -> np.ndarray:
    return np.array(draw_hsv(rng, params.hue, params.saturation, params.exposure), np.float32)


def plan_sample(
    stored_hw: tuple[int, int],
    orig_hw: tuple[int, int],
    labels: np.ndarray,
    canvas: int,
    out_size: int,
    params: AugmentParams | None,
    rng: np.random.Generator | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The per-sample numbers the device needs; all cheap CPU arithmetic.

    Args:
        stored_hw: size of the prepared image, placed at the canvas's top-left corner.
        orig_hw: size of the original image the labels and matrices refer to.
        labels: float32 ``[N, 5]`` (cls, cx, cy, w, h) relative to the original.
        canvas: side of the square canvas the stored image sits in.
        out_size: side of the network input.
        params: augmentation ranges; ``None`` = letterbox only (validation).
        rng: the sample's rng (``augment.sample_rng``).

    Returns:
        theta ``[2, 3]`` for ``F.affine_grid`` (output -> canvas, normalised coordinates),
        hsv ``[3]`` (hue shift, saturation factor, value factor), boxes ``[M, 5]`` relative to output,
        and the 2x3 matrix original px -> output px (what ``ImageMeta.matrix`` holds).
    """
    if params is None:
        matrix = letterbox_matrix(orig_hw, out_size)[0]
        hsv = np.array([0.0, 1.0, 1.0], np.float32)
        boxes = transform_boxes(labels, orig_hw, matrix, out_size, 0.0, 0.0)
    else:
        matrix = random_matrix(orig_hw, out_size, params, rng)
        hsv = _draw_hsv(rng, params)
        boxes = transform_boxes(labels, orig_hw, matrix, out_size, params.min_box_px, params.min_visible)
    return theta_for(matrix, stored_hw, orig_hw, canvas, out_size), hsv, boxes, matrix


def theta_for(matrix: np.ndarray, stored_hw: tuple[int, int], orig_hw: tuple[int, int], canvas: int,
              out_size: int) -> np.ndarray:
    """``F.affine_grid``'s float32 ``[2, 3]`` (normalised output -> normalised canvas) of ``matrix``
    (original px -> output px) for an image stored at ``stored_hw`` in a canvas's top-left corner."""
    return thetas_for(matrix[None], [stored_hw], [orig_hw], canvas, out_size)[0]


def thetas_for(matrices: np.ndarray, stored_hws: Sequence[tuple[int, int]],
               orig_hws: Sequence[tuple[int, int]], canvas: int, out_size: int) -> np.ndarray:
    """:func:`theta_for` of ``P`` images at once: float64 ``[P, 2, 3]`` matrices -> float32 ``[P, 2, 3]``
    (each exactly what it is alone)."""
    count = len(matrices)
    stored, orig = np.asarray(stored_hws, np.float64), np.asarray(orig_hws, np.float64)
    # stored px -> original px -> output px, as 3x3 (continuous coordinates: pixel i covers [i, i+1)).
    to_orig = np.zeros((count, 3, 3))
    to_orig[:, 0, 0], to_orig[:, 1, 1] = orig[:, 1] / stored[:, 1], orig[:, 0] / stored[:, 0]
    to_orig[:, 2, 2] = 1.0
    stored_to_out = _homogeneous(matrices) @ to_orig
    # normalised output -> output px -> stored px -> normalised canvas
    from_norm_out = np.array([[out_size / 2, 0, out_size / 2], [0, out_size / 2, out_size / 2], [0, 0, 1.0]])
    to_norm_canvas = np.array([[2 / canvas, 0, -1], [0, 2 / canvas, -1], [0, 0, 1.0]])
    theta = to_norm_canvas @ np.linalg.inv(stored_to_out) @ from_norm_out
    return theta[:, :2].astype(np.float32)


def _homogeneous(matrices: np.ndarray) -> np.ndarray:
    """``[P, 2, 3]`` affines -> ``[P, 3, 3]`` with the row (0, 0, 1)."""
    full = np.zeros((len(matrices), 3, 3))
    full[:, :2], full[:, 2, 2] = matrices, 1.0
    return full


def plan_mosaic_parts(plan: MosaicPlan, stored_hws: list[tuple[int, int]], orig_hws: list[tuple[int, int]],
                      canvas: int, out_size: int) -> tuple[np.ndarray, np.ndarray]:
    """The 4 parts of a mosaic as the device paints them: thetas float32 ``[4, 2, 3]`` (each image's
    matrix with the mosaic's flips folded in) and rects int32 ``[4, 4]`` (x1, y1, x2, y2: the output
    pixels each part fills, its quadrant after the flips)."""
    flips = np.diag([-1.0 if plan.flip else 1.0, -1.0 if plan.flipud else 1.0, 1.0])
    flips[:2, 2] = (out_size if plan.flip else 0.0, out_size if plan.flipud else 0.0)  # x -> size - x
    thetas = thetas_for((flips @ _homogeneous(plan.matrices))[:, :2], stored_hws, orig_hws, canvas, out_size)
    rects = np.array(plan.quadrants, np.int32).reshape(-1, 4)
    if plan.flip:
        rects[:, [0, 2]] = out_size - rects[:, [2, 0]]
    if plan.flipud:
        rects[:, [1, 3]] = out_size - rects[:, [3, 1]]
    return thetas, rects


def place_on_canvas(image: np.ndarray, canvas: int, out: np.ndarray | None = None,
                    region: tuple[int, int, int, int] | None = None) -> np.ndarray:
    """Copy ``image`` ``[h, w, 3]`` into the top-left of a ``[canvas, canvas, 3]`` array filled grey;
    with ``region`` (x0, y0, x1, y1; ends exclusive) only that part of the canvas is written (the rest of
    ``out`` keeps what it held)."""
    if out is None:
        out = np.empty((canvas, canvas, 3), np.uint8)
    x0, y0, x1, y1 = (0, 0, canvas, canvas) if region is None else region
    if x1 <= x0 or y1 <= y0:
        return out
    height, width = image.shape[:2]
    rows, cols = min(y1, height), min(x1, width)  # the image's part of the region ends here
    if rows > y0 and cols > x0:
        out[y0:rows, x0:cols] = image[y0:rows, x0:cols]
    if y1 > max(y0, height):
        out[max(y0, height):y1, x0:x1] = FILL_VALUE
    if x1 > max(x0, width) and rows > y0:
        out[y0:rows, max(x0, width):x1] = FILL_VALUE
    return out


SAMPLE_MARGIN = 2  # canvas pixels around the computed taps: float32 grids round differently from float64


def sampled_region(theta: np.ndarray, rect, canvas: int, out_size: int) -> tuple[int, int, int, int]:
    """The canvas pixels (x0, y0, x1, y1; ends exclusive) that :func:`warp_batch` can read for the
    output pixels inside ``rect`` (x1, y1, x2, y2) under ``theta``: the bilinear taps of the rect's
    corner pixels (the map is affine, so they bound every pixel's), plus :data:`SAMPLE_MARGIN`.

    A mosaic part fills a quadrant of the output, so it reads about a quarter of its image: the loader
    copies only this region onto the canvas (the device masks each part to its rect, so what the rest of
    a reused canvas holds is multiplied by zero), not the whole image.
    """
    return tuple(int(v) for v in sampled_regions(np.asarray(theta)[None], np.asarray(rect)[None], canvas,
                                                 out_size)[0])


def sampled_regions(thetas: np.ndarray, rects: np.ndarray, canvas: int, out_size: int) -> np.ndarray:
    """:func:`sampled_region` of ``P`` parts at once (``[P, 2, 3]`` thetas, ``[P, 4]`` rects): int64
    ``[P, 4]``, the same numbers (float64 arithmetic in the same order)."""
    rects = np.asarray(rects, np.int64).reshape(-1, 4)
    rx1, ry1, rx2, ry2 = rects.T
    t = np.asarray(thetas, np.float64).reshape(-1, 6)
    # the corner pixels' centres in affine_grid's normalised coordinates (align_corners=False)
    xs = np.stack([2 * (rx1 + 0.5) / out_size - 1, 2 * (rx2 - 0.5) / out_size - 1], axis=1)[:, :, None]
    ys = np.stack([2 * (ry1 + 0.5) / out_size - 1, 2 * (ry2 - 0.5) / out_size - 1], axis=1)[:, None, :]
    corner = (len(rects), 4)  # grid_sample's source px of the 4 corners
    with np.errstate(invalid="ignore", over="ignore"):  # a non-finite theta: the whole canvas, below
        us = ((t[:, 0, None, None] * xs + t[:, 1, None, None] * ys + t[:, 2, None, None] + 1) * canvas / 2
              - 0.5).reshape(corner)
        vs = ((t[:, 3, None, None] * xs + t[:, 4, None, None] * ys + t[:, 5, None, None] + 1) * canvas / 2
              - 0.5).reshape(corner)
        low = np.floor(np.stack([us.min(1), vs.min(1)], axis=1)) - SAMPLE_MARGIN
        # a tap reads pixel floor(u) + 1 too
        high = np.floor(np.stack([us.max(1), vs.max(1)], axis=1)) + 2 + SAMPLE_MARGIN
    finite = np.isfinite(us).all(1) & np.isfinite(vs).all(1)
    low, high = np.clip(np.nan_to_num(low), 0, canvas), np.clip(np.nan_to_num(high), 0, canvas)
    out = np.stack([low[:, 0], low[:, 1], high[:, 0], high[:, 1]], axis=1).astype(np.int64)
    out[~finite] = (0, 0, canvas, canvas)
    out[(rx2 <= rx1) | (ry2 <= ry1)] = 0
    return out


def warp_batch(images: torch.Tensor, theta: torch.Tensor, out_size: int) -> torch.Tensor:
    """Warp uint8 canvases ``[B, 3, S, S]`` by ``theta`` ``[B, 2, 3]`` -> float ``[B, 3, out, out]``.

    Outside the canvas the grey fill is kept (sampling ``image - fill`` with zero padding).
    """
    fill = FILL_VALUE / 255.0
    x = images.float().div_(255.0).sub_(fill)
    grid = F.affine_grid(theta.to(x.dtype), [x.shape[0], 3, out_size, out_size], align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False).add_(fill)


def _rgb_to_hsv(rgb: torch.Tensor) -> torch.Tensor:
    """``[B, 3, H, W]`` in [0, 1] -> hue in [0, 1), saturation, value (all ``[B, 3, H, W]``)."""
    r, g, b = rgb.unbind(1)
    value, argmax = rgb.max(1)
    chroma = value - rgb.min(1).values
    safe = chroma.clamp(min=1e-8)
    hue = torch.where(argmax == 0, ((g - b) / safe) % 6, torch.where(argmax == 1, (b - r) / safe + 2,
                                                                      (r - g) / safe + 4)) / 6
    hue = torch.where(chroma > 0, hue, torch.zeros_like(hue))
    saturation = torch.where(value > 0, chroma / value.clamp(min=1e-8), torch.zeros_like(value))
    return torch.stack((hue, saturation, value), 1)


def _hsv_to_rgb(hsv: torch.Tensor) -> torch.Tensor:
    hue, saturation, value = hsv.unbind(1)
    # closed form per channel n = 5 (R), 3 (G), 1 (B): v - v s clamp(min(k, 4 - k, 1), 0), k = (n + 6h) mod 6
    n = torch.tensor([5.0, 3.0, 1.0], device=hsv.device, dtype=hsv.dtype).view(1, 3, 1, 1)
    kk = (n + hue[:, None] * 6) % 6
    weight = torch.minimum(torch.minimum(kk, 4 - kk), torch.ones_like(kk)).clamp(min=0)
    return value[:, None] - value[:, None] * saturation[:, None] * weight


def is_identity_hsv(hsv: torch.Tensor) -> bool:
    """True when ``hsv`` ``[B, 3]`` changes nothing (reads the values: call it on a CPU tensor)."""
    return bool((hsv[:, 0] == 0).all() and (hsv[:, 1:] == 1).all())


def hsv_jitter(images: torch.Tensor, hsv: torch.Tensor, check_identity: bool = True) -> torch.Tensor:
    """Darknet's colour jitter on float ``[B, 3, H, W]`` in [0, 1]: hue shift (fraction of the circle),
    saturation and value factors per image (``hsv`` ``[B, 3]``), clipped like the CPU lookup table.

    ``check_identity`` reads ``hsv`` to skip the work when it is the identity; pass False for a device
    tensor (the read would wait for the device) after checking the CPU copy.
    """
    if check_identity and is_identity_hsv(hsv):
        return images
    converted = _rgb_to_hsv(images)
    shift, sat, val = (hsv[:, i].view(-1, 1, 1).to(images.dtype) for i in range(3))
    converted = torch.stack((
        (converted[:, 0] + shift) % 1.0,
        (converted[:, 1] * sat).clamp(0, 1),
        (converted[:, 2] * val).clamp(0, 1),
    ), 1)
    return _hsv_to_rgb(converted)


def augment_batch(images: torch.Tensor, theta: torch.Tensor, hsv: torch.Tensor,
                  out_size: int) -> torch.Tensor:
    """The device half of the augmentation: warp, then colour; returns float ``[B, 3, out, out]``.

    ``theta`` and ``hsv`` may stay on the CPU (they are copied); the identity check of ``hsv`` then
    reads the CPU copy, so nothing waits for the device.
    """
    warped = warp_batch(images, theta.to(images.device, non_blocking=True), out_size)
    if hsv.device.type == "cpu" and is_identity_hsv(hsv):
        return warped
    return hsv_jitter(warped, hsv.to(images.device, non_blocking=True), check_identity=False)


@dataclass
class PartLayout:
    """How a batch's canvases ("parts") make its images when some are mosaics or mixups (host side).

    Attributes:
        rects: int32 ``[P, 4]`` (x1, y1, x2, y2): the output pixels part p fills (a whole image, or a
            mosaic's quadrant).
        part_of: int64 ``[P]``: the composed image ("sub-image") part p belongs to; sorted.
        sub_of: int64 ``[Q]``: the batch image sub-image q is blended into (two for a mixup).
        weight: float32 ``[Q]``: sub-image q's weight in its batch image (1, or the mixup's r / 1 - r).
        count: images in the batch.
    """

    rects: torch.Tensor
    part_of: torch.Tensor
    sub_of: torch.Tensor
    weight: torch.Tensor
    count: int

    def pin_memory(self) -> PartLayout:
        return PartLayout(self.rects.pin_memory(), self.part_of.pin_memory(), self.sub_of.pin_memory(),
                          self.weight.pin_memory(), self.count)


def rect_masks(rects: torch.Tensor, out_size: int, dtype: torch.dtype) -> torch.Tensor:
    """``[P, 1, out, out]`` masks, 1 on the pixels ``x1 <= x < x2``, ``y1 <= y < y2`` of each rect."""
    pixels = torch.arange(out_size, device=rects.device)
    x1, y1, x2, y2 = (rects[:, i, None] for i in range(4))
    inside_x = (pixels >= x1) & (pixels < x2)
    inside_y = (pixels >= y1) & (pixels < y2)
    return (inside_y[:, :, None] & inside_x[:, None, :]).unsqueeze(1).to(dtype)


def compose_batch(images: torch.Tensor, theta: torch.Tensor, hsv: torch.Tensor, out_size: int,
                  layout: PartLayout) -> torch.Tensor:
    """:func:`augment_batch` for batches with mosaics or mixups: warp every part, keep it inside its
    rect, sum the parts of each sub-image, colour the sub-images, blend them into the batch images.

    Args:
        images: uint8 ``[P, 3, S, S]`` canvases (on the device).
        theta: ``[P, 2, 3]``; hsv: ``[Q, 3]`` (one per sub-image; the identity check reads it when it
            is a CPU tensor).

    Returns:
        float ``[count, 3, out, out]`` in [0, 1].
    """
    device = images.device
    fill = FILL_VALUE / 255.0
    parts = warp_batch(images, theta.to(device, non_blocking=True), out_size).sub_(fill)
    parts.mul_(rect_masks(layout.rects.to(device, non_blocking=True), out_size, parts.dtype))
    subs = parts.new_zeros((len(layout.sub_of), 3, out_size, out_size))
    subs.index_add_(0, layout.part_of.to(device, non_blocking=True), parts).add_(fill)
    del parts
    if not (hsv.device.type == "cpu" and is_identity_hsv(hsv)):
        subs = hsv_jitter(subs, hsv.to(device, non_blocking=True), check_identity=False)
    if len(layout.sub_of) == layout.count:  # no mixup in this batch: sub-image q is batch image q
        return subs
    weight = layout.weight.to(device, non_blocking=True).to(subs.dtype).view(-1, 1, 1, 1)
    out = subs.new_zeros((layout.count, 3, out_size, out_size))
    return out.index_add_(0, layout.sub_of.to(device, non_blocking=True), subs.mul_(weight))
