"""The pictures the review page shows: reduced JPEGs made lazily and cached, and the model's boxes.

A 12-megapixel photo is never sent whole to fit a screen: :class:`ReducedImages` decodes it with the
project's reduced decode (:func:`turboyolo.data.decode.decode_image`: a JPEG at the smallest DCT scale
still >= the side asked for), encodes the result as a JPEG and keeps it in memory and on disk
(``$TURBOYOLO_CACHE/review``, keyed by path, size, mtime and side), so the next visit, or the next run,
costs a file read. The page asks for the next images ahead (:meth:`ReducedImages.warm`). Boxes stay in
the original image's relative coordinates, whatever size is shown.

:class:`ModelBoxes` runs a model (``turboyolo review --weights``) on the same reduced image and keeps its
boxes, ``[cls, cx, cy, w, h, conf]`` relative, per image.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import cv2
import numpy as np
from PIL import Image

from turboyolo.assets import cache_dir
from turboyolo.data.decode import decode_image
from turboyolo.formats.labels import boxes_to_yolo_rows


class ReducedImages:
    """JPEG bytes of images with the longer side at most ``side`` (0: full size), made once.

    Args:
        folder: the disk cache (default ``$TURBOYOLO_CACHE/review``); ``None`` and unwritable: memory only.
        memory: how many images stay in memory.
        workers: threads making images ahead of the page.
    """

    def __init__(self, folder: Path | None = None, memory: int = 48, workers: int = 2, quality: int = 88):
        self.folder = folder if folder is not None else cache_dir() / "review"
        self.memory, self.quality = memory, quality
        self._cache: OrderedDict[str, bytes] = OrderedDict()
        self._pending: dict[str, Future] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="review-images")

    def get(self, image: Path, side: int) -> bytes:
        """The reduced JPEG of ``image`` (made now unless cached or being made).

        Raises:
            DataError: the image cannot be decoded (names the file and the reason).
        """
        key = _cache_key(image, side)
        with self._lock:
            data = self._cache.get(key)
            if data is not None:
                self._cache.move_to_end(key)
                return data
            future = self._pending.get(key)
            if future is None:
                future = self._pool.submit(self._make, image, side, key)
                self._pending[key] = future
        return future.result()

    def warm(self, images: Iterable[Path], side: int) -> None:
        """Start making ``images`` in the background (the ones the page will show next)."""
        for image in images:
            key = _cache_key(image, side)
            with self._lock:
                if key in self._cache or key in self._pending:
                    continue
                self._pending[key] = self._pool.submit(self._make, image, side, key)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _make(self, image: Path, side: int, key: str) -> bytes:
        try:
            data = self._read_disk(key)
            if data is None:
                data = encode_jpeg(reduced_array(image, side), self.quality)
                self._write_disk(key, data)
            with self._lock:
                self._cache[key] = data
                while len(self._cache) > self.memory:
                    self._cache.popitem(last=False)
            return data
        finally:
            with self._lock:
                self._pending.pop(key, None)

    def _read_disk(self, key: str) -> bytes | None:
        try:
            return (self.folder / f"{key}.jpg").read_bytes()
        except OSError:
            return None

    def _write_disk(self, key: str, data: bytes) -> None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp = self.folder / f".{key}.{os.getpid()}.{threading.get_ident()}.tmp"
            tmp.write_bytes(data)
            os.replace(tmp, self.folder / f"{key}.jpg")
        except OSError:
            pass  # a read-only cache: the memory cache still serves


def reduced_array(image: Path, side: int) -> np.ndarray:
    """RGB uint8 of ``image``, EXIF orientation applied, longer side at most ``side`` (0: full size):
    the reduced decode when the photo is larger, never an enlargement."""
    try:
        with Image.open(image) as img:  # the header only: is the photo larger than asked?
            larger = side > 0 and max(img.size) > side
    except (OSError, ValueError, Image.DecompressionBombError):
        larger = side > 0  # decode_image names the problem
    return decode_image(image, side if larger else None)[0]


def encode_jpeg(rgb: np.ndarray, quality: int) -> bytes:
    ok, data = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise ValueError("JPEG encoding failed")
    return data.tobytes()


def _cache_key(image: Path, side: int) -> str:
    try:
        stat = image.stat()
        stamp = f"{stat.st_size}-{stat.st_mtime_ns}"
    except OSError:
        stamp = "missing"
    return hashlib.sha1(f"{os.fsencode(image)!r}|{stamp}|{side}".encode()).hexdigest()


class ModelBoxes:
    """A model's boxes per image, ``[cls, cx, cy, w, h, conf]`` relative, computed once (one at a time).

    ``predict``: RGB uint8 array -> list of such rows (:func:`predictor_rows` makes one from a
    :class:`turboyolo.infer.predict.Predictor`).
    """

    def __init__(self, predict: Callable[[np.ndarray], list[list[float]]], side: int):
        self.predict, self.side = predict, side
        self._done: dict[Path, list[list[float]]] = {}
        self._lock = threading.Lock()

    def get(self, image: Path) -> list[list[float]]:
        with self._lock:
            if image not in self._done:
                self._done[image] = self.predict(reduced_array(image, self.side))
            return self._done[image]


def predictor_rows(predictor, conf_thres: float, nms_thres: float) -> Callable[[np.ndarray], list]:
    """A :class:`ModelBoxes` ``predict`` from a loaded :class:`turboyolo.infer.predict.Predictor`."""

    def predict(array: np.ndarray) -> list[list[float]]:
        found = predictor.predict_arrays([array], conf_thres=conf_thres, nms_thres=nms_thres)[0]
        rows = boxes_to_yolo_rows(found.boxes, found.classes, found.width, found.height, found.scores)
        return [[int(r[0]), *(round(float(v), 6) for v in r[1:])] for r in rows]

    return predict
