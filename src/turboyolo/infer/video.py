"""Video files and streams for ``detect``: which sources are videos, and their frames through OpenCV.

A source is a video when it is a file with a video suffix, a stream URL (``rtsp://``, ``http://``, ...)
or a camera index (``0``). Frames come out as RGB uint8 with their 0-based index in the source;
``stride`` keeps every stride-th frame (``--vid-stride``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from turboyolo.errors import DataError
from turboyolo.formats.datasets import glob_files, is_image_name

VIDEO_SUFFIXES = (".mp4", ".avi", ".mov", ".mkv", ".webm", ".m4v", ".mpg", ".mpeg", ".wmv", ".ts")


def is_stream(source: str) -> bool:
    return source.isdigit() or "://" in source


def is_video_file(path: str | Path) -> bool:
    return Path(path).suffix.lower() in VIDEO_SUFFIXES


def split_video_sources(sources: list[str]) -> tuple[list[str], list[str]]:
    """(image sources, video sources). A glob's video matches go to the videos; the glob itself stays
    an image source when it also matches an image (so ``clips/*`` takes both)."""
    images, videos = [], []
    for source in sources:
        if is_stream(source) and not Path(source).exists():
            videos.append(source)
        elif any(ch in source for ch in "*?["):
            matches = [str(m) for m in glob_files(source)]  # ** follows each real folder once
            videos += [m for m in matches if is_video_file(m)]
            if any(is_image_name(m) for m in matches) or not matches:
                images.append(source)
        elif is_video_file(source):
            videos.append(source)
        else:
            images.append(source)
    return images, videos


@dataclass
class VideoInfo:
    fps: float
    width: int
    height: int
    frames: int  # 0 when unknown (streams)


def open_video(source: str):
    """A ``cv2.VideoCapture`` that is open, and its :class:`VideoInfo`."""
    if source.isdigit():
        capture = cv2.VideoCapture(int(source))
    elif _utf8(source):
        capture = cv2.VideoCapture(source)
    else:  # OpenCV takes paths as UTF-8 text and crashes on other bytes: open it through a plain name
        with tempfile.TemporaryDirectory() as folder:
            link = os.path.join(folder, "video" + Path(source).suffix)
            os.symlink(os.path.abspath(source), link)
            capture = cv2.VideoCapture(link)
    if not capture.isOpened():
        hint = "check the path" if not is_stream(source) else "check the URL / camera index"
        raise DataError(f"{source}: OpenCV cannot open this video; {hint}")
    fps = capture.get(cv2.CAP_PROP_FPS) or 25.0
    info = VideoInfo(
        fps=float(fps) if fps > 0 else 25.0,
        width=int(capture.get(cv2.CAP_PROP_FRAME_WIDTH)),
        height=int(capture.get(cv2.CAP_PROP_FRAME_HEIGHT)),
        frames=max(0, int(capture.get(cv2.CAP_PROP_FRAME_COUNT))),
    )
    return capture, info


def read_frames(capture, stride: int = 1) -> Iterator[tuple[int, np.ndarray]]:
    """(frame index, RGB uint8 ``[H, W, 3]``) for every ``stride``-th frame; skipped frames are only
    grabbed (not decoded)."""
    index = 0
    while True:
        if index % stride:
            if not capture.grab():
                return
        else:
            ok, frame = capture.read()
            if not ok:
                return
            yield index, cv2.cvtColor(frame, cv2.COLOR_BGR2RGB)
        index += 1


class VideoSink:
    """The annotated output video (``mp4v``), opened on the first frame."""

    def __init__(self, path: Path, fps: float):
        self.path, self.fps, self.writer = path, fps, None
        self._staging: Path | None = None  # written under a UTF-8 name, moved to ``path`` on close

    def write(self, bgr: np.ndarray) -> None:
        if self.writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            target = self.path
            if not _utf8(str(self.path)):  # OpenCV crashes on a path that is not UTF-8
                handle, name = tempfile.mkstemp(suffix=self.path.suffix)
                os.close(handle)
                target = self._staging = Path(name)
            fourcc = cv2.VideoWriter_fourcc(*"mp4v")
            self.writer = cv2.VideoWriter(str(target), fourcc, self.fps, (bgr.shape[1], bgr.shape[0]))
        self.writer.write(bgr)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.release()
            if self._staging is not None:
                shutil.move(self._staging, self.path)


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False
