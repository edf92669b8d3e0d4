"""Image decode: reduced-size JPEG decode, EXIF orientation, every mode -> RGB uint8.

The expensive part of a large JPEG is its full-resolution decode. libjpeg can decode directly at 1/2,
1/4 or 1/8 scale (PIL ``draft``), skipping most of the IDCT, upsampling and colour work; what stays is
the entropy (Huffman) decode, which is the floor. We ask for the smallest such scale whose longer
side is still >= the target, then resize to exactly the target with an area filter (linear when
enlarging). Everything after this works on target-sized images.

Every image read in the package goes through here, with one set of checks, in two stages:

- :func:`probe_image`, the scan's check, reads headers and structure only, no pixel: a JPEG's head up to
  its first scan and its last bytes, every marker segment there checked as libjpeg checks it
  (:mod:`turboyolo.formats.jpeg`: tables, frame, the first scan's parameters, the end marker: a truncated
  file has none); a PNG's chunks and their CRCs; the size a header declares is held to :func:`pixel_limit` (a
  decompression bomb: a small PNG that declares 30000 x 30000); BMP and TIFF image data must lie within
  the file; EXIF orientation is applied to the size.
- :func:`decode_image` (the loaders, the prepared cache, detect, label, review and the API) runs the same
  checks over the whole file (a progressive JPEG's later scans too: their headers and parameters, the tables
  between them, stray markers in their data) and decodes all of the image data strictly: a JPEG's by
  libjpeg-turbo with its warnings as errors (simplejpeg; Pillow's decoder, the same library, silences them and
  decodes damaged data to smeared blocks), so a damaged or unreadable file is refused whatever libjpeg says of
  it, with the pixels Pillow would give otherwise; the other formats' by Pillow (a truncated file, a PNG whose
  compressed data is damaged under valid CRCs).

So the full check of a file happens in the first decode a run makes of it anyway (building the prepared
cache, or the first epoch), never as a pass of its own. Only after that may a decode at 1/8 scale leave
out a progressive JPEG's AC scans that this scale never reads (``verified``;
:func:`turboyolo.formats.images.eighth_scale_jpeg`, the same pixels bit for bit): a file not yet decoded
whole is decoded whole, so the shortcut never returns pixels for a file the whole decode refuses. Each
failure is a :class:`DataError` naming the file, the reason and the fix.
"""

from __future__ import annotations

import errno
import io
import os
import re
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import cv2
import numpy as np
import simplejpeg
from PIL import Image, ImageFile, UnidentifiedImageError

from turboyolo.errors import DataError
from turboyolo.formats.datasets import link_problem
from turboyolo.formats.images import (
    JpegHeader,
    JpegProblem,
    declared_size,
    eighth_scale_jpeg,
    harmless_fixed,
    jpeg_header,
    png_exif,
    png_problem,
    sniff,
)
from turboyolo.formats.jpeg import NeedsMore, exif_orientation

ImageFile.LOAD_TRUNCATED_IMAGES = False  # a truncated file must fail, not return grey rows
_PIL_ERRORS = (UnidentifiedImageError, OSError, SyntaxError, ValueError, EOFError, RuntimeError,
               Image.DecompressionBombError)

EXIF_ORIENTATION = 0x0112
_JPEG_FORMATS = ("JPEG", "MPO")
# libjpeg's warnings about a JPEG's image data: each means that part of the picture decodes as garbage
# (the decoder lost its place in the entropy-coded data, or the data ends early). Its other errors and
# warnings refuse the file too (the strict decode), named as libjpeg names them.
_DAMAGE = ("Corrupt JPEG data", "Premature end of JPEG file", "Inconsistent progression sequence")
# A warning after the last scan, about a stray byte before the end marker (some encoders write one): every
# scan decoded cleanly before it. The harmless ones before the image data: formats.images.harmless_fixed.
_AT_THE_END = re.compile(r": 1 extraneous bytes before marker 0xd9")
_PROBE_HEAD, _PROBE_TAIL = 1 << 17, 1 << 14  # what the scan's check reads of a JPEG (more: NeedsMore)
DECODES: Counter[str] = Counter()  # path -> decodes by :func:`decode_image` in this process (tests read it)


