"""The detect job: gather images, run the :class:`Predictor` in batches, write the three outputs.

Outputs in the run directory: drawn images (mirroring the inputs' relative paths so same-named files
never collide), ``labels/*.txt`` in YOLO format (``--save-txt``, ``--save-conf``), and
``predictions.json`` in COCO results format with ``image_ids.json`` mapping ids to files.
"""

from __future__ import annotations

import glob
import json
import os
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np

from turboyolo.errors import ConfigError, DataError, TurboYoloError
from turboyolo.rundir import next_run_dir

# Darknet's table: the 80 class indices -> COCO's 91 category ids.
COCO91_IDS = (
    1,
    2,
    3,
    4,
    5,
    6,
    7,
    8,
    9,
    10,
    11,
    13,
    14,
    15,
    16,
    17,
    18,
    19,
    20,
    21,
    22,
    23,
    24,
    25,
    27,
    28,
    31,
    32,
    33,
    34,
    35,
    36,
    37,
    38,
    39,
    40,
    41,
    42,
    43,
    44,
    46,
    47,
    48,
    49,
    50,
    51,
    52,
    53,
    54,
    55,
    56,
    57,
    58,
    59,
    60,
    61,
    62,
    63,
    64,
    65,
    67,
    70,
    72,
    73,
    74,
    75,
    76,
    77,
    78,
    79,
    80,
    81,
    82,
    84,
    85,
    86,
    87,
    88,
    89,
    90,
)


def coco_names() -> list[str]:
    return resources.files("turboyolo").joinpath("resources/coco.names").read_text().split("\n")[:80]


@dataclass
class DetectOptions:
    sources: list[str]
    cfg: str | None
    weights: str | None
    out_dir: Path | None = None  # None: a fresh run directory from `run_dir`, made once the model loads
    run_dir: tuple[str, str, bool] = ("runs/detect", "exp", False)  # (project, name, exist_ok)
    names: str | None = None
    conf_thres: float = 0.25
    nms_thres: float = 0.45
    img_size: tuple[int, int] | None = None
    class_filter: list[str] | None = None
    single_label: bool = False
    max_det: int | None = None
    device: str | None = None
    half: bool = False
    batch_size: int = 8
    save_txt: bool = False
    save_conf: bool = False
    draw: bool = True
    coco_gt: str | None = None
    coco_ids: bool = False
    fast_decode: bool = False
    workers: int = 4
    quiet: bool = False
    tile: int | None = None
    overlap: float = 0.2
    tile_whole: bool = False
    vid_stride: int = 1

    @classmethod
    def from_args(cls, args) -> DetectOptions:
        sources = list(args.source) + list(args.images)
        if not sources:
            raise ConfigError(
                "no images given; pass files, folders, globs or list files (e.g. `detect data/`)"
            )
        if args.img_size and len(args.img_size) not in (1, 2):
            raise ConfigError("--img-size takes one size or a width and a height")
        for flag, value in (("--conf-thres", args.conf_thres), ("--nms-thres", args.nms_thres)):
            if not 0 <= value <= 1:
                raise ConfigError(f"{flag} must lie in [0, 1], got {value}")
        if args.batch_size < 1:
            raise ConfigError(f"--batch-size must be >= 1, got {args.batch_size}")
        img_size = None
        if args.img_size:
            img_size = (args.img_size[0], args.img_size[-1])
        vid_stride = getattr(args, "vid_stride", 1)
        if vid_stride < 1:
            raise ConfigError(f"--vid-stride must be >= 1, got {vid_stride}")
        tile = getattr(args, "tile", None)
        if tile is not None:
            from turboyolo.infer.tiling import TileOptions

            TileOptions(tile, args.overlap)  # validates --tile and --overlap
            if args.fast_decode:
                raise ConfigError("--tile detects at full resolution; drop --fast-decode")
        return cls(
            sources=sources,
            cfg=args.cfg,
            weights=args.weights,
            names=args.names,
            conf_thres=args.conf_thres,
            nms_thres=args.nms_thres,
            img_size=img_size,
            class_filter=args.class_filter,
            single_label=args.single_label,
            max_det=args.max_det,
            device=args.device,
            half=args.half,
            batch_size=args.batch_size,
            save_txt=args.save_txt or args.save_conf,
            save_conf=args.save_conf,
            draw=not args.no_draw,
            coco_gt=args.coco_gt,
            coco_ids=args.coco_ids,
            fast_decode=args.fast_decode,
            workers=max(1, args.workers),
            tile=tile,
            overlap=getattr(args, "overlap", 0.2),
            tile_whole=getattr(args, "tile_whole", False),
            vid_stride=vid_stride,
            run_dir=(args.project, args.name, args.exist_ok),
        )


