"""Left-right symmetric training images cut from Darknet's sample photos, for the Darknet-exact training tests
(tests/train/test_darknet_command.py).

A scene is the left half of a crop of one photo (``/usr/share/darknet/data/*.jpg``) next to its mirror
image, with 2-8 boxes in mirrored pairs whose coordinates are whole pixels of 256 (exact in float32), so
Darknet's random flip changes neither the pixels nor the truths and ``darknet detector train`` is
deterministic on it. Its boxes cover: a large one (trained by the stride-32 head), a small one (the
stride-16 head), two centred in one stride-32 cell with different best anchors, and centres on cell
borders; no two share a cell and a best anchor (Darknet would keep a random one of them).

``size`` 256 is the network's input; 512 is the 256 scene with every column doubled and every row
interpolated, which Darknet's ``place_image`` brings back to 256 columns exactly (it samples the left
corner of each pair) and rows at ``2 y`` (no symmetry needed vertically): the resize path, still
deterministic.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

PHOTOS = Path("/usr/share/darknet/data")
SCENE_PHOTOS = ("dog", "eagle", "giraffe", "horses", "kite", "person")
ANCHORS = np.array([(10, 14), (23, 27), (37, 58), (81, 82), (135, 169), (344, 319)], np.float64)
# stride -> anchors of its mask (tests/fixtures/darknet_train/train.cfg)
HEADS = {32: (3, 4, 5), 16: (0, 1, 2)}


def best_anchor(w: float, h: float) -> int:
    inter = np.minimum(ANCHORS[:, 0], w) * np.minimum(ANCHORS[:, 1], h)
    return int(np.argmax(inter / (w * h + ANCHORS.prod(1) - inter)))


def _slot(cx: int, cy: int, w: int, h: int) -> tuple[int, int, int]:
    anchor = best_anchor(w, h)
    stride = 32 if anchor in HEADS[32] else 16
    return anchor, cx // stride, cy // stride


def scene_boxes(rng: np.random.Generator) -> list[tuple[int, int, int, int, int]]:
    """(class, cx, cy, w, h) in pixels of 256 for the left half; each is mirrored at 256 - cx."""
    wanted = [(200, 180), (14, 22), (90, 96), (40, 60)]  # large, small, medium, small-medium
    rng.shuffle(wanted[2:])
    boxes, used = [], set()
    for k in range(int(rng.integers(2, 5))):
        w, h = (int(v + rng.integers(-4, 5)) // 2 * 2 for v in wanted[k])
        for _ in range(100):
            if k == 2 and boxes:  # in the cell of the first box (stride 32), another anchor
                cx = min(boxes[0][1] // 32 * 32 + int(rng.integers(0, 32)), 127 - 1)
                cy = boxes[0][2] // 32 * 32 + int(rng.integers(0, 32))
            else:
                cx, cy = int(rng.integers(max(w // 2, 4), 124)), int(rng.integers(h // 2, 256 - h // 2))
            if rng.random() < 0.4:  # on a cell border
                cx = max(cx // 16 * 16, 16)
            inside = w // 2 <= cx < 128 and h // 2 <= cy <= 256 - h // 2
            if inside and _slot(cx, cy, w, h) not in used:
                used.add(_slot(cx, cy, w, h))
                boxes.append((int(rng.integers(80)), cx, cy, w, h))
                break
    return boxes


def scene_half(photo: str, seed: int) -> tuple[np.ndarray, str]:
    """The left half (RGB uint8 256 x 128) and the labels text of the scene of ``photo`` and ``seed``."""
    import tempfile

    import cv2

    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder)
        path = make_scene(photo, seed, out, 256)
        half = cv2.imread(str(path))[:, :128, ::-1]
        return np.ascontiguousarray(half), (out / "labels" / path.with_suffix(".txt").name).read_text()


def make_scene(photo: str, seed: int, out: Path, size: int = 256) -> Path:
    """Write ``out/images/<photo><seed>_<size>.png`` and its labels; return the image path."""
    import cv2

    rng = np.random.default_rng(seed)
    image = cv2.imread(str(PHOTOS / f"{photo}.jpg"))[:, :, ::-1]
    height, width = image.shape[:2]
    crop_h = int(rng.integers(height // 2, height + 1))
    crop_w = min(crop_h // 2, width)
    y0, x0 = int(rng.integers(0, height - crop_h + 1)), int(rng.integers(0, width - crop_w + 1))
    half = cv2.resize(np.ascontiguousarray(image[y0:y0 + crop_h, x0:x0 + crop_w]), (128, 256),
                      interpolation=cv2.INTER_AREA)
    rows = [f"{c} {x / 256:.8g} {cy / 256:.8g} {w / 256:.8g} {h / 256:.8g}"
            for c, cx, cy, w, h in scene_boxes(rng) for x in (cx, 256 - cx)]
    return write_scene(half, "\n".join(rows) + "\n", out, f"{photo}{seed}_{size}", size)


def write_scene(half: np.ndarray, labels: str, out: Path, name: str, size: int = 256) -> Path:
    """The scene of the RGB ``half`` (256 x 128) as ``out/images/<name>.png`` (``size`` 256 or 512) with its
    ``labels`` text; returns the image path."""
    import cv2

    full = np.concatenate([half, half[:, ::-1]], 1)
    if size == 512:
        full = np.repeat(full, 2, axis=1)
        full = cv2.resize(full, (512, 512), interpolation=cv2.INTER_LINEAR)
    elif size != 256:
        raise ValueError("scenes are 256 or 512 px")
    (out / "images").mkdir(parents=True, exist_ok=True)
    (out / "labels").mkdir(parents=True, exist_ok=True)
    path = out / "images" / f"{name}.png"
    cv2.imwrite(str(path), np.ascontiguousarray(full[:, :, ::-1]))
    (out / "labels" / f"{name}.txt").write_text(labels)
    return path
