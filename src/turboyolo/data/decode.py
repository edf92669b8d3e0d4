"""Image decode: reduced-size JPEG decode, EXIF orientation, every mode -> RGB uint8.

The expensive part of a large JPEG is its full-resolution decode. libjpeg can decode directly at 1/2,
1/4 or 1/8 scale (PIL ``draft``), skipping most of the IDCT, upsampling and colour work; what stays is
the entropy (Huffman) decode, which is the floor. We ask for the smallest such scale whose longer
side is still >= the target, then resize to exactly the target with an area filter (linear when
enlarging). Everything after this works on target-sized images.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
from PIL import Image, ImageFile, UnidentifiedImageError

from turboyolo.errors import DataError

ImageFile.LOAD_TRUNCATED_IMAGES = False  # a truncated file must fail, not return grey rows

EXIF_ORIENTATION = 0x0112
_JPEG_FORMATS = ("JPEG", "MPO")


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
        DataError: naming the file, when it is missing, empty, truncated or not an image.
    """
    path = Path(path)
    try:
        with Image.open(path) as img:
            orientation = _orientation(img)
            width, height = img.size
            if target is not None and img.format in _JPEG_FORMATS and img.mode in ("RGB", "L", "CMYK"):
                scale = target / max(width, height)
                if scale < 1:
                    request = (max(1, int(np.ceil(width * scale))), max(1, int(np.ceil(height * scale))))
                    img.draft(img.mode, request)
            img.load()
            array = _to_rgb_uint8(img)
    except FileNotFoundError:
        raise DataError(f"{path}: image not found; fix the list file or restore the image") from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as err:
        raise DataError(f"{path}: unreadable image ({err}); re-export or remove it") from None
    if target is not None:
        out_w, out_h = target_size(width, height, target)
        array = _resize(array, out_w, out_h)
    array = apply_orientation(array, orientation)
    orig_w, orig_h = oriented_size(width, height, orientation)
    return np.ascontiguousarray(array), (orig_h, orig_w)


def probe_image(path: str | Path) -> tuple[int, int, str]:
    """Cheap validity check without a full decode: ``(height, width, format)`` after EXIF.

    Detects zero-byte, non-image and truncated JPEG/PNG files (JPEG must end with the EOI marker,
    PNG must verify through IEND).

    Raises:
        DataError: naming the file and the reason.
    """
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as err:
        raise DataError(f"{path}: image not found ({err.strerror})") from None
    if size == 0:
        raise DataError(f"{path}: zero-byte image file")
    try:
        with Image.open(path) as img:
            fmt = img.format or "?"
            width, height = img.size
            if fmt == "PNG":
                img.verify()  # chunk CRCs through IEND; must come first, and leaves img unusable
        with Image.open(path) as img:
            orientation = _orientation(img)
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, RuntimeError) as err:
        raise DataError(f"{path}: not a readable image ({err})") from None
    if fmt in _JPEG_FORMATS:
        with open(path, "rb") as handle:
            handle.seek(max(0, size - 64))
            tail = handle.read().rstrip(b"\x00\r\n ")
        if not tail.endswith(b"\xff\xd9"):
            raise DataError(f"{path}: truncated JPEG (no end-of-image marker)")
    if width <= 0 or height <= 0:
        raise DataError(f"{path}: image has zero size")
    w, h = oriented_size(width, height, orientation)
    return h, w, fmt