def _orientation(img: Image.Image) -> int:
    try:
        return int(img.getexif().get(EXIF_ORIENTATION, 1) or 1)
    except Exception:  # a broken EXIF block must not make the image unreadable
        return 1


def oriented_size(width: int, height: int, orientation: int) -> tuple[int, int]:
    """(width, height) after applying an EXIF orientation (5..8 swap the axes)."""
    return (height, width) if orientation in (5, 6, 7, 8) else (width, height)


def apply_orientation(array: np.ndarray, orientation: int) -> np.ndarray:
    """Apply EXIF orientation 1..8 to an [H, W, C] array (what a viewer shows)."""
    if orientation == 2:
        return cv2.flip(array, 1)
    if orientation == 3:
        return cv2.rotate(array, cv2.ROTATE_180)
    if orientation == 4:
        return cv2.flip(array, 0)
    if orientation == 5:  # transpose
        return np.ascontiguousarray(cv2.transpose(array))
    if orientation == 6:
        return cv2.rotate(array, cv2.ROTATE_90_CLOCKWISE)
    if orientation == 7:  # transverse
        return cv2.rotate(cv2.transpose(array), cv2.ROTATE_180)
    if orientation == 8:
        return cv2.rotate(array, cv2.ROTATE_90_COUNTERCLOCKWISE)
    return array


def _to_rgb_uint8(img: Image.Image) -> np.ndarray:
    mode = img.mode
    if mode == "RGB":
        return np.asarray(img)
    if mode in ("I;16", "I;16B", "I;16L", "I;16N", "I"):
        arr = np.asarray(img)
        if mode == "I" and arr.max(initial=0) <= 255:
            gray = arr.astype(np.uint8)
        else:
            gray = (arr.astype(np.uint32) >> 8).clip(0, 255).astype(np.uint8)
        return np.ascontiguousarray(np.repeat(gray[:, :, None], 3, axis=2))
    if mode == "F":
        arr = np.asarray(img)
        scale = 255.0 if arr.max(initial=0) <= 1.0 else 1.0
        gray = np.clip(arr * scale, 0, 255).astype(np.uint8)
        return np.ascontiguousarray(np.repeat(gray[:, :, None], 3, axis=2))
    if mode == "P" and "transparency" in img.info:
        img = img.convert("RGBA")
    return np.asarray(img.convert("RGB"))


def _resize(array: np.ndarray, width: int, height: int) -> np.ndarray:
    h, w = array.shape[:2]
    if (w, h) == (width, height):
        return array
    interp = cv2.INTER_AREA if width < w and height < h else cv2.INTER_LINEAR
    return cv2.resize(array, (width, height), interpolation=interp)


def target_size(width: int, height: int, target: int) -> tuple[int, int]:
    """(width, height) with the longer side == ``target`` and the aspect ratio kept (>= 1 px)."""
    scale = target / max(width, height)
    return max(1, round(width * scale)), max(1, round(height * scale))


def pixel_limit() -> int | None:
    """Largest width x height decoded: Pillow's refusal limit (2 x ``Image.MAX_IMAGE_PIXELS``, 179 Mpx
    by default; an application that raises Pillow's knob raises this too). None: no limit."""
    return 2 * Image.MAX_IMAGE_PIXELS if Image.MAX_IMAGE_PIXELS else None


def _too_large(path: Path, pixels: int, limit: int, size: tuple[int, int] | None = None) -> DataError:
    what = f"{size[0]} x {size[1]} = " if size else ""
    return DataError(
        f"{path}: image declares {what}{_pixels(pixels)}, over the limit of {_pixels(limit)} (a "
        "decompression bomb, or a picture too large to decode whole); split it into tiles or downscale it, "
        "or remove it"
    )


def _pixels(count: int) -> str:
    return f"{count / 1e6:.0f} megapixels" if count >= 10**6 else f"{count} pixels"