@dataclass
class DetectReport:
    out_dir: Path
    images: int = 0
    detections: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    videos: list[str] = field(default_factory=list)
    frames: int = 0


def gather_images(sources: list[str]) -> list[tuple[Path, Path]]:
    """(image path, output-relative path) for every input; relative paths never collide."""
    from turboyolo.formats.datasets import IMAGE_SUFFIXES, list_images

    images: list[Path] = []
    for source in sources:
        if any(ch in source for ch in "*?["):
            matches = sorted(Path(p) for p in glob.glob(source, recursive=True))
            images += [p for p in matches if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file()]
            if not matches:
                raise DataError(f"{source}: the glob matches no file")
        else:
            images += list_images(source)
    seen, unique = set(), []
    for path in images:
        key = path.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(key)
    if not unique:
        raise DataError(f"no images found in {', '.join(sources)} (looked for {', '.join(IMAGE_SUFFIXES)})")
    base = Path(os.path.commonpath([p.parent for p in unique]))
    return [(p, p.relative_to(base)) for p in unique]


def class_indices(filters: list[str] | None, names: list[str]) -> list[int] | None:
    if not filters:
        return None
    out = []
    for item in filters:
        if item.isdigit() and int(item) < len(names):
            out.append(int(item))
        elif item in names:
            out.append(names.index(item))
        else:
            raise ConfigError(f"--class-filter {item!r} is neither a class index nor one of the names")
    return out


def _decode_all(items, fast_target: int | None, workers: int) -> Iterator[tuple[Path, Path, object]]:
    """Decode images in a thread pool, in order, a few ahead of the model."""
    from turboyolo.data.decode import decode_image

    def load(item):
        path, rel = item
        try:
            return path, rel, decode_image(path, fast_target)
        except TurboYoloError as err:
            return path, rel, err

    with ThreadPoolExecutor(workers) as pool:
        yield from pool.map(load, items)


def _batches(iterator, size: int):
    batch = []
    for item in iterator:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def run_detection(opts: DetectOptions) -> int:
    report = detect(opts)
    what = f"{report.images} images"
    if report.videos:
        what += f", {report.frames} frames of {len(report.videos)} video(s)"
    print(f"{what}, {report.detections} detections -> {report.out_dir}")
    if report.skipped:
        print(f"{len(report.skipped)} unreadable images skipped:", file=sys.stderr)
        for path, reason in report.skipped:
            print(f"  {path}: {reason}", file=sys.stderr)
    return 0


