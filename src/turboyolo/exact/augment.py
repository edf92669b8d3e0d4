"""pjreddie's Darknet training input, transcribed: ``load_data_detection`` (data.c at 61c9d02e, the code of
the Debian ``darknet`` package) for one image, in float32 as its C code computes it.

Per image, in Darknet's order of random draws: an aspect ratio jittered by ``jitter`` (``new_ar``), the
image placed with that aspect filling the network's longer side at a random offset on a 0.5-grey canvas
(``place_image``: bilinear samples at ``x / nw * width``, integer size and offset, no zoom), a random
colour change in HSV (``random_distort_image``: hue shift, saturation and exposure factors), a left-right
flip with probability 1/2 (``rand() % 2``: the 2018 code flips every detection image so; the cfg's
``flip`` key is AlexeyAB's and this code never reads it), and the truths shuffled (``randomize_boxes``) and
moved with the image (``correct_boxes``: clipped to the canvas, dropped below 0.001 of its side, at most
``max_boxes``).

Darknet draws with ``rand()`` seeded by the time, so only the distribution of a run can match, not its
numbers; :class:`Draws` is the one place those numbers come from (tests plug in glibc's ``rand()`` to
compare with ``libdarknet`` pixel for pixel). With jitter = 0, hue = 0, saturation = exposure = 1 and a
square image the result is deterministic but for the flip.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

F32 = np.float32
CANVAS_GREY = 0.5  # fill_image(sized, .5)
MIN_BOX_SIDE = 0.001  # fill_truth_detection drops truths narrower or lower than this (relative)


@dataclass(frozen=True)
class DarknetAugment:
    """The ``[net]`` / ``[yolo]`` values ``load_data_detection`` uses (``flip``: the chance of a flip,
    1/2 in Darknet; 0 turns it off). ``max_boxes``: the ``[yolo]`` ``max`` (90)."""

    jitter: float = 0.0
    hue: float = 0.0
    saturation: float = 1.0
    exposure: float = 1.0
    flip: float = 0.5
    max_boxes: int = 90

    @property
    def deterministic(self) -> bool:
        """True when a square image comes out the same whatever is drawn, but for the flip."""
        return self.jitter == 0 and self.hue == 0 and self.saturation == 1 and self.exposure == 1


class Draws:
    """Darknet's random numbers from a numpy generator: ``uniform`` is ``rand_uniform`` (a float32 in
    [lo, hi]), ``coin`` is ``rand() % 2``, ``index(n)`` is ``rand() % n``."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng

    def unit(self) -> float:
        return float(F32(self.rng.random()))

    def uniform(self, low: float, high: float) -> float:
        low, high = F32(low), F32(high)
        if high < low:
            low, high = high, low
        return float(F32(F32(self.unit()) * (high - low)) + low)

    def coin(self) -> bool:
        return bool(self.rng.integers(2))

    def index(self, n: int) -> int:
        return int(self.rng.integers(n))


@dataclass(frozen=True)
class Placement:
    """Where one image goes (``nw``, ``nh``, ``dx``, ``dy`` as Darknet's floats) and its colour and flip."""

    nw: float
    nh: float
    dx: float
    dy: float
    hue: float
    saturation: float
    exposure: float
    flip: bool


def draw_placement(draws: Draws, params: DarknetAugment, orig_wh: tuple[int, int],
                   net_wh: tuple[int, int]) -> Placement:
    """``load_data_detection``'s draws for one image, in its order (aspect, offset, colour, flip)."""
    width, height = orig_wh
    net_w, net_h = net_wh
    dw, dh = F32(params.jitter) * F32(width), F32(params.jitter) * F32(height)
    new_ar = F32(F32(width) + F32(draws.uniform(-dw, dw))) / F32(F32(height) + F32(draws.uniform(-dh, dh)))
    if new_ar < 1:
        nh = F32(net_h)
        nw = F32(nh * new_ar)
    else:
        nw = F32(net_w)
        nh = F32(nw / new_ar)
    dx = draws.uniform(0, F32(net_w) - nw)
    dy = draws.uniform(0, F32(net_h) - nh)
    hue = draws.uniform(-params.hue, params.hue)
    saturation = _rand_scale(draws, params.saturation)
    exposure = _rand_scale(draws, params.exposure)
    flip = draws.coin() if params.flip == 0.5 else draws.unit() < params.flip
    return Placement(float(nw), float(nh), dx, dy, hue, saturation, exposure, flip)