@contextmanager
def _file(path: Path) -> Iterator[BinaryIO]:
    """The image file open for reading; a missing, unreadable or looping path is a DataError."""
    try:
        with open(path, "rb") as handle:
            yield handle
    except FileNotFoundError:
        raise DataError(f"{path}: image not found; fix the list file or restore the image") from None
    except IsADirectoryError:
        raise DataError(f"{path}: a folder where an image was expected; fix the list file") from None
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise DataError(f"{path}: {link_problem(path)}; fix or remove the link") from None
        raise DataError(f"{path}: image unreadable ({err.strerror or err}); check its permissions") from None


def _read(path: Path) -> tuple[bytes | None, str | None]:
    """(whole file, ``"JPEG"``/``"PNG"``) for the formats checked here; (None, None) for the others,
    which Pillow reads from the path. Raises DataError for a missing, unreadable or empty file."""
    with _file(path) as handle:
        head = handle.read(8)
        kind = sniff(head)
        data = head + handle.read() if kind else None
    if not head:
        raise DataError(f"{path}: zero-byte image file; re-export or remove it")
    return data, kind


def _jpeg(path: Path, data: bytes, **part) -> JpegHeader:
    """A JPEG's checked headers (:func:`turboyolo.formats.jpeg.jpeg_header`; ``part``: its ``size`` and
    ``tail`` when ``data`` is the scan's part of the file) within :func:`pixel_limit`."""
    try:
        header = jpeg_header(data, **part)
    except JpegProblem as problem:
        raise DataError(f"{path}: {problem}; re-export or remove it") from None
    limit = pixel_limit()
    if limit is not None and header.width * header.height > limit:
        raise _too_large(path, header.width * header.height, limit, (header.width, header.height))
    return header


def _probe_jpeg(path: Path, handle: BinaryIO, head: bytes) -> JpegHeader:
    """The scan's check of a JPEG from ``head`` (its first bytes) and its last bytes, or from the whole
    file where those do not reach the first scan or the end-of-image marker (long metadata, a trailer)."""
    size = os.fstat(handle.fileno()).st_size
    tail = None
    if len(head) < size:
        handle.seek(max(len(head), size - _PROBE_TAIL))
        tail = handle.read()
    try:
        return _jpeg(path, head, size=size, tail=tail)
    except NeedsMore:
        handle.seek(0)  # one read of the whole (joining the head and the rest would copy it again)
        return _jpeg(path, handle.read())


def _png(path: Path, data: bytes) -> None:
    """A PNG's chunks and their CRCs."""
    problem, _ = png_problem(data)
    if problem:
        raise DataError(f"{path}: {problem}; re-export or remove it")


@contextmanager
def _opened(path: Path, data: bytes | None) -> Iterator[Image.Image]:
    """Pillow's image, header read; pixel limit enforced; every Pillow error becomes a DataError."""
    limit = pixel_limit()
    if data is not None and limit is not None:
        size = declared_size(data, sniff(data[:8]))
        if size is not None and size[0] * size[1] > limit:
            raise _too_large(path, size[0] * size[1], limit, size)
    try:
        img = Image.open(io.BytesIO(data) if data is not None else path)
    except Image.DecompressionBombError as err:  # other formats: Pillow's own check of the header
        found = re.search(r"\((\d+) pixels\)", str(err))
        raise _too_large(path, int(found.group(1)) if found else 0, limit or 0) from None
    except UnidentifiedImageError:
        raise DataError(f"{path}: not a readable image (no image format recognised); re-export or remove it"
                        ) from None
    except _PIL_ERRORS as err:
        raise DataError(f"{path}: not a readable image ({err}); re-export or remove it") from None
    with img:
        width, height = img.size
        if width <= 0 or height <= 0:
            raise DataError(f"{path}: image has zero size; re-export or remove it")
        if limit is not None and width * height > limit:
            raise _too_large(path, width * height, limit, (width, height))
        try:
            yield img
        except _PIL_ERRORS as err:
            raise DataError(f"{path}: unreadable image ({err}); re-export or remove it") from None


