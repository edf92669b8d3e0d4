"""The detect job: gather images, run the :class:`Predictor` in batches, write the three outputs.

Outputs in the run directory: drawn images (mirroring the inputs' relative paths so same-named files
never collide), ``labels/*.txt`` in YOLO format (``--save-txt``, ``--save-conf``), and
``predictions.json`` in COCO results format with ``image_ids.json`` mapping ids to files.
:func:`run_detect` is the job: a :class:`DetectRequest` in, a :class:`DetectReport` out, nothing printed
(a progress bar on stderr unless ``quiet``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from turboyolo.data.decode import decode_image
from turboyolo.errors import ConfigError, DataError, FlagError, TurboYoloError
from turboyolo.formats.coco import coco_names
from turboyolo.formats.datasets import IMAGE_SUFFIXES, glob_files, is_image_name, list_images, read_names
from turboyolo.infer.predict import PredictArgs, Prediction, Predictor, class_indices
from turboyolo.infer.tiling import TileOptions
from turboyolo.infer.video import VideoSink, is_stream, open_video, read_frames, split_video_sources
from turboyolo.infer.writer import DetectionWriter, coco_gt_ids
from turboyolo.options import RunDirArgs, option, require
from turboyolo.rundir import check_outside, clear_previous_outputs, removed_if_empty


@dataclass
class DetectOutputArgs:
    """What the run directory receives besides predictions.json (COCO results) and image_ids.json."""

    save_txt: bool = option(False, "write YOLO labels under labels/", action="store_true")
    save_conf: bool = option(False, "append the confidence to each label line (implies --save-txt)",
                             action="store_true")
    draw: bool = option(True, "write the drawn images (--no-draw: none)",
                        action=argparse.BooleanOptionalAction)
    coco_gt: str | None = option(None, "COCO ground-truth json: take image_id from it by file_name")
    coco_ids: bool = option(False, "category_id as COCO's 91 ids (80-class models)", action="store_true")

    def __post_init__(self) -> None:
        self.save_txt = self.save_txt or self.save_conf


@dataclass
class SourceArgs:
    """How images and videos are read and sliced."""

    workers: int = option(4, "decode threads", "--n-cpu", "--workers", type=int)
    fast_decode: bool = option(False, "decode large JPEGs at reduced size (faster; moves scores slightly)",
                               action="store_true")
    tile: int | None = option(None, "detect large images on overlapping SIZE x SIZE tiles at full "
                              "resolution, merged", type=int, metavar="SIZE")
    overlap: float = option(0.2, "with --tile: share of a tile overlapped", type=float)
    tile_whole: bool = option(False, "with --tile: also detect on the whole (downscaled) image",
                              action="store_true")
    vid_stride: int = option(1, "videos: detect on every N-th frame (output video at fps/N)", type=int)

    def __post_init__(self) -> None:
        self.workers = max(1, self.workers)
        require(self.vid_stride >= 1, f"--vid-stride must be >= 1, got {self.vid_stride}")
        if self.tile is not None:
            TileOptions(self.tile, self.overlap)  # validates --tile and --overlap
            require(not self.fast_decode, "--tile detects at full resolution; drop --fast-decode")

    @property
    def tiles(self) -> TileOptions | None:
        return TileOptions(self.tile, self.overlap, whole=self.tile_whole) if self.tile else None


GROUPS: dict[str, type] = {"predict": PredictArgs, "output": DetectOutputArgs, "source_args": SourceArgs,
                           "run_dir": RunDirArgs}


@dataclass
class DetectRequest:
    """What ``turboyolo detect`` is asked to do: the inputs, then one group of options per concern.

    ``out_dir``: write there instead of a fresh run directory from ``run_dir`` (made once the model
    has loaded, so a run that fails on its inputs leaves no empty directory).
    """

    sources: list[str]
    weights: str | None = None
    cfg: str | None = None
    names: str | None = None
    predict: PredictArgs = field(default_factory=PredictArgs)
    output: DetectOutputArgs = field(default_factory=DetectOutputArgs)
    source_args: SourceArgs = field(default_factory=SourceArgs)
    run_dir: RunDirArgs = field(default_factory=RunDirArgs)
    out_dir: Path | None = None
    quiet: bool = False

    def __post_init__(self) -> None:
        if not self.sources:
            raise FlagError("no images given; pass files, folders, globs or list files (e.g. `detect data/`)")


@dataclass
class DetectReport:
    """What :func:`run_detect` did: counts, the run directory, what was skipped and why."""

    out_dir: Path
    images: int = 0
    detections: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    videos: list[str] = field(default_factory=list)
    frames: int = 0
    notes: list[str] = field(default_factory=list)  # folder links not followed again, unreadable folders

    def summary(self) -> str:
        """One line: what was detected and where it went."""
        what = f"{self.images} images"
        if self.videos:
            what += f", {self.frames} frames of {len(self.videos)} video(s)"
        return f"{what}, {self.detections} detections -> {self.out_dir}"


def gather_images(sources: list[str], notes: list[str] | None = None) -> list[Path]:
    """Every image of ``sources`` once (absolute, links resolved), in order.

    Folders and ``**`` globs follow each real folder once (a folder-link loop ends); ``notes`` receives
    one line per link not followed again or folder not readable.
    """
    images: list[Path] = []
    for source in sources:
        if any(ch in source for ch in "*?["):
            matches = glob_files(source, notes)
            images += [p for p in matches if is_image_name(p)]
            if not matches:
                raise DataError(f"{source}: the glob matches no file")
        else:
            images += list_images(source, notes)
    unique = list(dict.fromkeys(_resolved(path) for path in images))
    if not unique:
        raise DataError(f"no images found in {', '.join(sources)} (looked for {', '.join(IMAGE_SUFFIXES)})")
    return unique


def relative_names(images: list[Path], videos: list[str]) -> tuple[list[tuple[Path, Path]], dict[str, Path]]:
    """Output-relative paths: each file input's path below the folder all file inputs share, so
    ``a/clip.mp4`` and ``b/clip.mp4`` (or two ``0001.jpg`` in two folders) keep apart; a stream or
    camera gets its name with every other character as ``_``."""
    files = images + [_resolved(Path(v)) for v in videos if not is_stream(v) or Path(v).exists()]
    base = Path(os.path.commonpath([p.parent for p in files])) if files else Path("/")
    video_rel = {v: _resolved(Path(v)).relative_to(base) if not is_stream(v) or Path(v).exists()
                 else Path("".join(c if c.isalnum() else "_" for c in v)) for v in videos}
    return [(p, p.relative_to(base)) for p in images], video_rel


def _resolved(path: Path) -> Path:
    """The absolute path without links; a link that loops stays as it is (reading it then fails, and
    the image is skipped with that reason)."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # RuntimeError: Python < 3.13 on a link loop
        return Path(os.path.abspath(path))


