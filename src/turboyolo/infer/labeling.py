"""Auto-labelling: a model's detections written as YOLO labels beside images that have none.

Never overwrites a label file unless asked (``overwrite``); every written file is recorded in its
folder's manifest (:mod:`turboyolo.data.autolabels`) so the data set's scan can count model-made labels
apart from human ones. A review list goes to the run directory: ``review.csv``, ``classes.names`` and
``contact_sheet.jpg``, lowest confidence first (images with no detection before all others), so a
person checks the least certain labels first. :func:`run_label` is the whole job (``turboyolo label``).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from turboyolo.data.autolabels import labels_lock, record_model_labels
from turboyolo.data.decode import load_image, save_image
from turboyolo.draw import draw_boxes
from turboyolo.errors import OutputError, printable, writable_folder
from turboyolo.formats.datasets import SPLITS, label_path_for, load_data_config, split_folders, split_images
from turboyolo.formats.labels import boxes_to_yolo_rows, write_names, write_yolo_labels
from turboyolo.infer.predict import PredictArgs, Prediction, Predictor, class_indices
from turboyolo.options import RunDirArgs, option, require
from turboyolo.rundir import check_outside, clear_previous_outputs, record_outputs

SHARED = "not labelled"  # review status of an image whose label file another image of the split has


@dataclass
class LabelArgs:
    """Which images get labels, and the review list."""

    split: str = option("unlabeled", "images to label (unlabeled: the data file's `unlabeled` entry, or the "
                        "folder)", choices=SPLITS)
    overwrite: bool = option(False, "also replace existing (human) label files", action="store_true")
    sheet_max: int = option(64, "images on the contact sheet", type=int)
    thumb: int = 224  # contact-sheet tile side (px)

    def __post_init__(self) -> None:
        require(self.split in SPLITS, f"--split must be one of {', '.join(SPLITS)}, got {self.split!r}")


GROUPS: dict[str, type] = {"predict": PredictArgs, "label": LabelArgs, "run_dir": RunDirArgs}


@dataclass
class LabelRequest:
    """What ``turboyolo label`` is asked to do (the Python API gets the flags' errors too).

    ``weights``: ``.weights`` (with ``cfg``), a checkpoint, or a pinned asset name (``yolov3-tiny``);
    ``data``: a .data, data.yaml or image folder, whose ``label.split`` is labelled. ``out_dir`` receives
    ``review.csv`` and ``contact_sheet.jpg``; ``None``: a fresh run directory from ``run_dir``, made once
    the model has loaded.
    """

    weights: str | Path
    data: str | Path
    cfg: str | Path | None = None
    predict: PredictArgs = field(default_factory=PredictArgs)
    label: LabelArgs = field(default_factory=LabelArgs)
    run_dir: RunDirArgs = field(default_factory=RunDirArgs)
    out_dir: Path | None = None


@dataclass
class LabelReport:
    """What :func:`run_label` did: one review row per image, lowest confidence first."""

    out_dir: Path
    rows: list[ReviewRow]
    caps: str = ""  # where --max-det or --max-candidates changed what was written ('' where nowhere)

    def summary(self) -> str:
        """Two lines: the counts (labelled, with no box, kept, unreadable) and where the review is."""
        written = [r for r in self.rows if r.status == "written"]
        kept = sum(r.status == "kept" for r in self.rows)
        shared = sum(r.status.startswith(SHARED) for r in self.rows)
        boxes = sum(len(r.scores) for r in written)
        return (
            f"{len(self.rows)} images: {len(written)} labelled by the model ({boxes} boxes, "
            f"{sum(len(r.scores) == 0 for r in written)} with none), {kept} kept their existing labels, "
            f"{len(self.rows) - len(written) - kept - shared} unreadable"
            + (f", {shared} not labelled: another image has the same label file (see review.csv)"
               if shared else "") + "\n"
            f"review (lowest confidence first): {self.out_dir}/review.csv, contact_sheet.jpg"
        )


@dataclass
class ReviewRow:
    image: Path
    label: Path
    status: str  # "written", "kept" (a label existed), "unreadable"
    scores: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))

    @property
    def min_conf(self) -> float:
        return float(self.scores.min()) if len(self.scores) else 0.0

    @property
    def mean_conf(self) -> float:
        return float(self.scores.mean()) if len(self.scores) else 0.0


def run_label(request: LabelRequest) -> LabelReport:
    """``turboyolo label``: a model's detections as YOLO labels for the images of a split without one.

    Returns the review rows and the run directory holding ``review.csv`` and ``contact_sheet.jpg``.

    Raises:
        ConfigError, DataError, WeightsError, FlagError: a bad split, data set, model or device.
    """
    args = request.predict
    images = split_images(request.data, request.label.split)
    predictor = Predictor.load(request.weights, request.cfg, device=args.device, img_size=args.img_size,
                               half=args.half, backend=args.backend)
    names = load_data_config(request.data).names or [str(k) for k in range(predictor.model.num_classes)]
    classes = class_indices(args.class_filter, names)
    _check_label_folders(images, request.label.overwrite)
    if request.out_dir is None:  # its contact sheet inside the image folder would become an image
        check_outside(Path(request.run_dir.project or "runs/label") / request.run_dir.name,
                      split_folders(request.data, request.label.split), "--project")
    out_dir = request.out_dir or request.run_dir.make("label")
    clear_previous_outputs(out_dir)  # --exist-ok: the last review list goes, never mixed with this one
    rows = auto_label(predictor, images, args, request.label, out_dir, predictor.weights_path.name, classes)
    write_names(out_dir / "classes.names", names)  # `turboyolo review <run dir>` shows the classes by name
    written = (out_dir / "review.csv", out_dir / "contact_sheet.jpg", out_dir / "classes.names")
    record_outputs(out_dir, [path for path in written if path.exists()])
    return LabelReport(out_dir, rows, predictor.caps.summary())


def _check_label_folders(images: list[Path], overwrite: bool) -> None:
    """The label folders ``label`` would write into take files (said before the model runs and before
    the run directory is made)."""
    folders = {label_path_for(image).parent for image in images
               if overwrite or not label_path_for(image).exists()}
    for folder in sorted(folders):
        try:
            writable_folder(folder, "", create=False)
        except OutputError as err:
            raise OutputError(f"{err} (label writes each image's labels beside it, in the data set's "
                              "labels folder: copy the data set somewhere writable)") from None


def auto_label(predictor: Predictor, images: list[Path], args: PredictArgs, label: LabelArgs, out_dir: Path,
               weights_name: str, classes: list[int] | None = None) -> list[ReviewRow]:
    """Write labels for ``images`` that have none (or all, with ``label.overwrite``); returns one review
    row per image, lowest confidence first, and writes the review list into ``out_dir``."""
    rows: list[ReviewRow] = []
    todo = []
    owners: dict[Path, Path] = {}  # label file -> the image that has it (a.jpg and a.png share a.txt)
    for image in images:
        path = label_path_for(image)
        owner = owners.setdefault(path, image)
        if owner != image:
            rows.append(ReviewRow(image, path, f"{SHARED}: {printable(owner.name)} has the same label file; "
                                  "rename one image"))
        elif path.exists() and not label.overwrite:
            rows.append(ReviewRow(image, path, "kept"))
        else:
            todo.append((image, path))
    written: list[Path] = []
    drawings: dict[Path, np.ndarray] = {}
    for start in range(0, len(todo), args.batch_size):
        batch, arrays = [], []
        for image, path in todo[start : start + args.batch_size]:
            try:
                arrays.append(load_image(image))
                batch.append((image, path))
            except Exception as err:  # noqa: BLE001 - one bad file must not stop the run
                rows.append(ReviewRow(image, path, f"unreadable: {str(err).removeprefix(f'{image}: ')}"))
        for (image, path), array, prediction in zip(batch, arrays, predictor.run(arrays, args, classes)):
            with labels_lock(path.parent):  # a `turboyolo review` save of this folder waits, and is not lost
                if path.exists() and not label.overwrite:  # saved by a person since the check above
                    rows.append(ReviewRow(image, path, "kept"))
                    continue
                write_yolo_labels(path, boxes_to_yolo_rows(prediction.boxes, prediction.classes,
                                                           prediction.width, prediction.height))
            written.append(path)
            rows.append(ReviewRow(image, path, "written", np.asarray(prediction.scores, np.float32)))
            drawings[image] = _thumbnail(array, prediction, label.thumb)
    record_model_labels(
        written, weights=weights_name, conf_thres=args.conf_thres, single_label=args.single_label
    )
    rows.sort(key=_review_key)
    _write_review(rows, out_dir, label, drawings)
    return rows


def _review_key(row: ReviewRow) -> tuple:
    order = {"written": 0}.get(row.status, 1)
    # written files first; among them no detection first, then lowest confidence
    return (order, len(row.scores) > 0, row.min_conf, str(row.image))


def _thumbnail(array: np.ndarray, prediction: Prediction, size: int) -> np.ndarray:
    scale = size / max(array.shape[:2])
    image = cv2.resize(array, (max(1, round(array.shape[1] * scale)), max(1, round(array.shape[0] * scale))))
    colors = [(255, 0, 0) if score < 0.5 else (0, 200, 0) for score in prediction.scores]  # red: doubtful
    image = cv2.cvtColor(draw_boxes(image, np.asarray(prediction.boxes) * scale, colors, thickness=1),
                         cv2.COLOR_RGB2BGR)
    tile = np.full((size, size, 3), 40, np.uint8)
    tile[: image.shape[0], : image.shape[1]] = image
    return tile


def _write_review(rows: list[ReviewRow], out_dir: Path, label: LabelArgs,
                  drawings: dict[Path, np.ndarray]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    # a file name that is not UTF-8 is written with \xNN escapes (errors.printable), not a crash
    review = out_dir / "review.csv"
    with open(review, "w", newline="", encoding="utf-8", errors="backslashreplace") as handle:
        writer = csv.writer(handle)
        writer.writerow(["image", "label", "status", "detections", "min_conf", "mean_conf"])
        for row in rows:
            writer.writerow(
                [
                    printable(row.image),
                    printable(row.label),
                    row.status,
                    len(row.scores),
                    f"{row.min_conf:.4f}",
                    f"{row.mean_conf:.4f}",
                ]
            )
    shown = [row for row in rows if row.image in drawings][: label.sheet_max]
    if not shown:
        return
    columns = min(8, len(shown))
    size = label.thumb
    sheet = np.full((((len(shown) + columns - 1) // columns) * (size + 18), columns * size, 3), 255, np.uint8)
    for k, row in enumerate(shown):
        top, left = (k // columns) * (size + 18), (k % columns) * size
        sheet[top : top + size, left : left + size] = drawings[row.image]
        # cv2.putText crashes on text that is not UTF-8: printable() escapes such bytes
        caption = f"{printable(row.image.name)[-24:]} {len(row.scores)} min {row.min_conf:.2f}"
        cv2.putText(sheet, caption, (left + 2, top + size + 13), cv2.FONT_HERSHEY_SIMPLEX, 0.35, (0, 0, 0), 1)
    save_image(out_dir / "contact_sheet.jpg", sheet)
