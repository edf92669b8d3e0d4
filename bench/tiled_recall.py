"""Tiled vs single-pass detection on the 2299x2472 trees photo (574 human-drawn crowns): recall at IoU 0.5.

    python bench/tiled_recall.py --weights runs/train/exp/weights/best.pt [--cfg C] [--conf-thres 0.1 0.25]

The photo and its Pascal VOC boxes come from the pinned deepforest wheel (as the trees data set does).
All of it but its right-most 416 px tile column is in the trees *training* split, so the figure shows
what resolution does to a detector, not how it generalises; the held-out column is reported alone too.
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
import zipfile
from pathlib import Path
from types import SimpleNamespace

import cv2
import numpy as np
import torch

from turboyolo import assets
from turboyolo.data.trees import DATA_PREFIX, TILE
from turboyolo.formats.convert import read_voc_xml
from turboyolo.infer.predict import Predictor
from turboyolo.infer.tiling import TileOptions, detect_tiled
from turboyolo.model.loading import build_model, resolve_model

STEM = "2019_YELL_2_528000_4978000_image_crop2"


def load_photo() -> tuple[np.ndarray, np.ndarray]:
    wheel = assets.pypi_distribution(assets.DEEPFOREST_WHEEL)
    with zipfile.ZipFile(wheel) as zf, tempfile.TemporaryDirectory() as tmp:
        boxes = read_voc_xml(Path(zf.extract(DATA_PREFIX + STEM + ".xml", tmp))).boxes
        data = np.frombuffer(zf.read(DATA_PREFIX + STEM + ".png"), np.uint8)
    image = cv2.cvtColor(cv2.imdecode(data, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    return image, np.asarray(boxes, np.float32)


def recall_at(pred_boxes: np.ndarray, pred_scores: np.ndarray, truth: np.ndarray, iou: float = 0.5):
    """Greedy one-to-one matching by score; returns (matched truths, true positives)."""
    from torchvision.ops import box_iou

    if len(pred_boxes) == 0 or len(truth) == 0:
        return np.zeros(len(truth), bool), 0
    ious = box_iou(torch.as_tensor(pred_boxes), torch.as_tensor(truth)).numpy()
    matched = np.zeros(len(truth), bool)
    for p in np.argsort(-pred_scores):
        candidates = np.where(~matched, ious[p], 0)
        best = candidates.argmax()
        if candidates[best] >= iou:
            matched[best] = True
    return matched, int(matched.sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", required=True)
    parser.add_argument("--cfg")
    parser.add_argument("--conf-thres", type=float, nargs="+", default=[0.25])
    parser.add_argument("--tile", type=int, default=416)
    parser.add_argument("--overlap", type=float, default=0.2)
    parser.add_argument("--img-size", type=int, default=416)
    args = parser.parse_args()
    image, truth = load_photo()
    spec, weights = resolve_model(args.cfg, args.weights)
    predictor = Predictor(build_model(spec, weights), img_size=(args.img_size, args.img_size))
    base_conf = min(args.conf_thres)
    cache: dict[bytes, object] = {}

    def predict_at(conf: float):
        # Each crop runs once at the lowest threshold; a higher one filters afterwards, which equals
        # running at it (greedy NMS never lets a lower-scored box affect a higher one).
        def predict(arrays):
            out = []
            for array in arrays:
                key = hashlib.sha1(array.tobytes()).digest() + str(array.shape).encode()
                if key not in cache:
                    cache[key] = predictor.predict_arrays([array], base_conf, 0.45, multi_label=False)[0]
                full = cache[key]
                keep = full.scores > conf
                out.append(
                    SimpleNamespace(
                        boxes=full.boxes[keep], scores=full.scores[keep], classes=full.classes[keep]
                    )
                )
            return out

        return predict

    height, width = image.shape[:2]
    held_out = (truth[:, 0] + truth[:, 2]) / 2 >= (width // TILE) * TILE  # trees' validation column
    print(
        f"{STEM}.png {width}x{height}, {len(truth)} trees ({held_out.sum()} in the held-out column); "
        "recall at IoU 0.5"
    )
    for conf in sorted(args.conf_thres):
        predict = predict_at(conf)
        runs = {"single 416 pass": predict([image])[0]}
        for whole in (False, True):
            name = f"tiles {args.tile} overlap {args.overlap}" + (" + whole" if whole else "")
            options = TileOptions(args.tile, args.overlap, whole=whole)
            runs[name] = detect_tiled(predict, image, options, max_det=5000)
        for name, result in runs.items():
            matched, tp = recall_at(result.boxes, result.scores, truth)
            precision = tp / max(len(result.scores), 1)
            print(
                f"conf {conf:<5} {name:<32} {len(result.scores):5d} boxes  recall {tp / len(truth):6.1%}  "
                f"precision {precision:6.1%}  held-out recall {matched[held_out].mean():6.1%}"
            )


if __name__ == "__main__":
    main()
