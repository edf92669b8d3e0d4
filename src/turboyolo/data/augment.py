"""Augmentation at the target resolution: pure functions of (image, boxes, rng).

Geometry is one affine matrix from *original-image* pixel coordinates (continuous: pixel i covers
[i, i+1)) to network pixels: letterbox, random scale, aspect jitter, rotation, translation and
horizontal flip are composed into it and the image is warped once (cost ~ output pixels). Boxes go
through the same matrix (corners, then the axis-aligned hull), are clipped, and dropped when too small
or mostly outside. Colour is Darknet's HSV jitter through one 3-channel lookup table.

Each sample's rng comes from :func:`sample_rng` (seed, epoch, index), never from worker or rank state,
so results do not depend on the number of workers or processes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import numpy as np

FILL_VALUE = 114  # letterbox/affine border grey (as Ultralytics, so pretrained habits carry over)


@dataclass(frozen=True)
class AugmentParams:
    """Training augmentation ranges (Darknet ``[net]`` semantics where a key exists).

    Attributes:
        degrees: rotation uniform in [-degrees, degrees] (Darknet ``angle``).
        scale: zoom factor range (lo, hi) applied on top of the letterbox fit.
        translate: shift uniform in [-translate, translate] x output size, per axis.
        jitter: aspect-ratio distortion: the width/height ratio is multiplied by a log-uniform factor
            in [1/(1+jitter), 1+jitter] at constant area (Darknet ``jitter`` distorts aspect and
            position through its random crop; the position part is ``translate``).
        hue: hue shift uniform in [-hue, hue] as a fraction of the hue circle (Darknet ``hue``).
        saturation: saturation factor in [1/saturation, saturation] (Darknet ``saturation``).
        exposure: value (brightness) factor in [1/exposure, exposure] (Darknet ``exposure``).
        flip: probability of a horizontal flip.
        flipud: probability of a vertical flip (0 = off; aerial and microscope images have no "up").
        min_box_px: boxes narrower or lower than this (output pixels) after clipping are dropped.
        min_visible: boxes keeping less than this fraction of their area inside the image are dropped.
        mosaic: probability that a training sample is a mosaic of 4 images (0 = off, the default).
            A mosaic places the 4 images around a random centre, each at the scale it would have
            alone (letterbox fit x ``scale``, as Darknet and Ultralytics keep it: the sizes the network
            learns do not shrink), each showing the part of it next to the centre; then flips and HSV;
            rotation and translation are not applied to it.
        mixup: probability that a training sample is blended with another one (each built as usual,
            mosaic included), ``r * a + (1 - r) * b`` with ``r ~ Beta(32, 32)``, boxes of both kept.
    """

    degrees: float = 0.0
    scale: tuple[float, float] = (0.75, 1.25)
    translate: float = 0.1
    jitter: float = 0.0
    hue: float = 0.1
    saturation: float = 1.5
    exposure: float = 1.5
    flip: float = 0.5
    flipud: float = 0.0
    min_box_px: float = 2.0
    min_visible: float = 0.25
    mosaic: float = 0.0
    mixup: float = 0.0

    def __post_init__(self) -> None:
        if not 0 < self.scale[0] <= self.scale[1]:
            raise ValueError(f"scale range {self.scale} must satisfy 0 < lo <= hi")
        if self.saturation < 1 or self.exposure < 1:
            raise ValueError("saturation and exposure are Darknet factors >= 1 (1 = off)")
        if not 0 <= self.mosaic <= 1 or not 0 <= self.mixup <= 1:
            raise ValueError("mosaic and mixup are probabilities in [0, 1]")
        flips_ok = 0 <= self.flip <= 1 and 0 <= self.flipud <= 1
        if not flips_ok or min(self.jitter, self.hue, self.translate) < 0:
            raise ValueError("flip must be a probability; jitter, hue and translate >= 0")

    @classmethod
    def from_net(cls, angle: float = 0.0, saturation: float = 1.5, exposure: float = 1.5, hue: float = 0.1,
                 jitter: float = 0.3, flip: bool = True, scale: tuple[float, float] = (0.75, 1.25),
                 translate: float = 0.1, mosaic: float = 0.0) -> AugmentParams:
        """Parameters from Darknet ``[net]`` values (``angle``, ``saturation``, ``exposure``, ``hue``,
        ``jitter``, ``flip``) plus scale and translate ranges Darknet lacks."""
        return cls(degrees=float(angle), scale=(float(scale[0]), float(scale[1])), translate=float(translate),
                   jitter=float(jitter), hue=float(hue), saturation=float(saturation),
                   exposure=float(exposure), flip=0.5 if flip else 0.0, mosaic=float(mosaic))


def sample_rng(seed: int, epoch: int, index: int, stream: int = 0) -> np.random.Generator:
    """The rng of one sample: a function of (seed, epoch, index) only (``stream`` > 0: another draw of
    the same sample, e.g. as a mixup partner)."""
    return np.random.default_rng([seed & 0xFFFFFFFF, epoch & 0xFFFFFFFF, index & 0xFFFFFFFF, 0x70B0]
                                 + ([stream] if stream else []))


def out_wh(out_size: int | tuple[int, int]) -> tuple[int, int]:
    """(width, height) of an output given as one side or as (width, height)."""
    if isinstance(out_size, int | np.integer):
        return int(out_size), int(out_size)
    return int(out_size[0]), int(out_size[1])


def letterbox_matrix(orig_hw: tuple[int, int], out_size: int | tuple[int, int]
                     ) -> tuple[np.ndarray, float, tuple[float, float]]:
    """Fit the original image into ``out_size`` (a side, or (width, height)) keeping aspect ratio, centred.

    Returns:
        (2x3 float64 matrix original px -> network px, ratio, (pad_x, pad_y)); ``net = ratio*orig + pad``.
    """
    h, w = orig_hw
    out_w, out_h = out_wh(out_size)
    ratio = min(out_w / w, out_h / h)
    pad = ((out_w - w * ratio) / 2, (out_h - h * ratio) / 2)
    matrix = np.array([[ratio, 0.0, pad[0]], [0.0, ratio, pad[1]]])
    return matrix, ratio, pad


def random_matrix(orig_hw: tuple[int, int], out_size: int, params: AugmentParams,
                  rng: np.random.Generator) -> np.ndarray:
    """Letterbox + random scale/aspect/rotation/translation/flip as one 2x3 matrix (original -> net).

    Draws exactly six numbers from ``rng`` in a fixed order (scale, aspect, angle, tx, ty, flip), and
    a seventh (vertical flip) only when ``params.flipud > 0``, so runs without it keep their draws.
    """
    h, w = orig_hw
    fit = out_size / max(h, w)
    zoom = rng.uniform(params.scale[0], params.scale[1])
    log_ar = math.log1p(params.jitter)
    aspect = math.exp(rng.uniform(-log_ar, log_ar))
    angle = math.radians(rng.uniform(-params.degrees, params.degrees))
    tx, ty = rng.uniform(-params.translate, params.translate, size=2) * out_size
    flip = rng.random() < params.flip
    flipud = params.flipud > 0 and rng.random() < params.flipud
    sx = fit * zoom * math.sqrt(aspect) * (-1.0 if flip else 1.0)
    sy = fit * zoom / math.sqrt(aspect) * (-1.0 if flipud else 1.0)
    cos, sin = math.cos(angle), math.sin(angle)
    # net = T(centre + t) @ R @ S @ T(-image centre)
    linear = np.array([[cos, -sin], [sin, cos]]) @ np.diag([sx, sy])
    centre = np.array([w / 2, h / 2])
    offset = np.array([out_size / 2 + tx, out_size / 2 + ty]) - linear @ centre
    return np.hstack([linear, offset[:, None]])


def warp_image(image: np.ndarray, orig_hw: tuple[int, int], matrix: np.ndarray,
               out_size: int | tuple[int, int], fill: int = FILL_VALUE) -> np.ndarray:
    """Warp a decoded image (any size standing for the original ``orig_hw``) with ``matrix``.

    Args:
        image: uint8 [h, w, 3], the original image possibly pre-resized (e.g. by a reduced decode).
        orig_hw: size of the original the matrix refers to.
        matrix: 2x3 original px -> net px (continuous coordinates).
        out_size: side of the square output, or its (width, height).

    Returns:
        uint8 [height, width, 3].
    """
    dsize = out_wh(out_size)
    h, w = image.shape[:2]
    # image px -> original px is a per-axis scale; then convert continuous coordinates to OpenCV's
    # pixel-centre convention: x_i' = A (x_i + 0.5) + b - 0.5.
    linear = matrix[:, :2] @ np.diag([orig_hw[1] / w, orig_hw[0] / h])
    offset = matrix[:, 2] + linear @ np.array([0.5, 0.5]) - 0.5
    m = np.hstack([linear, offset[:, None]])
    is_axis_aligned = abs(m[0, 1]) < 1e-12 and abs(m[1, 0]) < 1e-12
    interp = cv2.INTER_LINEAR
    if is_axis_aligned and abs(m[0, 0] - 1) < 1e-12 and abs(m[1, 1] - 1) < 1e-12:
        interp = cv2.INTER_NEAREST  # pure integer-ish shift: keep pixels exact when offsets are whole
        if abs(m[0, 2] - round(m[0, 2])) > 1e-9 or abs(m[1, 2] - round(m[1, 2])) > 1e-9:
            interp = cv2.INTER_LINEAR
    return cv2.warpAffine(image, m, dsize, flags=interp, borderMode=cv2.BORDER_CONSTANT,
                          borderValue=(fill, fill, fill))


def transform_boxes(labels: np.ndarray, orig_hw: tuple[int, int], matrix: np.ndarray,
                    out_size: int | tuple[int, int],
                    min_box_px: float = 2.0, min_visible: float = 0.25,
                    clip: tuple[float, float, float, float] | None = None) -> np.ndarray:
    """Move YOLO boxes through ``matrix``; clip to the output; drop tiny or mostly-outside boxes.

    Args:
        labels: float32 [N, 5] (cls, cx, cy, w, h) relative to the original image.
        matrix: 2x3 original px -> net px.
        out_size: the output's side, or its (width, height).
        clip: (x1, y1, x2, y2) region of the output the boxes are clipped to (default: all of it).

    Returns:
        float32 [M, 5] (cls, cx, cy, w, h) relative to the output, M <= N.
    """
    if len(labels) == 0:
        return np.zeros((0, 5), dtype=np.float32)
    h, w = orig_hw
    out_w, out_h = out_wh(out_size)
    return _moved_boxes(labels, w, h, matrix, clip if clip is not None else (0, 0, out_w, out_h),
                        (out_w, out_h), min_box_px, min_visible)


def transform_boxes_parts(parts: Sequence[tuple[np.ndarray, tuple[int, int], np.ndarray, tuple]],
                          out_size: int | tuple[int, int], min_box_px: float = 2.0,
                          min_visible: float = 0.25) -> np.ndarray:
    """:func:`transform_boxes` of several images' boxes at once (a mosaic's 4 parts): ``parts`` is
    (labels, orig_hw, matrix, clip) per image; returns the concatenation of the per-image results, bit
    for bit (the same float operations, each row with its own image's numbers), in one pass."""
    counts = [len(labels) for labels, *_ in parts]
    if not any(counts):
        return np.zeros((0, 5), dtype=np.float32)
    if any(labels.dtype != np.float32 or labels.ndim != 2 or clip is None
           or not all(type(side) is int for side in hw) for labels, hw, _, clip in parts):
        # one pass does what float32 [N, 5] labels times Python-int sizes do (the loaders' case); other
        # types promote otherwise, so they go one image at a time
        return np.concatenate([transform_boxes(labels, hw, matrix, out_size, min_box_px, min_visible, clip)
                               for labels, hw, matrix, clip in parts])
    labels = np.concatenate([part[0] for part in parts])
    h, w = (np.repeat(np.array([part[1][k] for part in parts], np.float32), counts) for k in (0, 1))
    matrix = np.repeat(np.stack([part[2] for part in parts]), counts, axis=0).transpose(1, 2, 0)[..., None]
    clip = np.repeat(np.array([part[3] for part in parts], np.float64), counts, axis=0).T
    return _moved_boxes(labels, w, h, matrix, tuple(clip), out_wh(out_size), min_box_px, min_visible)


def _moved_boxes(labels: np.ndarray, w, h, matrix, clip, out_size: tuple[int, int], min_box_px: float,
                 min_visible: float) -> np.ndarray:
    """:func:`transform_boxes`'s arithmetic; ``w``, ``h``, ``matrix[i, j]`` and ``clip``'s 4 bounds are
    numbers, or per-row arrays (float32 sizes, float64 [N, 1] matrix entries, float64 [N] bounds)."""
    cx, cy = labels[:, 1] * w, labels[:, 2] * h
    bw, bh = labels[:, 3] * w, labels[:, 4] * h
    xs = np.stack([cx - bw / 2, cx + bw / 2, cx + bw / 2, cx - bw / 2], axis=1).astype(np.float64)
    ys = np.stack([cy - bh / 2, cy - bh / 2, cy + bh / 2, cy + bh / 2], axis=1).astype(np.float64)
    nx = matrix[0][0] * xs + matrix[0][1] * ys + matrix[0][2]
    ny = matrix[1][0] * xs + matrix[1][1] * ys + matrix[1][2]
    x1, x2, y1, y2 = nx.min(1), nx.max(1), ny.min(1), ny.max(1)
    full_area = (x2 - x1) * (y2 - y1)
    out_w, out_h = out_size
    cx1, cy1, cx2, cy2 = clip
    x1c, x2c = np.clip(x1, cx1, cx2), np.clip(x2, cx1, cx2)
    y1c, y2c = np.clip(y1, cy1, cy2), np.clip(y2, cy1, cy2)
    cw, ch = x2c - x1c, y2c - y1c
    keep = (cw >= min_box_px) & (ch >= min_box_px) & (cw * ch >= min_visible * np.maximum(full_area, 1e-9))
    out = np.stack([labels[:, 0], (x1c + x2c) / 2 / out_w, (y1c + y2c) / 2 / out_h,
                    cw / out_w, ch / out_h], axis=1)[keep]
    return out.astype(np.float32)


def draw_hsv(rng: np.random.Generator, hue: float, saturation: float,
             exposure: float) -> tuple[float, float, float]:
    """Darknet's colour jitter: (hue shift as a fraction of the circle, saturation factor, value factor).

    Draws exactly five numbers from ``rng`` (hue, saturation, its inversion, exposure, its inversion);
    the CPU and the device augmentation both draw through here, so they agree sample for sample.
    """
    dh = rng.uniform(-hue, hue)
    ds = rng.uniform(1, saturation)
    ds = ds if rng.random() < 0.5 else 1 / ds
    dv = rng.uniform(1, exposure)
    dv = dv if rng.random() < 0.5 else 1 / dv
    return dh, ds, dv


def hsv_table(rng: np.random.Generator, hue: float, saturation: float, exposure: float) -> np.ndarray:
    """A [256, 1, 3] uint8 lookup table for OpenCV HSV (H in 0..179) from :func:`draw_hsv`."""
    return hsv_table_from(*draw_hsv(rng, hue, saturation, exposure))


def hsv_table_from(dh: float, ds: float, dv: float) -> np.ndarray:
    """The lookup table for a hue shift ``dh`` (fraction of the circle) and S/V factors ``ds``/``dv``."""
    x = np.arange(256, dtype=np.float64)
    lut_h = np.mod(np.round(x + dh * 180), 180)
    lut_s = np.clip(np.round(x * ds), 0, 255)
    lut_v = np.clip(np.round(x * dv), 0, 255)
    return np.stack([lut_h, lut_s, lut_v], axis=1).astype(np.uint8).reshape(256, 1, 3)


def apply_hsv(image: np.ndarray, table: np.ndarray) -> np.ndarray:
    """RGB uint8 -> HSV -> lookup table -> RGB (one pass per step, all at the output size)."""
    hsv = cv2.cvtColor(image, cv2.COLOR_RGB2HSV)
    cv2.LUT(hsv, table, dst=hsv)
    return cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB, dst=image)


