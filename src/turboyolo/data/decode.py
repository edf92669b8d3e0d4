"""Image decode: reduced-size JPEG decode, EXIF orientation, every mode -> RGB uint8.

The expensive part of a large JPEG is its full-resolution decode. libjpeg can decode directly at 1/2,
1/4 or 1/8 scale (PIL ``draft``), skipping most of the IDCT, upsampling and colour work; what stays is
the entropy (Huffman) decode, which is the floor. We ask for the smallest such scale whose longer
side is still >= the target, then resize to exactly the target with an area filter (linear when
enlarging). Everything after this works on target-sized images. At 1/8 scale a progressive JPEG's
full-resolution AC scans (most of its bytes) are not even entropy-decoded: that scale never reads them
(:func:`turboyolo.formats.images.eighth_scale_jpeg`, the same pixels bit for bit).

Every image read in the package goes through here, with one set of checks (:func:`probe_image` for
the scan, :func:`decode_image` for the loader, the prepared cache, detect, label and the API): the file
is read once; JPEG and PNG files must pass the structure checks of :mod:`turboyolo.formats.images`
(a PNG with a bad CRC, a JPEG with garbage in its image data, a truncated file); a JPEG's image data
is decoded by libjpeg-turbo with its warnings as errors (simplejpeg; Pillow's decoder, the same library,
silences them), so damaged entropy-coded data is refused (the scan decodes it at 1/8 scale, the entropy
decode being most of the cost), with the pixels Pillow would give; the scan decodes the other
formats whole (a truncated BMP or TIFF, a PNG whose compressed data is damaged under valid CRCs); an
image that declares more pixels than :func:`pixel_limit` is refused before anything is allocated (a
decompression bomb: a small PNG that declares 30000 x 30000). Each failure is a :class:`DataError`
naming the file, the reason and the fix.
"""

from __future__ import annotations

import errno
import io
import re
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import cv2
import numpy as np
import simplejpeg
from PIL import Image, ImageFile, UnidentifiedImageError

from turboyolo.errors import DataError
from turboyolo.formats.datasets import link_problem
from turboyolo.formats.images import declared_size, eighth_scale_jpeg, jpeg_problem, png_problem, sniff

ImageFile.LOAD_TRUNCATED_IMAGES = False  # a truncated file must fail, not return grey rows
_PIL_ERRORS = (UnidentifiedImageError, OSError, SyntaxError, ValueError, EOFError, RuntimeError,
               Image.DecompressionBombError)

EXIF_ORIENTATION = 0x0112
_JPEG_FORMATS = ("JPEG", "MPO")
# libjpeg's warnings about a JPEG's image data: each means that part of the picture decodes as garbage
# (the decoder lost its place in the entropy-coded data, or the data ends early).
_DAMAGE = ("Corrupt JPEG data", "Premature end of JPEG file", "Inconsistent progression sequence")
# Harmless ones: a damaged ICC profile (colour metadata, the pixels decode whole), and a stray byte
# after the last block before the end marker, which some encoders write.
DECODES: Counter[str] = Counter()  # path -> decodes by :func:`decode_image` in this process (tests read it)
_HARMLESS = re.compile(r"bad ICC marker|: 1 extraneous bytes before marker 0xd9")


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


