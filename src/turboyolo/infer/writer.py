"""What ``turboyolo detect`` writes per image: the drawing, YOLO labels and COCO-format results."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from turboyolo.draw import class_color, draw_boxes
from turboyolo.errors import ConfigError, DataError, printable
from turboyolo.formats.coco import COCO91_IDS
from turboyolo.formats.labels import boxes_to_yolo_rows, write_yolo_labels


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
    """Writes drawings, labels and the COCO json for each image as it is done.

    ``opts`` is the job's :class:`turboyolo.infer.detect.DetectOptions` (``out_dir``, ``save_txt``,
    ``save_conf``, ``draw``, ``coco_ids``, ``coco_gt``).
    """

    def __init__(self, opts, names: list[str], gt_ids: dict[str, int] | None):
        self.opts, self.names, self.gt_ids = opts, names, gt_ids
        self.results: list[dict] = []
        self.image_ids: dict[int, str] = {}

    def image_id(self, path: Path, rel: Path) -> int:
        if self.gt_ids is not None:
            if path.name not in self.gt_ids:
                raise DataError(f"{path}: not among the images of --coco-gt {self.opts.coco_gt}")
            return self.gt_ids[path.name]
        return len(self.image_ids)

    def write(self, path: Path, rel: Path, array: np.ndarray, prediction, frame: int | None = None,
              sink=None) -> None:
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
            category = COCO91_IDS[cls] if self.opts.coco_ids else int(cls)
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
        if self.opts.save_txt:
            self._write_labels(rel, prediction)
        if self.opts.draw and frame is not None:
            if sink is not None:
                sink.write(self._drawn(array, prediction))
        elif self.opts.draw:
            self._draw(rel, array, prediction)

    def _write_labels(self, rel: Path, prediction) -> None:
        rows = boxes_to_yolo_rows(prediction.boxes, prediction.classes, prediction.width, prediction.height,
                                  prediction.scores if self.opts.save_conf else None)
        write_yolo_labels(self.opts.out_dir / "labels" / rel.with_suffix(".txt"), rows, self.opts.save_conf)

    def _draw(self, rel: Path, array: np.ndarray, prediction) -> None:
        from turboyolo.data.decode import save_image

        image = self._drawn(array, prediction)
        dest = self.opts.out_dir / rel
        if dest.suffix.lower() not in (".jpg", ".jpeg", ".png"):
            dest = dest.with_suffix(".jpg")
        dest.parent.mkdir(parents=True, exist_ok=True)
        save_image(dest, image)  # not cv2.imwrite: it crashes on a file name that is not UTF-8

    def _drawn(self, array: np.ndarray, prediction) -> np.ndarray:
        """BGR copy of ``array`` with the boxes and labels drawn."""
        import cv2

        scale = array.shape[1] / prediction.width
        labels = [f"{self.names[int(c)]} {s:.2f}" for s, c in zip(prediction.scores, prediction.classes)]
        colors = [class_color(int(c)) for c in prediction.classes]
        drawn = draw_boxes(array, np.asarray(prediction.boxes) * scale, colors, labels)
        return cv2.cvtColor(drawn, cv2.COLOR_RGB2BGR)

    def close(self, report) -> None:
        """``predictions.json``, ``image_ids.json`` and (when images were skipped) ``skipped.txt``."""
        (self.opts.out_dir / "predictions.json").write_text(json.dumps(self.results))
        (self.opts.out_dir / "image_ids.json").write_text(json.dumps(self.image_ids, indent=1))
        if report.skipped:
            (self.opts.out_dir / "skipped.txt").write_text(
                "".join(f"{printable(p)}\t{printable(r)}\n" for p, r in report.skipped), encoding="utf-8")