def augment_sample(image: np.ndarray, labels: np.ndarray, orig_hw: tuple[int, int],
                   out_size: int | tuple[int, int],
                   params: AugmentParams | None, rng: np.random.Generator | None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One sample to the network input: letterbox (``params=None``) or the full random augmentation.

    Args:
        image: uint8 [h, w, 3] RGB standing for the original of size ``orig_hw`` (may be pre-resized).
        labels: float32 [N, 5] (cls, cx, cy, w, h) relative to the original.
        orig_hw: (height, width) of the original image.
        out_size: side of the square output; validation (``params=None``) also takes (width, height),
            the shape of a rectangular batch.
        params: augmentation ranges, or ``None`` for validation (letterbox only, boxes kept as is).
        rng: the sample's rng (:func:`sample_rng`); unused when ``params`` is None.

    Returns:
        (uint8 [height, width, 3], float32 [M, 5] relative to the output, 2x3 matrix original px ->
        output px).
    """
    if params is None:
        matrix = letterbox_matrix(orig_hw, out_size)[0]
        out = warp_image(image, orig_hw, matrix, out_size)
        boxes = transform_boxes(labels, orig_hw, matrix, out_size, 0.0, 0.0)
        return out, boxes, matrix
    assert rng is not None, "training augmentation needs the sample's rng"
    matrix = random_matrix(orig_hw, out_size, params, rng)
    table = hsv_table(rng, params.hue, params.saturation, params.exposure)
    out = warp_image(image, orig_hw, matrix, out_size)
    if params.hue or params.saturation > 1 or params.exposure > 1:
        out = apply_hsv(out, table)
    boxes = transform_boxes(labels, orig_hw, matrix, out_size, params.min_box_px, params.min_visible)
    return out, boxes, matrix


def mosaic_rng(seed: int, epoch: int, index: int, stream: int = 0) -> np.random.Generator:
    """The rng deciding whether sample ``index`` is a mosaic and which images join it."""
    return np.random.default_rng([seed & 0xFFFFFFFF, epoch & 0xFFFFFFFF, index & 0xFFFFFFFF, 0x405A1C]
                                 + ([stream] if stream else []))


class FillingPool(tuple):
    """The partner pool of a run's first batches (epoch 1's first run of batches): a sample draws its
    partners from the pool's samples up to and including itself, in the pool's order (:meth:`reachable`), as
    Ultralytics' mosaic buffer holds the images loaded so far; so the first batch is made from its own
    images, and the first step does not wait for the decodes of a whole pool. The order is the global one
    (a pool spans every rank's batches), so the partners do not depend on the batch size, the
    subdivisions or the number of processes."""

    def reachable(self, index: int) -> tuple[int, ...]:
        """The part of the pool sample ``index`` draws from: the samples up to and including it."""
        try:
            return tuple(self[:self.index(index) + 1])
        except ValueError:  # not in its pool (cannot happen with the sampler's keys): the whole pool
            return tuple(self)


def drawable(pool: tuple[int, ...] | None, index: int) -> tuple[int, ...] | None:
    """What sample ``index`` draws its partners from in ``pool``: all of it (None: the whole set), or a
    :class:`FillingPool`'s samples up to itself."""
    return pool.reachable(index) if isinstance(pool, FillingPool) else pool


def partner_draw(rng: np.random.Generator, pool: tuple[int, ...] | None, count: int,
                 size: int | None = None):
    """Partner sample index(es) drawn with ``rng`` from ``pool`` (sample indices: the run of batches a
    loader worker makes at once, carried by the sampler's keys) or, with None, from all ``count``."""
    if pool is None:
        return rng.integers(count, size=size)
    picks = rng.integers(len(pool), size=size)
    return pool[int(picks)] if size is None else [pool[int(k)] for k in picks]


def mosaic_partners(seed: int, epoch: int, index: int, count: int, probability: float, stream: int = 0,
                    pool: tuple[int, ...] | None = None) -> list[int] | None:
    """The 3 samples (of ``count``, or of ``pool``) joining sample ``index`` in a mosaic, or None when it
    is not one; drawn from :func:`mosaic_rng` only, as the CPU loader draws them, so the device path
    (:mod:`turboyolo.data.device_loader`) builds the same mosaics."""
    if probability <= 0:
        return None
    draw = mosaic_rng(seed, epoch, index, stream)
    if draw.random() >= probability:
        return None
    return [int(other) for other in partner_draw(draw, drawable(pool, index), count, size=3)]


@dataclass(frozen=True)
class MosaicPlan:
    """Every number of one mosaic (:func:`plan_mosaic`); :func:`mosaic_sample` paints it on the CPU,
    :mod:`turboyolo.data.device_augment` on the device.

    Attributes:
        matrices: float64 [4, 2, 3], image k's original px -> output px, before the flips.
        quadrants: (x1, y1, x2, y2) of the output pixels image k fills, before the flips (may be empty).
        flip, flipud: whether the whole mosaic is mirrored left-right / upside down.
        hsv: (hue shift, saturation factor, value factor) from :func:`draw_hsv`.
        boxes: float32 [M, 5] (cls, cx, cy, w, h) relative to the output, after the flips.
    """

    matrices: np.ndarray
    quadrants: tuple[tuple[int, int, int, int], ...]
    flip: bool
    flipud: bool
    hsv: tuple[float, float, float]
    boxes: np.ndarray


def plan_mosaic(parts: list[tuple[np.ndarray, tuple[int, int]]], out_size: int, params: AugmentParams,
                rng: np.random.Generator) -> MosaicPlan:
    """The numbers of a mosaic of 4 images: ``parts`` is 4 x (labels relative to the original, orig_hw).

    Image k fills the quadrant that touches a random centre with its bottom-right (k=0), bottom-left
    (1), top-right (2) or top-left (3) corner, scaled by ``out_size / longer side * zoom`` (its
    letterbox fit); its boxes are clipped to that quadrant, so no box crosses into another image.
    """
    assert len(parts) == 4, "a mosaic has 4 images"
    size = out_size
    cx, cy = (int(round(v)) for v in rng.uniform(0.25 * size, 0.75 * size, size=2))
    zooms = rng.uniform(params.scale[0], params.scale[1], size=4)
    flip = bool(rng.random() < params.flip)
    hsv = draw_hsv(rng, params.hue, params.saturation, params.exposure)
    flipud = bool(params.flipud > 0 and rng.random() < params.flipud)  # last: runs without it keep draws
    quadrants = ((0, 0, cx, cy), (cx, 0, size, cy), (0, cy, cx, size), (cx, cy, size, size))
    matrices = []
    for k, (_, (h, w)) in enumerate(parts):
        s = size / max(h, w) * zooms[k]
        # the image's corner that touches the centre: bottom-right, bottom-left, top-right, top-left
        tx = cx - s * w if k in (0, 2) else cx
        ty = cy - s * h if k in (0, 1) else cy
        matrices.append(np.array([[s, 0.0, tx], [0.0, s, ty]]))
    boxes = transform_boxes_parts([(labels, orig_hw, matrix, quadrant) for (labels, orig_hw), matrix, quadrant
                                   in zip(parts, matrices, quadrants, strict=True)],
                                  size, params.min_box_px, params.min_visible)
    if flip:
        boxes[:, 1] = 1.0 - boxes[:, 1]
    if flipud:
        boxes[:, 2] = 1.0 - boxes[:, 2]
    return MosaicPlan(np.stack(matrices), quadrants, flip, flipud, hsv, boxes)


def mosaic_sample(parts: list[tuple[np.ndarray, np.ndarray, tuple[int, int]]], out_size: int,
                  params: AugmentParams, rng: np.random.Generator
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Four images around a random centre, then flips and HSV (see ``AugmentParams.mosaic`` and
    :func:`plan_mosaic`).

    Args:
        parts: 4 x (uint8 image standing for the original, float32 [N, 5] labels relative to the
            original, orig_hw); the first is the sample itself.

    Returns:
        (uint8 [out_size, out_size, 3], float32 [M, 5] relative to the output, 2x3 matrix of the first
        image, original px -> output px, before the flip).
    """
    plan = plan_mosaic([(labels, orig_hw) for _, labels, orig_hw in parts], out_size, params, rng)
    canvas = np.full((out_size, out_size, 3), FILL_VALUE, np.uint8)
    for (image, _, orig_hw), matrix, (qx1, qy1, qx2, qy2) in zip(parts, plan.matrices, plan.quadrants,
                                                                 strict=True):
        if qx2 > qx1 and qy2 > qy1:
            local = matrix.copy()
            local[:, 2] -= (qx1, qy1)
            canvas[qy1:qy2, qx1:qx2] = warp_image(image, orig_hw, local, (qx2 - qx1, qy2 - qy1))
    if plan.flip:
        canvas = cv2.flip(canvas, 1)
    if plan.flipud:
        canvas = cv2.flip(canvas, 0)
    if params.hue or params.saturation > 1 or params.exposure > 1:
        canvas = apply_hsv(canvas, hsv_table_from(*plan.hsv))
    return canvas, plan.boxes, plan.matrices[0]


def mixup_rng(seed: int, epoch: int, index: int) -> np.random.Generator:
    """The rng deciding whether sample ``index`` is blended, with which sample and by how much."""
    return np.random.default_rng([seed & 0xFFFFFFFF, epoch & 0xFFFFFFFF, index & 0xFFFFFFFF, 0x313C])


def mixup_partner(seed: int, epoch: int, index: int, count: int, probability: float,
                  pool: tuple[int, ...] | None = None) -> tuple[int, float] | None:
    """The sample (of ``count``, or of ``pool``) blended into sample ``index`` and the weight of
    ``index``'s own image (``r ~ Beta(32, 32)``), or None when it is not blended; drawn as the CPU
    loader draws them."""
    if probability <= 0:
        return None
    draw = mixup_rng(seed, epoch, index)
    if draw.random() >= probability:
        return None
    return int(partner_draw(draw, drawable(pool, index), count)), float(draw.beta(32.0, 32.0))


def mixup(first: tuple[np.ndarray, np.ndarray], second: tuple[np.ndarray, np.ndarray], ratio: float
          ) -> tuple[np.ndarray, np.ndarray]:
    """Blend two network inputs: ``ratio * first + (1 - ratio) * second``, boxes of both (as YOLOv5).

    Args:
        first, second: (uint8 [S, S, 3], float32 [N, 5] boxes relative to the image), same size.
        ratio: weight of ``first`` (YOLOv5 draws it from Beta(32, 32), so about 0.5).

    Returns:
        (uint8 [S, S, 3], float32 [N1 + N2, 5]).
    """
    (image_a, boxes_a), (image_b, boxes_b) = first, second
    blended = cv2.addWeighted(image_a, float(ratio), image_b, 1.0 - float(ratio), 0.0)
    return blended, np.concatenate([boxes_a, boxes_b]).astype(np.float32)