def _decode_all(items, fast_target: int | None, workers: int) -> Iterator[tuple[Path, Path, object]]:
    """Decode images in a thread pool, in order, a few ahead of the model."""

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


def run_detect(request: DetectRequest) -> DetectReport:
    """``turboyolo detect``: every image and video of ``request.sources`` through the model; returns the
    counts, the run directory and the inputs skipped with their reasons.

    Raises:
        ConfigError, DataError, WeightsError, FlagError: bad names, weights, inputs or options.
    """
    args = request.predict
    predictor = Predictor.load(request.weights, request.cfg, device=args.device, img_size=args.img_size,
                               half=args.half, backend=args.backend)
    names = class_names(request.names, predictor.model.num_classes)
    if request.output.coco_ids and predictor.model.num_classes != 80:
        raise ConfigError("--coco-ids needs an 80-class model")
    wanted = class_indices(args.class_filter, names)
    image_sources, videos = split_video_sources(request.sources)
    notes: list[str] = []
    images = gather_images(image_sources, notes) if image_sources or not videos else []
    items, video_rel = relative_names(images, videos)
    output = request.output
    if videos and output.coco_gt:
        raise ConfigError("--coco-gt takes image ids from a COCO json; it does not apply to videos")
    gt_ids = coco_gt_ids(output.coco_gt) if output.coco_gt else None
    if request.out_dir is None:  # a run directory inside an input folder would be read as input next time
        check_outside(Path(request.run_dir.project or "runs/detect") / request.run_dir.name,
                      [Path(s) for s in image_sources if Path(s).is_dir()], "--project")
    out_dir = request.out_dir or request.run_dir.make("detect")  # only now: the inputs are good
    with removed_if_empty(out_dir, made=request.out_dir is None):
        writer = DetectionWriter(out_dir, names, save_txt=output.save_txt, save_conf=output.save_conf,
                                 draw=output.draw, coco_ids=output.coco_ids, gt_ids=gt_ids,
                                 coco_gt=output.coco_gt, inputs=images)
        writer.plan(items)  # every image's output names, refused before anything is written
        # --exist-ok: the last run's files go (never one of this run's inputs)
        previous = clear_previous_outputs(out_dir, keep=images + [Path(v) for v in videos])
        report = DetectReport(out_dir, notes=notes + ([previous] if previous else []))
        _detect_images(items, predictor, request, wanted, writer, report)
        for source in videos:
            _detect_video(source, video_rel[source], predictor, request, wanted, writer, report)
        writer.close(report.skipped)
    if predictor.caps.summary():  # the images where --max-det or --max-candidates changed the output
        report.notes.append(predictor.caps.summary())
    return report


