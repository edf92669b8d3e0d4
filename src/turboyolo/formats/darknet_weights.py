"""Darknet ``.weights`` files: a header then one flat float32 array.

Header: int32 major, minor, revision, then ``seen`` (images trained on) as int64 when
``major * 10 + minor >= 2`` (and both < 1000), else int32. The array holds, per convolution in layer
order, BN bias, BN weight, running mean, running var (or the conv bias), then the conv weights.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from turboyolo.errors import WeightsError


@dataclass(frozen=True)
class WeightsHeader:
    major: int = 0
    minor: int = 2
    revision: int = 0
    seen: int = 0

    @property
    def seen_is_64bit(self) -> bool:
        return self.major * 10 + self.minor >= 2 and self.major < 1000 and self.minor < 1000


def read_weights(path: str | Path) -> tuple[WeightsHeader, np.ndarray]:
    """Read a ``.weights`` file into its header and flat float32 array."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise WeightsError(f"{path}: cannot read weights ({err.strerror or err})") from err
    if len(raw) < 16:
        raise WeightsError(f"{path}: {len(raw)} bytes is too short for a Darknet .weights header")
    major, minor, revision = (int(v) for v in np.frombuffer(raw, np.int32, 3))
    header = WeightsHeader(major, minor, revision)
    seen_bytes = 8 if header.seen_is_64bit else 4
    seen = int(np.frombuffer(raw, np.int64 if seen_bytes == 8 else np.int32, 1, offset=12)[0])
    body = raw[12 + seen_bytes :]
    if len(body) % 4:
        raise WeightsError(
            f"{path}: body of {len(body)} bytes is not a whole number of float32 values; "
            "the file is truncated or not a Darknet .weights file"
        )
    return WeightsHeader(major, minor, revision, seen), np.frombuffer(body, np.float32)


def weights_body_floats(path: str | Path) -> tuple[int, int]:
    """(whole float32 values after the header, bytes left over) from the file size and its header
    alone, without reading the body: what a size check against a cfg needs."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            head = handle.read(12)
    except OSError as err:
        raise WeightsError(f"{path}: cannot read weights ({err.strerror or err})") from err
    if len(head) < 12 or size < 16:
        raise WeightsError(f"{path}: {size} bytes is too short for a Darknet .weights header")
    header = WeightsHeader(*(int(v) for v in np.frombuffer(head, np.int32, 3)))
    body = size - 12 - (8 if header.seen_is_64bit else 4)
    return max(body, 0) // 4, max(body, 0) % 4


def write_weights(path: str | Path, header: WeightsHeader, flat: np.ndarray) -> Path:
    """Write atomically (temporary file + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as handle:
        np.array([header.major, header.minor, header.revision], np.int32).tofile(handle)
        np.array([header.seen], np.int64 if header.seen_is_64bit else np.int32).tofile(handle)
        np.ascontiguousarray(flat, np.float32).tofile(handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    return path


def cutoff_from_name(path: str | Path) -> int | None:
    """``darknet53.conv.74`` -> 74: the layer count a backbone file covers, or None."""
    match = re.search(r"\.conv\.(\d+)$", Path(path).name)
    return int(match.group(1)) if match else None