def _rand_scale(draws: Draws, scale: float) -> float:
    value = F32(draws.uniform(1, scale))
    return float(value if draws.coin() else F32(1.0 / float(value)))


def place_image(image: np.ndarray, placement: Placement, net_wh: tuple[int, int]) -> np.ndarray:
    """``place_image`` on a 0.5-grey canvas: float32 ``[net_h, net_w, 3]`` from float32 ``[h, w, 3]`` in
    [0, 1]. Size and offset are truncated to integers; pixel x of the placed image samples the original
    bilinearly at ``x / nw * width`` (corners, not centres; outside the image counts as 0). Bit-equal to
    Darknet's where the scale is a power of two (or 1.5, ...); at other scales within 5e-7 (its compiled
    bilinear sum is reassociated in a way not reproduced here)."""
    net_w, net_h = net_wh
    height, width = image.shape[:2]
    nw, nh, dx, dy = (int(v) for v in (placement.nw, placement.nh, placement.dx, placement.dy))
    canvas = np.full((net_h, net_w, 3), CANVAS_GREY, F32)
    if nw <= 0 or nh <= 0:
        return canvas
    # (x / nw) * width, as the compiled code (-Ofast) computes it: x * (width / nw)
    rx = np.arange(nw, dtype=F32) * (F32(width) / F32(nw))
    ry = np.arange(nh, dtype=F32) * (F32(height) / F32(nh))
    ix, iy = np.floor(rx).astype(np.int64), np.floor(ry).astype(np.int64)
    fx, fy = (rx - ix.astype(F32))[None, :, None], (ry - iy.astype(F32))[:, None, None]
    padded = np.zeros((height + 2, width + 2, 3), F32)  # get_pixel_extend: 0 outside
    padded[:height, :width] = image
    ix, iy = np.where(ix < width, ix, width), np.where(iy < height, iy, height)

    def pixel(y, x):
        return padded[np.ix_(np.where(y >= 0, y, height + 1), np.where(x >= 0, x, width + 1))]

    one = F32(1)
    value = ((one - fy) * (one - fx)) * pixel(iy, ix) + (fy * (one - fx)) * pixel(iy + 1, ix)
    value = value + ((one - fy) * fx) * pixel(iy, ix + 1)
    value = value + (fy * fx) * pixel(iy + 1, ix + 1)
    x0, y0 = max(dx, 0), max(dy, 0)  # set_pixel skips what falls outside the canvas
    x1, y1 = min(dx + nw, net_w), min(dy + nh, net_h)
    if x1 > x0 and y1 > y0:
        canvas[y0:y1, x0:x1] = value[y0 - dy:y1 - dy, x0 - dx:x1 - dx]
    return canvas


def distort(image: np.ndarray, hue: float, saturation: float, exposure: float) -> np.ndarray:
    """``distort_image`` in place on float32 ``[h, w, 3]`` RGB: to HSV, S x saturation, V x exposure, H +
    hue (wrapped), back to RGB, clipped to [0, 1]. Factors of 1 and a shift of 0 still make the round trip
    (float rounding only), as Darknet does."""
    r, g, b = image[..., 0], image[..., 1], image[..., 2]
    high = np.where(r > g, np.where(r > b, r, b), np.where(g > b, g, b))
    low = np.where(r < g, np.where(r < b, r, b), np.where(g < b, g, b))
    delta = high - low
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(high == 0, F32(0), delta / high)
        h = np.where(r == high, (g - b) / delta,
                     np.where(g == high, F32(2) + (b - r) / delta, F32(4) + (r - g) / delta))
    h = np.where(h < 0, h + F32(6), h)
    h = np.where(high == 0, F32(0), h / F32(6))
    s = s * F32(saturation)
    v = high * F32(exposure)
    h = h + F32(hue)
    h = np.where(h > 1, h - F32(1), h)
    h = np.where(h < 0, h + F32(1), h)
    image[:] = _hsv_to_rgb(h, s, v)
    np.clip(image, 0, 1, out=image)
    return image


