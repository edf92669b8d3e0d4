"""Auto-labelling: a model's detections written as YOLO labels beside images that have none.

Never overwrites a label file unless asked (``overwrite``); every written file is recorded in its
folder's manifest (:mod:`turboyolo.data.autolabels`) so the data set's scan can count model-made labels
apart from human ones. A review list goes to the run directory: ``review.csv`` and
``contact_sheet.jpg``, lowest confidence first (images with no detection before all others), so a
person checks the least certain labels first. :func:`label_images` is the whole job (``turboyolo label``).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from turboyolo.errors import ConfigError, DataError, FlagError

SPLITS = ("unlabeled", "train", "val")


@dataclass
class LabelOptions:
    """How to label: the flags of ``turboyolo label``, validated here (the Python API gets the same errors).

    ``out_dir`` receives ``review.csv`` and ``contact_sheet.jpg``; ``None``: a fresh run directory from
    ``run_dir`` = (project, name, exist_ok), made once the model has loaded.
    """

    split: str = "unlabeled"
    conf_thres: float = 0.25
    nms_thres: float = 0.45
    single_label: bool = False
    overwrite: bool = False  # also replace existing (human) label files
    img_size: tuple[int, int] | None = None  # network input (width, height); None: the cfg's
    device: str | None = None  # see turboyolo.devices.resolve_device; None: CUDA when available
    batch_size: int = 8
    sheet_max: int = 64  # images on the contact sheet
    thumb: int = 224  # contact-sheet tile side (px)
    out_dir: Path | None = None
    run_dir: tuple[str, str, bool] = ("runs/label", "exp", False)

    def __post_init__(self) -> None:
        for flag, value in (("--conf-thres", self.conf_thres), ("--nms-thres", self.nms_thres)):
            if not 0 <= value <= 1:
                raise FlagError(f"{flag} must lie in [0, 1], got {value}")
        self.batch_size = max(1, self.batch_size)


@dataclass
class LabelReport:
    """What :func:`label_images` did: one review row per image, lowest confidence first."""

    out_dir: Path
    rows: list[ReviewRow]

    def summary(self) -> str:
        """Two lines: the counts (labelled, with no box, kept, unreadable) and where the review is."""
        written = [r for r in self.rows if r.status == "written"]
        kept = sum(r.status == "kept" for r in self.rows)
        boxes = sum(len(r.scores) for r in written)
        return (
            f"{len(self.rows)} images: {len(written)} labelled by the model ({boxes} boxes, "
            f"{sum(len(r.scores) == 0 for r in written)} with none), {kept} kept their existing labels, "
            f"{len(self.rows) - len(written) - kept} unreadable\n"
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


def split_images(data: str | Path, split: str) -> list[Path]:
    """Images of ``split``: ``train``/``val`` from the data file, ``unlabeled`` from its ``unlabeled``
    key (data.yaml ``unlabeled: folder``, .data ``unlabeled = list``) or, for an image folder, the folder."""
    from turboyolo.formats.datasets import list_images, load_data_config, resolve

    if split not in SPLITS:
        raise ConfigError(f"--split must be one of {', '.join(SPLITS)}, got {split!r}")
    config = load_data_config(data)
    if split == "unlabeled":
        value = config.extra.get("unlabeled")
        if value is None:
            if Path(data).is_dir():
                sources = [Path(data)]
            else:
                raise ConfigError(
                    f"{data}: no `unlabeled` entry; add `unlabeled: <image folder>` or pass a folder"
                )
        else:
            items = value if isinstance(value, list) else [value]
            sources = [resolve(str(v), config.root) for v in items]
    else:
        sources = config.split(split)
    images = [image for source in sources for image in list_images(source)]
    if not images:
        raise DataError(f"{data}: the {split} split has no images")
    return images


def label_images(weights: str | Path, data: str | Path, options: LabelOptions | None = None, *,
                 cfg: str | Path | None = None) -> LabelReport:
    """``turboyolo label``: a model's detections as YOLO labels for the images of a split without one.

    Args:
        weights: ``.weights`` (with ``cfg``), a checkpoint, or a pinned asset name (``yolov3-tiny``).
        data: a .data, data.yaml or image folder; ``options.split`` picks its images.
        cfg: the Darknet ``.cfg`` for a ``.weights`` file.
    Returns:
        The review rows and the run directory holding ``review.csv`` and ``contact_sheet.jpg``.
    Raises:
        ConfigError, DataError, WeightsError, FlagError: a bad split, data set, model or device.
    """
    from turboyolo.devices import resolve_device
    from turboyolo.infer.predict import Predictor
    from turboyolo.model.loading import build_model, resolve_model
    from turboyolo.rundir import next_run_dir

    options = options or LabelOptions()
    images = split_images(data, options.split)
    spec, weights_path = resolve_model(str(cfg) if cfg is not None else None, str(weights))
    device = resolve_device(options.device)
    predictor = Predictor(build_model(spec, weights_path), device=device, img_size=options.img_size)
    if options.out_dir is None:
        options = replace(options, out_dir=next_run_dir(*options.run_dir))
    rows = auto_label(predictor, images, options, Path(str(weights_path)).name)
    return LabelReport(options.out_dir, rows)


def auto_label(predictor, images: list[Path], opts: LabelOptions, weights_name: str) -> list[ReviewRow]:
    """Write labels for ``images`` that have none; returns one review row per image.

    ``opts.out_dir`` (required here) receives the review list.
    """
    from turboyolo.data.autolabels import record_model_labels
    from turboyolo.data.decode import load_image
    from turboyolo.formats.datasets import label_path_for
    from turboyolo.formats.labels import boxes_to_yolo_rows, write_yolo_labels

    if opts.out_dir is None:
        raise ValueError("auto_label writes its review into opts.out_dir; set it (label_images does)")
    rows: list[ReviewRow] = []
    todo = []
    for image in images:
        label = label_path_for(image)
        if label.exists() and not opts.overwrite:
            rows.append(ReviewRow(image, label, "kept"))
        else:
            todo.append((image, label))
    written: list[Path] = []
    drawings: dict[Path, np.ndarray] = {}
    for start in range(0, len(todo), opts.batch_size):
        batch, arrays = [], []
        for image, label in todo[start : start + opts.batch_size]:
            try:
                arrays.append(load_image(image))
                batch.append((image, label))
            except Exception as err:  # noqa: BLE001 - one bad file must not stop the run
                rows.append(ReviewRow(image, label, f"unreadable: {err}"))
        predictions = predictor.predict_arrays(
            arrays, opts.conf_thres, opts.nms_thres, multi_label=not opts.single_label
        )
        for (image, label), array, prediction in zip(batch, arrays, predictions):
            write_yolo_labels(label, boxes_to_yolo_rows(prediction.boxes, prediction.classes,
                                                        prediction.width, prediction.height))
            written.append(label)
            rows.append(ReviewRow(image, label, "written", np.asarray(prediction.scores, np.float32)))
            drawings[image] = _thumbnail(array, prediction, opts.thumb)
    record_model_labels(
        written, weights=weights_name, conf_thres=opts.conf_thres, single_label=opts.single_label
    )
    rows.sort(key=_review_key)
    _write_review(rows, opts, drawings)
    return rows


def _review_key(row: ReviewRow) -> tuple:
    order = {"written": 0}.get(row.status, 1)
    # written files first; among them no detection first, then lowest confidence
    return (order, len(row.scores) > 0, row.min_conf, str(row.image))


def _thumbnail(array: np.ndarray, prediction, size: int) -> np.ndarray:
    import cv2

    from turboyolo.draw import draw_boxes

    scale = size / max(array.shape[:2])
    image = cv2.resize(array, (max(1, round(array.shape[1] * scale)), max(1, round(array.shape[0] * scale))))
    colors = [(255, 0, 0) if score < 0.5 else (0, 200, 0) for score in prediction.scores]  # red: doubtful
    image = cv2.cvtColor(draw_boxes(image, np.asarray(prediction.boxes) * scale, colors, thickness=1),
                         cv2.COLOR_RGB2BGR)
    tile = np.full((size, size, 3), 40, np.uint8)
    tile[: image.shape[0], : image.shape[1]] = image
    return tile


def _write_review(rows: list[ReviewRow], opts: LabelOptions, drawings: dict[Path, np.ndarray]) -> None:
    import cv2

    from turboyolo.data.decode import save_image
    from turboyolo.errors import printable

    opts.out_dir.mkdir(parents=True, exist_ok=True)
    # a file name that is not UTF-8 is written with \xNN escapes (errors.printable), not a crash
    review = opts.out_dir / "review.csv"
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
    shown = [row for row in rows if row.image in drawings][: opts.sheet_max]
    if not shown:
        return
    columns = min(8, len(shown))
    size = opts.thumb
    sheet = np.full((((len(shown) + columns - 1) // columns) * (size + 18), columns * size, 3), 255, np.uint8)
    for k, row in enumerate(shown):
        top, left = (k // columns) * (size + 18), (k % columns) * size
        sheet[top : top + size, left : left + size] = drawings[row.image]
        # cv2.putText crashes on text that is not UTF-8: printable() escapes such bytes
        caption = f"{printable(row.image.name)[-24:]} {len(row.scores)} min {row.min_conf:.2f}"
        cv2.putText(sheet, caption, (left + 2, top + size + 13), cv2.FONT_HERSHEY_SIMPLEX, 0.35, (0, 0, 0), 1)
    save_image(opts.out_dir / "contact_sheet.jpg", sheet)