def _read(path: Path) -> tuple[bytes | None, str | None]:
    """(whole file, ``"JPEG"``/``"PNG"``) for the formats checked here; (None, None) for the others,
    which Pillow reads from the path. Raises DataError for a missing, unreadable or empty file."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(8)
            kind = sniff(head)
            data = head + handle.read() if kind else None
    except FileNotFoundError:
        raise DataError(f"{path}: image not found; fix the list file or restore the image") from None
    except IsADirectoryError:
        raise DataError(f"{path}: a folder where an image was expected; fix the list file") from None
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise DataError(f"{path}: {link_problem(path)}; fix or remove the link") from None
        raise DataError(f"{path}: image unreadable ({err.strerror or err}); check its permissions") from None
    if not head:
        raise DataError(f"{path}: zero-byte image file; re-export or remove it")
    return data, kind


def _check(path: Path, data: bytes | None, kind: str | None) -> bool:
    """The structure checks of JPEG and PNG files; returns whether a PNG has an eXIf chunk after its
    image data (its orientation is then only known after a full decode)."""
    if kind == "JPEG":
        problem, late_exif = jpeg_problem(data), False
    elif kind == "PNG":
        problem, late_exif = png_problem(data)
    else:
        return False
    if problem:
        raise DataError(f"{path}: {problem}; re-export or remove it")
    return late_exif


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


def decode_image(path: str | Path, target: int | None = None) -> tuple[np.ndarray, tuple[int, int]]:
    """Decode an image file to RGB uint8, EXIF orientation applied; also its full-resolution size.

    Args:
        path: JPEG, PNG, BMP, TIFF or WebP; grayscale, RGBA, palette, 16-bit and CMYK become RGB.
        target: when given, the longer side of the result equals ``target`` (JPEG decoded at the
            smallest 1/2^k scale still >= target, then area-resized); ``None`` = full resolution.

    Returns:
        (uint8 [H, W, 3] RGB C-contiguous, (orig_h, orig_w) of the full-resolution oriented image).

    Raises:
        DataError: naming the file, when it is missing, empty, truncated, damaged (the checks of
            :func:`probe_image`), too large (:func:`pixel_limit`) or not an image.
    """
    path = Path(path)
    DECODES[str(path)] += 1
    data, kind = _read(path)
    _check(path, data, kind)
    with _opened(path, data) as img:
        # Pillow finds a PNG's eXIf chunk after the pixels only once they are decoded: read it after load().
        orientation = _orientation(img) if img.format != "PNG" else 1
        width, height = img.size
        array = _strict_jpeg(path, data, img, target, whole=False) if img.format in _JPEG_FORMATS else None
        if array is None:
            request = _draft_request(img, target)
            if request is not None:
                img.draft(img.mode, request)
            img.load()
            if img.format == "PNG":
                orientation = _orientation(img)
            array = _to_rgb_uint8(img)
    if target is not None:
        out_w, out_h = target_size(width, height, target)
        array = _resize(array, out_w, out_h)
    array = apply_orientation(array, orientation)
    orig_w, orig_h = oriented_size(width, height, orientation)
    return np.ascontiguousarray(array), (orig_h, orig_w)


def _draft_request(img: Image.Image, target: int | None) -> tuple[int, int] | None:
    """The size to ask Pillow's JPEG ``draft`` for (a reduced decode), or None for a full decode."""
    if target is None or img.format not in _JPEG_FORMATS or img.mode not in ("RGB", "L", "CMYK"):
        return None
    width, height = img.size
    scale = target / max(width, height)
    if scale >= 1:
        return None
    return max(1, int(np.ceil(width * scale))), max(1, int(np.ceil(height * scale)))