def detect(opts: DetectOptions) -> DetectReport:
    from tqdm import tqdm

    from turboyolo.devices import resolve_device
    from turboyolo.formats.datasets import read_names
    from turboyolo.infer.predict import Predictor
    from turboyolo.model.loading import build_model, resolve_model

    spec, weights = resolve_model(opts.cfg, opts.weights)
    model = build_model(spec, weights)
    names = read_names(opts.names) if opts.names else None
    if names is None:
        names = coco_names() if model.num_classes == 80 else [str(i) for i in range(model.num_classes)]
    if len(names) != model.num_classes:
        raise ConfigError(f"{opts.names}: {len(names)} names but the model has {model.num_classes} classes")
    if opts.coco_ids and model.num_classes != 80:
        raise ConfigError("--coco-ids needs an 80-class model")
    device = resolve_device(opts.device)
    predictor = Predictor(model, device=device, img_size=opts.img_size, half=opts.half)
    wanted = class_indices(opts.class_filter, names)
    from turboyolo.infer.video import split_video_sources

    image_sources, videos = split_video_sources(opts.sources)
    items = gather_images(image_sources) if image_sources or not videos else []
    if videos and opts.coco_gt:
        raise ConfigError("--coco-gt takes image ids from a COCO json; it does not apply to videos")
    gt_ids = _coco_gt_ids(opts.coco_gt) if opts.coco_gt else None
    if opts.out_dir is None:  # only now: a run that fails on its inputs leaves no empty directory
        opts.out_dir = next_run_dir(*opts.run_dir)
    writer = _Writer(opts, names, gt_ids)
    report = DetectReport(opts.out_dir)
    fast_target = max(predictor.img_size) if opts.fast_decode else None
    progress = tqdm(
        total=len(items), desc="detect", unit="img", disable=opts.quiet or len(items) < 2, file=sys.stderr
    )
    for batch in _batches(_decode_all(items, fast_target, opts.workers), opts.batch_size):
        good = []
        for path, rel, result in batch:
            if isinstance(result, Exception):
                report.skipped.append((str(path), str(result).split(": ", 1)[-1]))
            else:
                good.append((path, rel, result))
        arrays = [array for _, _, (array, _) in good]
        predictions = _predict(predictor, arrays, opts, wanted)
        for (path, rel, (array, orig_hw)), prediction in zip(good, predictions):
            _to_full_resolution(prediction, array.shape[:2], orig_hw)
            writer.write(path, rel, array, prediction)
            report.images += 1
            report.detections += len(prediction.scores)
        progress.update(len(batch))
    progress.close()
    for source in videos:
        _detect_video(source, predictor, opts, wanted, writer, report)
    writer.close(report)
    return report


def _predict(predictor, arrays: list[np.ndarray], opts: DetectOptions, wanted) -> list:
    if opts.tile:
        return [_detect_tiled(predictor, array, opts, wanted) for array in arrays]
    return predictor.predict_arrays(
        arrays,
        opts.conf_thres,
        opts.nms_thres,
        multi_label=not opts.single_label,
        classes=wanted,
        max_det=opts.max_det,
    )


def _detect_video(source: str, predictor, opts: DetectOptions, wanted, writer, report: DetectReport) -> None:
    """One video file or stream: every ``--vid-stride``-th frame, labels ``<stem>_<frame>.txt``, and an
    annotated ``<stem>.mp4`` at the source's frame rate divided by the stride."""
    from tqdm import tqdm

    from turboyolo.infer.video import VideoSink, is_stream, open_video, read_frames

    try:
        capture, info = open_video(source)
    except DataError as err:
        report.skipped.append((source, str(err).split(": ", 1)[-1]))
        return
    name = "".join(c if c.isalnum() else "_" for c in source) if is_stream(source) else Path(source).name
    rel = Path(name)
    sink = VideoSink(opts.out_dir / f"{rel.stem}.mp4", info.fps / opts.vid_stride) if opts.draw else None
    total = (info.frames + opts.vid_stride - 1) // opts.vid_stride if info.frames else None
    progress = tqdm(total=total, desc=rel.name, unit="frame", disable=opts.quiet, file=sys.stderr)
    try:
        for batch in _batches(read_frames(capture, opts.vid_stride), opts.batch_size):
            predictions = _predict(predictor, [frame for _, frame in batch], opts, wanted)
            for (index, frame), prediction in zip(batch, predictions):
                writer.write(Path(source), rel, frame, prediction, frame=index, sink=sink)
                report.frames += 1
                report.detections += len(prediction.scores)
            progress.update(len(batch))
    finally:
        capture.release()
        progress.close()
        if sink is not None:
            sink.close()
    report.videos.append(str(sink.path) if sink is not None else source)