def load_image(path: str | Path, target: int | None = None) -> np.ndarray:
    """Decode an image file to RGB uint8, EXIF orientation applied.

    Same as :func:`decode_image` without the original size.
    """
    return decode_image(path, target)[0]


def decode_image(path: str | Path, target: int | None = None, *, verified: bool = False
                 ) -> tuple[np.ndarray, tuple[int, int]]:
    """Decode an image file to RGB uint8, EXIF orientation applied; also its full-resolution size.

    Args:
        path: JPEG, PNG, BMP, TIFF or WebP; grayscale, RGBA, palette, 16-bit and CMYK become RGB.
        target: when given, the longer side of the result equals ``target`` (JPEG decoded at the
            smallest 1/2^k scale still >= target, then area-resized); ``None`` = full resolution.
        verified: this file's decode already passed in this run (the caller's record), so a decode at
            1/8 scale may leave out what that scale never reads. False (default): every byte of the
            image data is decoded and checked.

    Returns:
        (uint8 [H, W, 3] RGB C-contiguous, (orig_h, orig_w) of the full-resolution oriented image).

    Raises:
        DataError: naming the file, when it is missing, empty, truncated, damaged (the checks of
            :func:`probe_image`, and image data that does not decode cleanly), too large
            (:func:`pixel_limit`) or not an image.
    """
    path = Path(path)
    DECODES[str(path)] += 1
    data, kind = _read(path)
    if kind == "JPEG":
        header = _jpeg(path, data)
        width, height, orientation = header.width, header.height, header.orientation
        array = _jpeg_pixels(path, data, header, target, verified)
    else:
        if kind == "PNG":
            _png(path, data)
        with _opened(path, data) as img:
            width, height = img.size
            _within_file(path, img)
            request = _draft_request(img.format, img.mode, img.size, target)
            if request is not None:
                img.draft(img.mode, request)
            img.load()
            # a PNG's eXIf chunk may follow its pixels: read from the bytes, as the scan reads it
            orientation = _png_orientation(data) if kind == "PNG" else _orientation(img)
            array = _to_rgb_uint8(img)
    if target is not None:
        out_w, out_h = target_size(width, height, target)
        array = _resize(array, out_w, out_h)
    array = apply_orientation(array, orientation)
    orig_w, orig_h = oriented_size(width, height, orientation)
    return np.ascontiguousarray(array), (orig_h, orig_w)


def _png_orientation(data: bytes) -> int:
    exif = png_exif(data)
    return (exif_orientation(exif) if exif is not None else None) or 1


def _jpeg_pixels(path: Path, data: bytes, header: JpegHeader, target: int | None, verified: bool
                 ) -> np.ndarray:
    """A checked JPEG's pixels (before resizing and orientation): libjpeg-turbo's strict decode, or
    Pillow's where that decode checked the data but cannot give Pillow's pixels (CMYK, odd scales)."""
    array = _strict_jpeg(path, data, header, target, verified)
    if array is not None:
        return array
    with _opened(path, data) as img:
        request = _draft_request(img.format, img.mode, img.size, target)
        if request is not None:
            img.draft(img.mode, request)
        img.load()
        return _to_rgb_uint8(img)


def _jpeg_mode(header: JpegHeader) -> str:
    """The mode Pillow opens this JPEG in."""
    return {1: "L", 3: "RGB"}.get(header.components, "CMYK")


def _draft_request(fmt: str | None, mode: str, size: tuple[int, int], target: int | None
                   ) -> tuple[int, int] | None:
    """The size to ask Pillow's JPEG ``draft`` for (a reduced decode), or None for a full decode."""
    if target is None or fmt not in _JPEG_FORMATS or mode not in ("RGB", "L", "CMYK"):
        return None
    width, height = size
    scale = target / max(width, height)
    if scale >= 1:
        return None
    return max(1, int(np.ceil(width * scale))), max(1, int(np.ceil(height * scale)))


