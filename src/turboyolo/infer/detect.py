"""The detect job: gather images, run the :class:`Predictor` in batches, write the three outputs.

Outputs in the run directory: drawn images (mirroring the inputs' relative paths so same-named files
never collide), ``labels/*.txt`` in YOLO format (``--save-txt``, ``--save-conf``), and
``predictions.json`` in COCO results format with ``image_ids.json`` mapping ids to files.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from turboyolo.errors import ConfigError, DataError, FlagError, TurboYoloError, printable
from turboyolo.infer.writer import DetectionWriter, coco_gt_ids
from turboyolo.rundir import next_run_dir


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

    def __post_init__(self) -> None:
        if not self.sources:
            raise FlagError("no images given; pass files, folders, globs or list files (e.g. `detect data/`)")
        for flag, value in (("--conf-thres", self.conf_thres), ("--nms-thres", self.nms_thres)):
            if not 0 <= value <= 1:
                raise FlagError(f"{flag} must lie in [0, 1], got {value}")
        if self.batch_size < 1:
            raise FlagError(f"--batch-size must be >= 1, got {self.batch_size}")
        if self.vid_stride < 1:
            raise FlagError(f"--vid-stride must be >= 1, got {self.vid_stride}")
        if self.tile is not None:
            from turboyolo.infer.tiling import TileOptions

            TileOptions(self.tile, self.overlap)  # validates --tile and --overlap
            if self.fast_decode:
                raise FlagError("--tile detects at full resolution; drop --fast-decode")


@dataclass
class DetectReport:
    out_dir: Path
    images: int = 0
    detections: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    videos: list[str] = field(default_factory=list)
    frames: int = 0
    notes: list[str] = field(default_factory=list)  # folder links not followed again, unreadable folders


def gather_images(sources: list[str], notes: list[str] | None = None) -> list[tuple[Path, Path]]:
    """(image path, output-relative path) for every input; relative paths never collide.

    Folders and ``**`` globs follow each real folder once (a folder-link loop ends); ``notes`` receives
    one line per link not followed again or folder not readable.
    """
    from turboyolo.formats.datasets import IMAGE_SUFFIXES, glob_files, list_images

    images: list[Path] = []
    for source in sources:
        if any(ch in source for ch in "*?["):
            matches = glob_files(source, notes)
            images += [p for p in matches if p.suffix.lower() in IMAGE_SUFFIXES]
            if not matches:
                raise DataError(f"{source}: the glob matches no file")
        else:
            images += list_images(source, notes)
    seen, unique = set(), []
    for path in images:
        key = _resolved(path)
        if key not in seen:
            seen.add(key)
            unique.append(key)
    if not unique:
        raise DataError(f"no images found in {', '.join(sources)} (looked for {', '.join(IMAGE_SUFFIXES)})")
    base = Path(os.path.commonpath([p.parent for p in unique]))
    return [(p, p.relative_to(base)) for p in unique]


def _resolved(path: Path) -> Path:
    """The absolute path without links; a link that loops stays as it is (reading it then fails, and
    the image is skipped with that reason)."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # RuntimeError: Python < 3.13 on a link loop
        return Path(os.path.abspath(path))


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
            raise FlagError(f"--class-filter {item!r} is neither a class index nor one of the names")
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
    for note in report.notes:
        print(f"note: {printable(note)}", file=sys.stderr)
    if report.skipped:
        listed = printable(report.out_dir / "skipped.txt")
        print(f"{len(report.skipped)} unreadable images skipped (listed in {listed}):", file=sys.stderr)
        for path, reason in report.skipped:
            print(f"  {printable(path)}: {printable(reason)}", file=sys.stderr)
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
        from turboyolo.formats.coco import coco_names

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
    notes: list[str] = []
    items = gather_images(image_sources, notes) if image_sources or not videos else []
    if videos and opts.coco_gt:
        raise ConfigError("--coco-gt takes image ids from a COCO json; it does not apply to videos")
    gt_ids = coco_gt_ids(opts.coco_gt) if opts.coco_gt else None
    if opts.out_dir is None:  # only now: a run that fails on its inputs leaves no empty directory
        opts.out_dir = next_run_dir(*opts.run_dir)
    writer = DetectionWriter(opts, names, gt_ids)
    report = DetectReport(opts.out_dir, notes=notes)
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
        from turboyolo.infer.tiling import TileOptions

        tiles = TileOptions(opts.tile, opts.overlap, whole=opts.tile_whole)
        return [predictor.predict_tiled(array, tiles, opts.conf_thres, opts.nms_thres,
                                        multi_label=not opts.single_label, classes=wanted,
                                        max_det=opts.max_det, batch_size=opts.batch_size) for array in arrays]
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


def _to_full_resolution(prediction, decoded_hw, orig_hw) -> None:
    """Boxes found on a reduced decode (``--fast-decode``) back to full-resolution pixels."""
    if tuple(decoded_hw) == tuple(orig_hw):
        return
    scale = np.array([orig_hw[1] / decoded_hw[1], orig_hw[0] / decoded_hw[0]] * 2, np.float32)
    prediction.boxes = prediction.boxes * scale
    prediction.height, prediction.width = orig_hw



