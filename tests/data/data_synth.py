"""Synthetic images + labels for the data-pipeline tests."""

import cv2
import numpy as np

from turboyolo.formats.labels import write_yolo_labels


def make_dataset(root, count=10, size=(90, 120), seed=0, ext=".jpg"):
    """``root/images/*.jpg`` + ``root/labels/*.txt`` + ``root/k.names`` (2 classes); returns image paths."""
    rng = np.random.default_rng(seed)
    (root / "images").mkdir(parents=True, exist_ok=True)
    (root / "k.names").write_text("a\nb\n")
    paths = []
    for i in range(count):
        h, w = size[0] + 7 * (i % 3), size[1] + 5 * (i % 4)
        image = np.full((h, w, 3), rng.integers(0, 255, 3), np.uint8)
        rows = []
        for _ in range(1 + i % 3):
            bw, bh = rng.uniform(0.1, 0.4, 2)
            cx, cy = rng.uniform(bw / 2, 1 - bw / 2), rng.uniform(bh / 2, 1 - bh / 2)
            x1, y1 = int((cx - bw / 2) * w), int((cy - bh / 2) * h)
            x2, y2 = int((cx + bw / 2) * w), int((cy + bh / 2) * h)
            image[y1:y2, x1:x2] = rng.integers(0, 255, 3)
            rows.append([i % 2, cx, cy, bw, bh])
        path = root / "images" / f"img{i:03d}{ext}"
        cv2.imwrite(str(path), cv2.cvtColor(image, cv2.COLOR_RGB2BGR))
        write_yolo_labels(root / "labels" / f"img{i:03d}.txt", rows)
        paths.append(path)
    return paths