def _draft_scale(mode: str, size: tuple[int, int], target: int | None) -> int:
    """The 1/scale Pillow's ``draft`` picks for :func:`_draft_request` (1, 2, 4 or 8)."""
    request = _draft_request("JPEG", mode, size, target)
    if request is None:
        return 1
    ratio = min(size[0] // request[0], size[1] // request[1])
    return next(scale for scale in (8, 4, 2, 1) if ratio >= scale)


def _libjpeg(data: bytes, colorspace: str, out_h: int, out_w: int) -> np.ndarray:
    """libjpeg-turbo's decode at the smallest scale >= (out_h, out_w), every warning an error except the
    harmless ones (a stray byte before the end marker; :func:`turboyolo.formats.images.harmless_fixed`).

    Raises:
        ValueError: libjpeg's message.
    """
    for _ in range(4):  # each harmless warning fixed once at most
        try:
            return simplejpeg.decode_jpeg(data, colorspace, min_height=out_h, min_width=out_w)
        except ValueError as err:
            message = str(err)
        if _AT_THE_END.search(message):
            return simplejpeg.decode_jpeg(data, colorspace, min_height=out_h, min_width=out_w, strict=False)
        data = harmless_fixed(data, message)
        if data is None:
            break
    raise ValueError(message)


def _decode_jpeg(data: bytes, colorspace: str, out_h: int, out_w: int, eighth: bool) -> np.ndarray:
    """:func:`_libjpeg` of the whole file; with ``eighth`` (a 1/8 decode of a file whose whole decode
    passed before) of :func:`eighth_scale_jpeg`'s shorter stream where it has one, the same pixels (where
    that stream fails, the whole file decides).

    Raises:
        ValueError: libjpeg's error or warning on the whole file.
    """
    try:
        short = eighth_scale_jpeg(data) if eighth else None
    except (IndexError, ValueError):  # a header it cannot follow: the whole file's decode decides
        short = None
    if short is not None:
        try:
            return _libjpeg(short, colorspace, out_h, out_w)
        except ValueError:
            pass
    return _libjpeg(data, colorspace, out_h, out_w)


def _strict_jpeg(path: Path, data: bytes, header: JpegHeader, target: int | None,
                 verified: bool = False) -> np.ndarray | None:
    """A JPEG's image data decoded by libjpeg-turbo that treats a warning as an error.

    Pillow's decoder (the same library) silences libjpeg's warnings, so a JPEG whose entropy-coded data
    is damaged decodes to smeared blocks without a word. Here the same pixels come from the same scaled
    decode Pillow would make (1/2, 1/4 or 1/8 for ``target``, default quality settings), or a
    :class:`DataError` naming what libjpeg says: every error and warning refuses the file (damaged
    data, a missing table, invalid progression, ...). Returns None where Pillow gives the pixels (CMYK,
    tiny images, a scale the simple API does not pick): the image data was checked here all the same.
    ``verified``: at 1/8 scale a progressive file's AC scans that cannot change the pixels are not
    decoded (:func:`eighth_scale_jpeg`).
    """
    width, height, mode = header.width, header.height, _jpeg_mode(header)
    scale = _draft_scale(mode, (width, height), target)
    direct = mode in ("RGB", "L") and (scale == 1 or min(width, height) >= 16)
    out_w, out_h = (-(-width // scale), -(-height // scale)) if direct else (1, 1)
    colorspace = "RGB" if direct else ("CMYK" if mode == "CMYK" else "GRAY")
    try:
        array = _decode_jpeg(data, colorspace, out_h, out_w, eighth=verified and direct and scale == 8)
    except ValueError as err:
        raise _refused(path, str(err)) from None
    return array if direct and array.shape[:2] == (out_h, out_w) else None


def _refused(path: Path, message: str) -> DataError:
    """The error for a JPEG libjpeg refuses (its message quoted)."""
    if message.startswith(_DAMAGE):
        return DataError(f"{path}: corrupt JPEG: the image data does not decode cleanly (libjpeg: "
                         f"{message}); part of the picture would be garbage: re-export or remove it")
    return DataError(f"{path}: unreadable JPEG (libjpeg: {message}); re-export or remove it")


def probe_image(path: str | Path) -> tuple[int, int, str]:
    """The scan's check: ``(height, width, format)`` after EXIF, from headers and structure alone.

    Refuses a missing, zero-byte or non-image file, a picture over :func:`pixel_limit` (from its
    header), a JPEG or PNG that fails the structure checks of :mod:`turboyolo.formats.images` (truncated,
    bad CRC, a segment before a JPEG's first scan that libjpeg refuses: tables, frame, the scan's
    parameters), BMP or TIFF image data that runs past the end of the file. No pixel is decoded, and a
    JPEG's image data and later scans are not read: a progressive file's later scans that libjpeg refuses,
    stray markers in the image data, and image data that is wrong under an intact structure are found by
    the first :func:`decode_image` of the file, which runs these checks over the whole file.

    Raises:
        DataError: naming the file and the reason.
    """
    path = Path(path)
    with _file(path) as handle:
        head = handle.read(_PROBE_HEAD)
        kind = sniff(head[:8])
        if kind == "JPEG":
            header = _probe_jpeg(path, handle, head)
        data = head + handle.read() if kind == "PNG" else None
    if not head:
        raise DataError(f"{path}: zero-byte image file; re-export or remove it")
    if kind == "JPEG":
        width, height, fmt, orientation = header.width, header.height, "JPEG", header.orientation
    else:
        if kind == "PNG":
            _png(path, data)
        with _opened(path, data) as img:
            fmt = img.format or "?"
            width, height = img.size
            _within_file(path, img)
            orientation = _png_orientation(data) if kind == "PNG" else _orientation(img)
    w, h = oriented_size(width, height, orientation)
    return h, w, fmt


def _within_file(path: Path, img: Image.Image) -> None:
    """BMP and TIFF headers say where the image data lies: a truncated file ends before it."""
    end = None
    if img.format == "BMP" and img.tile and img.tile[0][0] == "raw" and len(img.tile[0][3]) > 1:
        end = img.tile[0][2] + abs(int(img.tile[0][3][1] or 0)) * img.size[1]
    elif img.format == "TIFF":
        tags = img.tag_v2
        for offsets, counts in ((273, 279), (324, 325)):  # strips, tiles
            if offsets in tags and counts in tags:
                pairs = zip(_as_tuple(tags[offsets]), _as_tuple(tags[counts]), strict=False)
                end = max((int(o) + int(c) for o, c in pairs), default=None)
                break
    size = path.stat().st_size
    if end is not None and end > size:
        raise DataError(f"{path}: truncated {img.format}: its header places image data up to byte {end}, "
                        f"the file ends at byte {size}; re-export or remove it")


def _as_tuple(value) -> tuple:
    return value if isinstance(value, tuple) else (value,)


def save_image(path: str | Path, bgr: np.ndarray, quality: int = 95) -> Path:
    """Write a BGR uint8 image (format from the suffix: .jpg, .png, ...); the one way the package writes
    images. ``cv2.imwrite`` takes the path as UTF-8 text and crashes the process (signal 11) on a name
    that is not valid UTF-8; encoding in memory and writing the bytes takes any name the OS does.

    Raises:
        DataError: the image cannot be encoded in that format, or the file cannot be written.
    """
    path = Path(path)
    suffix = path.suffix.lower() or ".png"
    params = [cv2.IMWRITE_JPEG_QUALITY, quality] if suffix in (".jpg", ".jpeg") else []
    try:
        ok, encoded = cv2.imencode(suffix, bgr, params) if suffix.isascii() else (False, None)
    except cv2.error:
        ok = False
    if not ok:
        raise DataError(f"{path}: cannot encode an image as {suffix!r}; use .jpg or .png")
    try:
        path.write_bytes(encoded.tobytes())
    except OSError as err:
        raise DataError(f"{path}: cannot write the image ({err.strerror or err}); check the folder") from None
    return path