def _hsv_to_rgb(h: np.ndarray, s: np.ndarray, v: np.ndarray) -> np.ndarray:
    h = F32(6) * h
    with np.errstate(invalid="ignore"):
        index = np.floor(h)
        f = h - index
    one = F32(1)
    p, q, t = v * (one - s), v * (one - s * f), v * (one - s * (one - f))
    index = np.nan_to_num(index, nan=0.0).astype(np.int64)
    choices = [(v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v)]
    out = np.stack([v, p, q], -1)  # index 5 (and anything else)
    for k, rgb in enumerate(choices):
        out = np.where((index == k)[..., None], np.stack(rgb, -1), out)
    grey = (s == 0)[..., None]
    return np.where(grey, np.stack([v, v, v], -1), out).astype(F32)


def truths(labels: np.ndarray, placement: Placement, net_wh: tuple[int, int], draws: Draws,
           max_boxes: int = 90) -> np.ndarray:
    """``fill_truth_detection``: the label rows (cls, cx, cy, w, h) relative to the original, shuffled as
    ``randomize_boxes`` does, moved to the canvas (``correct_boxes``, float32), clipped to it, the first
    ``max_boxes`` kept, those below 0.001 of a side dropped. Returns float32 ``[M, 5]``."""
    count = len(labels)
    boxes = np.asarray(labels, np.float64).astype(F32).reshape(count, 5).copy()
    for i in range(count):  # randomize_boxes
        j = draws.index(count)
        boxes[[i, j]] = boxes[[j, i]]
    net_w, net_h = net_wh
    dx, dy = F32(-F32(placement.dx) / F32(net_w)), F32(-F32(placement.dy) / F32(net_h))
    sx, sy = F32(F32(placement.nw) / F32(net_w)), F32(F32(placement.nh) / F32(net_h))
    cls, x, y, w, h = (boxes[:, k] for k in range(5))
    half = F32(2)
    left, right = (x - w / half) * sx - dx, (x + w / half) * sx - dx
    top, bottom = (y - h / half) * sy - dy, (y + h / half) * sy - dy
    if placement.flip:
        left, right = F32(1) - right, F32(1) - left
    left, right, top, bottom = (np.clip(v, 0, 1).astype(F32) for v in (left, right, top, bottom))
    out = np.stack([cls, (left + right) / half, (top + bottom) / half,
                    np.clip(right - left, 0, 1), np.clip(bottom - top, 0, 1)], 1).astype(F32)
    unset = (x == 0) & (y == 0)  # correct_boxes marks these 999999: they train nothing
    out = out[~unset][:max_boxes]
    return out[(out[:, 3] >= MIN_BOX_SIDE) & (out[:, 4] >= MIN_BOX_SIDE)]


def darknet_sample(image: np.ndarray, labels: np.ndarray, net_wh: tuple[int, int], params: DarknetAugment,
                   draws: Draws) -> tuple[np.ndarray, np.ndarray, Placement]:
    """One training image as ``load_data_detection`` makes it.

    Args:
        image: uint8 ``[h, w, 3]`` RGB, the whole decoded file (Darknet reads it at full size).
        labels: float32 ``[N, 5]`` (cls, cx, cy, w, h) relative to the image.
        net_wh: the network's (width, height).

    Returns:
        (float32 ``[net_h, net_w, 3]`` in [0, 1], float32 ``[M, 5]`` boxes relative to it, the placement).
    """
    height, width = image.shape[:2]
    placement = draw_placement(draws, params, (width, height), net_wh)
    pixels = image.astype(F32) / F32(255)  # ipl_to_image: data / 255. (the same float32 in both)
    sized = place_image(pixels, placement, net_wh)
    distort(sized, placement.hue, placement.saturation, placement.exposure)
    if placement.flip:
        sized = np.ascontiguousarray(sized[:, ::-1])
    boxes = truths(labels, placement, net_wh, draws, params.max_boxes)
    return sized, boxes, placement


def jitter_note(params: DarknetAugment) -> str:
    """What of Darknet's input this run reproduces, for the start of a run."""
    if params.deterministic:
        exact = "a square image is placed unchanged in size ratio, as Darknet places it"
    else:
        exact = (f"jitter={params.jitter:g}, hue={params.hue:g}, saturation={params.saturation:g}, "
                 f"exposure={params.exposure:g} are drawn as Darknet draws them, but not the same numbers "
                 "(Darknet seeds rand() with the time)")
    return exact + f"; flips with probability {params.flip:g}" + ("" if math.isclose(params.flip, 0.5) else
                                                                   " (Darknet: 0.5)")