def _draft_scale(img: Image.Image, target: int | None) -> int:
    """The 1/scale Pillow's ``draft`` picks for :func:`_draft_request` (1, 2, 4 or 8)."""
    request = _draft_request(img, target)
    if request is None:
        return 1
    ratio = min(img.size[0] // request[0], img.size[1] // request[1])
    return next(scale for scale in (8, 4, 2, 1) if ratio >= scale)


def _decode_jpeg(data: bytes, mode: str, out_h: int, out_w: int, eighth: bool) -> np.ndarray:
    """libjpeg-turbo's decode at the smallest scale >= (out_h, out_w); with ``eighth`` (a 1/8 decode that
    need not check all image data) from :func:`eighth_scale_jpeg`'s shorter stream where it has one, the
    same pixels; any warning there is left to the whole file's decode to name.

    Raises:
        ValueError: libjpeg's error or warning on the whole file.
    """
    try:
        short = eighth_scale_jpeg(data) if eighth else None
    except (IndexError, ValueError):  # a header it cannot follow: the whole file's decode decides
        short = None
    if short is not None:
        try:
            return simplejpeg.decode_jpeg(short, mode, min_height=out_h, min_width=out_w)
        except ValueError:
            pass
    return simplejpeg.decode_jpeg(data, mode, min_height=out_h, min_width=out_w)


def _strict_jpeg(path: Path, data: bytes, img: Image.Image, target: int | None,
                 whole: bool = True) -> np.ndarray | None:
    """A JPEG decoded by libjpeg-turbo that treats a warning about damaged image data as an error.

    Pillow's decoder (the same library) silences libjpeg's warnings, so a JPEG whose entropy-coded data
    is damaged decodes to smeared blocks without a word. Here the same pixels come from the same scaled
    decode Pillow would make (1/2, 1/4 or 1/8 for ``target``, default quality settings), or a
    :class:`DataError` naming the damage. Returns None where Pillow decodes instead (CMYK, tiny images,
    a harmless warning, a feature the simple API lacks); their image data is still checked, at 1/8.
    ``whole=False`` (a decode for its pixels, not the scan's check): at 1/8 scale a progressive file's
    AC scans that cannot change the pixels are not decoded (:func:`eighth_scale_jpeg`).
    """
    scale = _draft_scale(img, target)
    width, height = img.size
    direct = img.mode in ("RGB", "L") and (scale == 1 or min(width, height) >= 16)
    out_w, out_h = (-(-width // scale), -(-height // scale)) if direct else (1, 1)
    try:
        array = _decode_jpeg(data, "RGB" if direct else "GRAY", out_h, out_w, eighth=not whole and scale == 8)
    except ValueError as err:
        damage = _jpeg_damage(str(err))
        if damage:
            raise DataError(f"{path}: corrupt JPEG: the image data does not decode cleanly (libjpeg: "
                            f"{damage}); part of the picture would be garbage: re-export or remove it"
                            ) from None
        return None
    return array if direct and array.shape[:2] == (out_h, out_w) else None


def _jpeg_damage(message: str) -> str | None:
    """libjpeg's message when it reports damaged image data, else None (a harmless warning or an error
    that is not about damage: the caller lets Pillow decide)."""
    if message.startswith(_DAMAGE) and not _HARMLESS.search(message):
        return message
    return None


def probe_image(path: str | Path) -> tuple[int, int, str]:
    """The scan's check: ``(height, width, format)`` after EXIF.

    Refuses what :func:`decode_image` refuses: a missing, zero-byte or non-image file, a picture over
    :func:`pixel_limit` (from its header, before anything is decoded), a JPEG or PNG that fails the
    structure checks of :mod:`turboyolo.formats.images` (truncated, bad CRC, garbage in the image data),
    image data that does not decode (a JPEG's at 1/8 scale; the other formats' whole).

    Raises:
        DataError: naming the file and the reason.
    """
    path = Path(path)
    data, kind = _read(path)
    late_exif = _check(path, data, kind)
    with _opened(path, data) as img:
        fmt = img.format or "?"
        width, height = img.size
        if fmt in _JPEG_FORMATS:  # the image data, decoded at 1/8 (the entropy decode is most of the cost)
            _strict_jpeg(path, data, img, 1)
        else:
            # No cheaper check of the image data than decoding it (for a PNG, inflating its data is most
            # of the cost): a truncated BMP, TIFF or WebP, a PNG whose compressed data is damaged under
            # valid CRCs. Pillow then has any eXIf chunk that came after a PNG's pixels too.
            img.load()
        has_exif = fmt != "PNG" or "exif" in img.info or late_exif
        orientation = _orientation(img) if has_exif else 1
    w, h = oriented_size(width, height, orientation)
    return h, w, fmt


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
