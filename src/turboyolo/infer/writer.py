"""What ``turboyolo detect`` writes per image: the drawing, YOLO labels and COCO-format results."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np

from turboyolo.data.decode import save_image
from turboyolo.draw import class_color, draw_boxes
from turboyolo.errors import ConfigError, DataError, printable
from turboyolo.formats.coco import COCO91_IDS
from turboyolo.formats.labels import boxes_to_yolo_rows, write_yolo_labels
from turboyolo.infer.predict import Prediction
from turboyolo.infer.video import VideoSink


def coco_gt_ids(path: str) -> dict[str, int]:
    """``--coco-gt``: image file name -> COCO image id."""
    try:
        data = json.loads(Path(path).read_text())
        return {Path(img["file_name"]).name: int(img["id"]) for img in data["images"]}
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError(
            f"{path}: not a COCO ground-truth json with images[].file_name/id ({err})"
        ) from None


class DetectionWriter:
    """Writes drawings, labels and the COCO json into ``out_dir`` for each image as it is done.

    Args:
        names: class names (drawn labels).
        save_txt: YOLO labels under ``labels/``; ``save_conf``: with the confidence on each line.
        draw: drawn images (and, for videos, the annotated ``.mp4`` the caller's sink receives).
        coco_ids: ``category_id`` as COCO's 91 ids instead of the class index.
        gt_ids: image file name -> COCO image id (``--coco-gt``, named ``coco_gt`` in errors); ``None``:
            ids count from 0 in the order written.
    """

    def __init__(self, out_dir: Path, names: list[str], *, save_txt: bool = False, save_conf: bool = False,
                 draw: bool = True, coco_ids: bool = False, gt_ids: dict[str, int] | None = None,
                 coco_gt: str | None = None):
        self.out_dir, self.names = Path(out_dir), names
        self.save_txt, self.save_conf, self.draw, self.coco_ids = save_txt, save_conf, draw, coco_ids
        self.gt_ids, self.coco_gt = gt_ids, coco_gt
        self.results: list[dict] = []
        self.image_ids: dict[int, str] = {}

    def image_id(self, path: Path, rel: Path) -> int:
        if self.gt_ids is not None:
            if path.name not in self.gt_ids:
                raise DataError(f"{path}: not among the images of --coco-gt {self.coco_gt}")
            return self.gt_ids[path.name]
        return len(self.image_ids)

    def write(self, path: Path, rel: Path, array: np.ndarray, prediction: Prediction,
              frame: int | None = None, sink: VideoSink | None = None) -> None:
        """One image, or frame ``frame`` of a video (labels ``<stem>_<frame>.txt``, drawing into ``sink``)."""
        if frame is not None:
            image_id = len(self.image_ids)
            self.image_ids[image_id] = f"{path}#{frame}"
            rel = rel.parent / f"{rel.stem}_{frame}.jpg"
        else:
            image_id = self.image_id(path, rel)
            self.image_ids[image_id] = str(path)
        boxes, scores, classes = prediction.boxes, prediction.scores, prediction.classes
        for box, score, cls in zip(boxes.tolist(), scores.tolist(), classes.tolist()):
            category = COCO91_IDS[cls] if self.coco_ids else int(cls)
            self.results.append(
                {
                    "image_id": image_id,
                    "file_name": str(rel),
                    "category_id": category,
                    "bbox": [
                        round(box[0], 3),
                        round(box[1], 3),
                        round(box[2] - box[0], 3),
                        round(box[3] - box[1], 3),
                    ],
                    "score": round(float(score), 6),
                }
            )
        if self.save_txt:
            self._write_labels(rel, prediction)
        if self.draw and frame is not None:
            if sink is not None:
                sink.write(self._drawn(array, prediction))
        elif self.draw:
            self._draw(rel, array, prediction)

    def _write_labels(self, rel: Path, prediction: Prediction) -> None:
        rows = boxes_to_yolo_rows(prediction.boxes, prediction.classes, prediction.width, prediction.height,
                                  prediction.scores if self.save_conf else None)
        write_yolo_labels(self.out_dir / "labels" / rel.with_suffix(".txt"), rows, self.save_conf)

    def _draw(self, rel: Path, array: np.ndarray, prediction: Prediction) -> None:
        image = self._drawn(array, prediction)
        dest = self.out_dir / rel
        if dest.suffix.lower() not in (".jpg", ".jpeg", ".png"):
            dest = dest.with_suffix(".jpg")
        dest.parent.mkdir(parents=True, exist_ok=True)
        save_image(dest, image)  # not cv2.imwrite: it crashes on a file name that is not UTF-8

    def _drawn(self, array: np.ndarray, prediction: Prediction) -> np.ndarray:
        """BGR copy of ``array`` with the boxes and labels drawn."""
        scale = array.shape[1] / prediction.width
        labels = [f"{self.names[int(c)]} {s:.2f}" for s, c in zip(prediction.scores, prediction.classes)]
        colors = [class_color(int(c)) for c in prediction.classes]
        drawn = draw_boxes(array, np.asarray(prediction.boxes) * scale, colors, labels)
        return cv2.cvtColor(drawn, cv2.COLOR_RGB2BGR)

    def close(self, skipped: list[tuple[str, str]]) -> None:
        """``predictions.json``, ``image_ids.json`` and (when images were skipped) ``skipped.txt``."""
        (self.out_dir / "predictions.json").write_text(json.dumps(self.results))
        (self.out_dir / "image_ids.json").write_text(json.dumps(self.image_ids, indent=1))
        if skipped:
            (self.out_dir / "skipped.txt").write_text(
                "".join(f"{printable(p)}\t{printable(r)}\n" for p, r in skipped), encoding="utf-8")