def _detect_tiled(predictor, array: np.ndarray, opts: DetectOptions, wanted):
    """``--tile``: one image by overlapping full-resolution tiles (:mod:`turboyolo.infer.tiling`)."""
    from turboyolo.infer.predict import Prediction
    from turboyolo.infer.tiling import TileOptions, detect_tiled

    def predict(arrays):
        return predictor.predict_arrays(
            arrays, opts.conf_thres, opts.nms_thres, multi_label=not opts.single_label, classes=wanted
        )

    options = TileOptions(opts.tile, opts.overlap, whole=opts.tile_whole)
    merged = detect_tiled(
        predict, array, options, batch_size=opts.batch_size, nms_thres=opts.nms_thres, max_det=opts.max_det
    )
    height, width = array.shape[:2]
    return Prediction(merged.boxes, merged.scores, merged.classes, width, height)


def _to_full_resolution(prediction, decoded_hw, orig_hw) -> None:
    """Boxes found on a reduced decode (``--fast-decode``) back to full-resolution pixels."""
    if tuple(decoded_hw) == tuple(orig_hw):
        return
    scale = np.array([orig_hw[1] / decoded_hw[1], orig_hw[0] / decoded_hw[0]] * 2, np.float32)
    prediction.boxes = prediction.boxes * scale
    prediction.height, prediction.width = orig_hw


def _coco_gt_ids(path: str) -> dict[str, int]:
    try:
        data = json.loads(Path(path).read_text())
        return {Path(img["file_name"]).name: int(img["id"]) for img in data["images"]}
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError(
            f"{path}: not a COCO ground-truth json with images[].file_name/id ({err})"
        ) from None


class _Writer:
    """Writes drawings, labels and the COCO json for each image as it is done."""

    def __init__(self, opts: DetectOptions, names: list[str], gt_ids: dict[str, int] | None):
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
        from turboyolo.formats.labels import write_yolo_labels

        width, height = prediction.width, prediction.height
        boxes = prediction.boxes.astype(np.float64)
        rows = np.column_stack(
            [
                prediction.classes.astype(np.float64),
                (boxes[:, 0] + boxes[:, 2]) / 2 / width,
                (boxes[:, 1] + boxes[:, 3]) / 2 / height,
                (boxes[:, 2] - boxes[:, 0]) / width,
                (boxes[:, 3] - boxes[:, 1]) / height,
            ]
            + ([prediction.scores.astype(np.float64)] if self.opts.save_conf else [])
        )
        write_yolo_labels(self.opts.out_dir / "labels" / rel.with_suffix(".txt"), rows, self.opts.save_conf)

    def _draw(self, rel: Path, array: np.ndarray, prediction) -> None:
        import cv2

        image = self._drawn(array, prediction)
        dest = self.opts.out_dir / rel
        if dest.suffix.lower() not in (".jpg", ".jpeg", ".png"):
            dest = dest.with_suffix(".jpg")
        dest.parent.mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(dest), image)

    def _drawn(self, array: np.ndarray, prediction) -> np.ndarray:
        """BGR copy of ``array`` with the boxes and labels drawn."""
        import cv2

        image = cv2.cvtColor(array, cv2.COLOR_RGB2BGR)
        scale = array.shape[1] / prediction.width
        thickness = max(1, round(max(image.shape[:2]) / 400))
        for box, score, cls in zip(prediction.boxes * scale, prediction.scores, prediction.classes):
            color = _color(int(cls))
            x1, y1, x2, y2 = (int(round(v)) for v in box)
            cv2.rectangle(image, (x1, y1), (x2, y2), color, thickness)
            label = f"{self.names[int(cls)]} {score:.2f}"
            cv2.putText(
                image,
                label,
                (x1, max(y1 - 4, 10)),
                cv2.FONT_HERSHEY_SIMPLEX,
                0.4 * thickness,
                color,
                thickness,
            )
        return image

    def close(self, report: DetectReport) -> None:
        (self.opts.out_dir / "predictions.json").write_text(json.dumps(self.results))
        (self.opts.out_dir / "image_ids.json").write_text(json.dumps(self.image_ids, indent=1))
        if report.skipped:
            (self.opts.out_dir / "skipped.txt").write_text("".join(f"{p}\t{r}\n" for p, r in report.skipped))


def _color(index: int) -> tuple[int, int, int]:
    rng = np.random.default_rng(index)
    return tuple(int(v) for v in rng.integers(64, 256, 3))
