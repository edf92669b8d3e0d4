"""What ``turboyolo detect`` writes per image: the drawing, YOLO labels and COCO-format results."""

from __future__ import annotations

import json
import os
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
from turboyolo.rundir import OutputNames, record_outputs


def coco_gt_ids(path: str) -> dict[str, list[tuple[tuple[str, ...], int]]]:
    """``--coco-gt``: image file name -> [(its file_name's path parts, COCO image id)] (two images of one
    name in two folders are told apart by :func:`gt_id_of`)."""
    try:
        data = json.loads(Path(path).read_text())
        ids: dict[str, list[tuple[tuple[str, ...], int]]] = {}
        for img in data["images"]:
            parts = Path(str(img["file_name"]).replace("\\", "/")).parts
            ids.setdefault(parts[-1], []).append((parts, int(img["id"])))
        return ids
    except (OSError, ValueError, KeyError, TypeError, IndexError) as err:
        raise ConfigError(
            f"{path}: not a COCO ground-truth json with images[].file_name/id ({err})"
        ) from None


def gt_id_of(path: Path, ids: dict[str, list[tuple[tuple[str, ...], int]]], coco_gt: str) -> int:
    """The COCO id of the image at ``path``: the entry of its name whose file_name is the longest tail of
    ``path``; refused (:class:`DataError`) when none is, or two match equally."""
    entries = ids.get(path.name)
    if not entries:
        raise DataError(f"{path}: not among the images of --coco-gt {coco_gt}")
    parts = Path(os.path.abspath(path)).parts

    def matched(entry_parts: tuple[str, ...]) -> int:
        count = 0
        for mine, theirs in zip(reversed(parts), reversed(entry_parts)):
            if mine != theirs:
                break
            count += 1
        return count

    ranked = sorted(((matched(p), i, p) for p, i in entries), reverse=True)
    if len(ranked) > 1 and ranked[0][0] == ranked[1][0]:
        raise DataError(f"{path}: --coco-gt {coco_gt} has {len(ranked)} images named {path.name} "
                        f"({', '.join('/'.join(p) for _, _, p in ranked[:3])}); its file_name paths do "
                        "not say which one this is: give file_name with the folder")
    return ranked[0][1]


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
                 coco_gt: str | None = None, inputs: list[Path] = ()):
        self.out_dir, self.names = Path(out_dir), names
        self.save_txt, self.save_conf, self.draw, self.coco_ids = save_txt, save_conf, draw, coco_ids
        self.gt_ids, self.coco_gt = gt_ids, coco_gt
        self.results: list[dict] = []
        self.image_ids: dict[int, str] = {}
        self.outputs = OutputNames(inputs)  # two inputs never share an output; no output is an input
        self.written: list[Path] = []

    def plan(self, items: list[tuple[Path, Path]]) -> None:
        """Claim every image's output names up front (in input order), so a name that would replace an
        input is refused before anything is written."""
        for path, rel in items:
            if self.save_txt:
                self._label_path(path, rel)
            if self.draw:
                self._drawing_path(path, rel)

    def _label_path(self, path: Path, rel: Path, frame: int | None = None) -> Path:
        wanted = self.out_dir / "labels" / rel.with_suffix(".txt")
        return self.outputs.name(wanted, (str(path), frame), Path(str(path)).suffix)

    def _drawing_path(self, path: Path, rel: Path) -> Path:
        dest = self.out_dir / rel
        if dest.suffix.lower() not in (".jpg", ".jpeg", ".png"):
            dest = dest.with_suffix(".jpg")
        return self.outputs.name(dest, (str(path), None), rel.suffix)

    def video_path(self, source: str, rel: Path) -> Path:
        """The annotated video of ``source``: ``<rel without suffix>.mp4``."""
        path = self.outputs.name(self.out_dir / rel.with_suffix(".mp4"), (source, "video"), rel.suffix)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.written.append(path)
        return path

    def image_id(self, path: Path, rel: Path) -> int:
        if self.gt_ids is not None:
            return gt_id_of(path, self.gt_ids, self.coco_gt)
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
            self._write_labels(self._label_path(path, rel, frame), prediction)
        if self.draw and frame is not None:
            if sink is not None:
                sink.write(self._drawn(array, prediction))
        elif self.draw:
            self._draw(self._drawing_path(path, rel), array, prediction)

    def _write_labels(self, dest: Path, prediction: Prediction) -> None:
        rows = boxes_to_yolo_rows(prediction.boxes, prediction.classes, prediction.width, prediction.height,
                                  prediction.scores if self.save_conf else None)
        write_yolo_labels(dest, rows, self.save_conf)
        self.written.append(dest)

    def _draw(self, dest: Path, array: np.ndarray, prediction: Prediction) -> None:
        image = self._drawn(array, prediction)
        dest.parent.mkdir(parents=True, exist_ok=True)
        save_image(dest, image)  # not cv2.imwrite: it crashes on a file name that is not UTF-8
        self.written.append(dest)

    def _drawn(self, array: np.ndarray, prediction: Prediction) -> np.ndarray:
        """BGR copy of ``array`` with the boxes and labels drawn."""
        scale = array.shape[1] / prediction.width
        labels = [f"{self.names[int(c)]} {s:.2f}" for s, c in zip(prediction.scores, prediction.classes)]
        colors = [class_color(int(c)) for c in prediction.classes]
        drawn = draw_boxes(array, np.asarray(prediction.boxes) * scale, colors, labels)
        return cv2.cvtColor(drawn, cv2.COLOR_RGB2BGR)

    def close(self, skipped: list[tuple[str, str]]) -> None:
        """``predictions.json``, ``image_ids.json`` and (when images were skipped) ``skipped.txt``."""
        reports = [self.out_dir / "predictions.json", self.out_dir / "image_ids.json"]
        reports[0].write_text(json.dumps(self.results))
        reports[1].write_text(json.dumps(self.image_ids, indent=1))
        if skipped:
            reports.append(self.out_dir / "skipped.txt")
            reports[2].write_text("".join(f"{printable(p)}\t{printable(r)}\n" for p, r in skipped),
                                  encoding="utf-8")
        record_outputs(self.out_dir, self.written + reports)  # what the next --exist-ok run removes