def class_names(names_file: str | None, num_classes: int) -> list[str]:
    """The names of ``--names``, else COCO's for an 80-class model, else the class indices."""
    if names_file is None:
        return coco_names() if num_classes == 80 else [str(i) for i in range(num_classes)]
    names = read_names(names_file)
    if len(names) != num_classes:
        raise ConfigError(f"{names_file}: {len(names)} names but the model has {num_classes} classes")
    return names


def _detect_images(items: list[tuple[Path, Path]], predictor: Predictor, request: DetectRequest,
                   wanted: list[int] | None, writer: DetectionWriter, report: DetectReport) -> None:
    source_args, batch_size = request.source_args, request.predict.batch_size
    fast_target = max(predictor.img_size) if source_args.fast_decode else None
    progress = tqdm(total=len(items), desc="detect", unit="img", disable=request.quiet or len(items) < 2,
                    file=sys.stderr)
    for batch in _batches(_decode_all(items, fast_target, source_args.workers), batch_size):
        good = []
        for path, rel, result in batch:
            if isinstance(result, Exception):
                report.skipped.append((str(path), str(result).split(": ", 1)[-1]))
            else:
                good.append((path, rel, result))
        arrays = [array for _, _, (array, _) in good]
        predictions = predictor.run(arrays, request.predict, wanted, source_args.tiles)
        for (path, rel, (array, orig_hw)), prediction in zip(good, predictions):
            _to_full_resolution(prediction, array.shape[:2], orig_hw)
            writer.write(path, rel, array, prediction)
            report.images += 1
            report.detections += len(prediction.scores)
        progress.update(len(batch))
    progress.close()


def _detect_video(source: str, rel: Path, predictor: Predictor, request: DetectRequest,
                  wanted: list[int] | None, writer: DetectionWriter, report: DetectReport) -> None:
    """One video file or stream: every ``--vid-stride``-th frame, labels ``<stem>_<frame>.txt``, and an
    annotated ``<stem>.mp4`` at the source's frame rate divided by the stride."""
    stride = request.source_args.vid_stride
    try:
        capture, info = open_video(source)
    except DataError as err:
        report.skipped.append((source, str(err).split(": ", 1)[-1]))
        return
    sink = VideoSink(writer.video_path(source, rel), info.fps / stride) if writer.draw else None
    total = (info.frames + stride - 1) // stride if info.frames else None
    progress = tqdm(total=total, desc=rel.name, unit="frame", disable=request.quiet, file=sys.stderr)
    last = -1  # the index of the last frame read
    try:
        for batch in _batches(read_frames(capture, stride), request.predict.batch_size):
            predictions = predictor.run([frame for _, frame in batch], request.predict, wanted,
                                        request.source_args.tiles)
            for (index, frame), prediction in zip(batch, predictions):
                writer.write(Path(source), rel, frame, prediction, frame=index, sink=sink)
                report.frames += 1
                report.detections += len(prediction.scores)
                last = index
            progress.update(len(batch))
    finally:
        capture.release()
        progress.close()
        if sink is not None:
            sink.close()
    _note_short_video(source, last, stride, info.frames, report)
    if last >= 0:
        report.videos.append(str(sink.path) if sink is not None else source)


def _note_short_video(source: str, last: int, stride: int, frames: int, report: DetectReport) -> None:
    """A video that ends before the frame count its header gives (cut short, damaged) is named: skipped
    when no frame could be read, else a note "ended at frame N of M"."""
    if last < 0:
        said = f" (its header says {frames} frames)" if frames else ""
        report.skipped.append((source, f"no frame could be read{said}; the file is damaged or empty"))
    elif frames and last + stride < frames:
        report.notes.append(f"{source}: the video ended at frame {last + 1} of {frames} (cut short or "
                            "damaged); the frames after it were not read")


def _to_full_resolution(prediction: Prediction, decoded_hw, orig_hw) -> None:
    """Boxes found on a reduced decode (``--fast-decode``) back to full-resolution pixels."""
    if tuple(decoded_hw) == tuple(orig_hw):
        return
    scale = np.array([orig_hw[1] / decoded_hw[1], orig_hw[0] / decoded_hw[0]] * 2, np.float32)
    prediction.boxes = prediction.boxes * scale
    prediction.height, prediction.width = orig_hw
